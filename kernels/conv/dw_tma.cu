// conv_dw_tma: depthwise convolution (C/G == K/G == 1), forward and unit-stride backward-data,
// channels-last, 16-bit elements, on Hopper's tensor memory accelerator (sm_90a).
//
// Work items are (block of CH channels, output tile of TILE_H x TILE_W pixels of one image), the
// channel block slowest. Blocks are persistent: block b takes items b, b + gridDim.x, ... The
// input under an item's tile, with its halo, arrives in shared memory by one bulk tensor copy
// (box CH channels x IN_W x IN_H, 128-byte-swizzled where CH is 64; zeros where the box leaves
// the tensor, so padding costs nothing) into one of STAGES stages, STAGES - 1 items ahead of the one computed.
//
// Thread t owns channels 8 (t % (CH / 8)) .. + 7 of the block and output column t / (CH / 8),
// and walks the tile's input rows top to bottom: each row's FR input columns are read once (16
// bytes each) and added into every output row they reach; an output row is written (16 bytes)
// as soon as its last input row is in. The taps as fp32 in registers; fp32 accumulation.
//
// Macros: DW_OP (0 forward, 1 backward-data: dx = correlation of dy with the filter reversed
// and the padding mirrored), CH (16, 32 or 64), TILE_H, TILE_W, STAGES, FR (R == S: 3),
// STRIDE (both directions), OCC (blocks a multiprocessor the registers must allow).
#include "../common.cuh"
#include "../mma_sync.cuh"
#include "../sm90.cuh"

#ifndef DW_OP
#define DW_OP 0
#endif
#ifndef CH
#define CH 64
#endif
#ifndef TILE_H
#define TILE_H 8
#endif
#ifndef TILE_W
#define TILE_W 32
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef FR
#define FR 3
#endif
#ifndef STRIDE
#define STRIDE 1
#endif
#ifndef OCC
#define OCC 1
#endif

#if FR != 3
#error "conv_dw_tma holds a 3x3 filter's taps in registers"
#endif
#define PIECES (CH / 8)
#define THREADS (PIECES * TILE_W)
#define IN_H ((TILE_H - 1) * STRIDE + FR)
#define IN_W ((TILE_W - 1) * STRIDE + FR)
#define BOX_BYTES (IN_H * IN_W * CH * 2)
#define STAGE_BYTES ((BOX_BYTES + 1023) / 1024 * 1024)

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_dw_tma needs sm_90a (bulk tensor copies)"
#endif
// 16-bit elements only: fp32 instances are not generated; the stubs keep the source compilable.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
#else

namespace dw {

// The geometry of one direction: the correlation's input (x, or dy) and output (y, or dx).
struct Geometry {
  int N, C, Hi, Wi, Ho, Wo, ph, pw;
};

__device__ __forceinline__ Geometry geometry(const ConvParams& p) {
#if DW_OP == 0
  return Geometry{p.N, p.C, p.H, p.W, p.P, p.Q, p.pad_h, p.pad_w};
#else
  return Geometry{p.N, p.C, p.P, p.Q, p.H, p.W, FR - 1 - p.pad_h, FR - 1 - p.pad_w};
#endif
}

// Byte offset of the 16-byte piece `piece` of box pixel `q`: rows of CH * 2 bytes, 128-byte
// swizzle where a row is 128 bytes.
__device__ __forceinline__ int box_offset(int q, int piece) {
  return CH == 64 ? q * 128 + ((piece ^ (q & 7)) << 4) : q * (CH * 2) + piece * 16;
}

__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#if FARM_DTYPE == 2
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
#else
    f[2 * i] = half_to_float((u16)(w[i] & 0xffffu));
    f[2 * i + 1] = half_to_float((u16)(w[i] >> 16));
#endif
  }
}

// Tap (r, s) of the correlation for channel c: the filter's, or its reverse in backward-data.
__device__ __forceinline__ int tap_index(int r, int s) {
  return DW_OP == 0 ? r * FR + s : (FR - 1 - r) * FR + (FR - 1 - s);
}

struct Item {
  int n, oh0, ow0, cb;
};

__device__ __forceinline__ Item item_of(int item, const Geometry& g) {
  const int tw = (g.Wo + TILE_W - 1) / TILE_W, th = (g.Ho + TILE_H - 1) / TILE_H;
  const int spatial = g.N * th * tw;
  const int cb = item / spatial, s = item - cb * spatial;
  const int x = s % tw, rest = s / tw;
  return Item{rest / th, (rest % th) * TILE_H, x * TILE_W, cb};
}

__device__ __forceinline__ void fetch(unsigned char* stage, const TensorMap& map, u64* bar,
                                      const Item& it, const Geometry& g) {
  sm90_mbar_expect(bar, BOX_BYTES);
  sm90_tma_4d(stage, map, it.cb * CH, it.ow0 * STRIDE - g.pw, it.oh0 * STRIDE - g.ph, it.n, bar);
}

}  // namespace dw

extern __shared__ __align__(1024) unsigned char dw_smem[];

__device__ __forceinline__ void depthwise(const elem_t* __restrict__ w, elem_t* __restrict__ out,
                                          const ConvParams& p, const TensorMap& map) {
  using namespace dw;
  const Geometry g = geometry(p);
  const int tid = threadIdx.x, piece = tid % PIECES, col = tid / PIECES;
  const int items = g.N * ((g.Ho + TILE_H - 1) / TILE_H) * ((g.Wo + TILE_W - 1) / TILE_W) *
                    ((g.C + CH - 1) / CH);
  unsigned char* base = dw_smem + ((1024 - (sm90_smem(dw_smem) & 1023)) & 1023);
  u64* bars = reinterpret_cast<u64*>(base + STAGES * STAGE_BYTES);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) sm90_mbar_init(&bars[s], 1);
    sm90_mbar_fence_init();
  }
  __syncthreads();
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int item = blockIdx.x + s * gridDim.x;
      if (item < items) fetch(base + s * STAGE_BYTES, map, &bars[s], item_of(item, g), g);
    }
  }
  float f[FR * FR][8];
  int current_cb = -1;
  int k = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x, ++k) {
    const Item it = item_of(item, g);
    const int c = it.cb * CH + 8 * piece;
    const bool live = c < g.C;
    if (it.cb != current_cb) {  // uniform over the block
      current_cb = it.cb;
      // channels c .. c + 7: 72 consecutive 16-bit taps, 16-byte aligned (c is a multiple of 8)
      const uint4* src = reinterpret_cast<const uint4*>(w + (long)c * 9);
#pragma unroll
      for (int i = 0; i < 9; ++i) {
        float v[8];
        unpack8(live ? __ldg(src + i) : make_uint4(0u, 0u, 0u, 0u), v);
#pragma unroll
        for (int e = 0; e < 8; ++e) {
          const int t = (8 * i + e) % 9, ch = (8 * i + e) / 9;
          f[DW_OP == 0 ? t : 8 - t][ch] = v[e];
        }
      }
    }
    const int stage = k % STAGES;
    const unsigned char* in = base + stage * STAGE_BYTES;
    sm90_mbar_wait(&bars[stage], (k / STAGES) & 1);
    const int ow = it.ow0 + col;
    if (live && ow < g.Wo) {
      float acc[TILE_H][8];
#pragma unroll
      for (int i = 0; i < TILE_H; ++i)
#pragma unroll
        for (int e = 0; e < 8; ++e) acc[i][e] = 0.0f;
      elem_t* dst = out + ((long)(it.n * g.Ho + it.oh0) * g.Wo + ow) * g.C + c;
      const long row_step = (long)g.Wo * g.C;
#pragma unroll
      for (int ih = 0; ih < IN_H; ++ih) {
#pragma unroll
        for (int s = 0; s < FR; ++s) {
          float u[8];
          unpack8(*reinterpret_cast<const uint4*>(in + box_offset(ih * IN_W + col * STRIDE + s, piece)),
                  u);
#pragma unroll
          for (int r = 0; r < FR; ++r) {
            const int d = ih - r;
            if (d < 0 || d % STRIDE || d / STRIDE >= TILE_H) continue;
            const int oh = d / STRIDE;
            const float* tap = f[r * FR + s];
#pragma unroll
            for (int e = 0; e < 8; ++e) acc[oh][e] = fmaf(u[e], tap[e], acc[oh][e]);
          }
        }
        const int done = ih - (FR - 1);  // the output row whose last input row this is
        if (done >= 0 && done % STRIDE == 0 && done / STRIDE < TILE_H) {
          const int oh = done / STRIDE;
          if (it.oh0 + oh < g.Ho) {
            const float* a = acc[oh];
            *reinterpret_cast<uint4*>(dst + oh * row_step) =
                make_uint4(pack_pair(a[0], a[1]), pack_pair(a[2], a[3]), pack_pair(a[4], a[5]),
                           pack_pair(a[6], a[7]));
          }
        }
      }
    }
    __syncthreads();  // the stage is consumed
    if (tid == 0 && item + STAGES * gridDim.x < items) {
      const int next = item + STAGES * gridDim.x;
      fetch(base + stage * STAGE_BYTES, map, &bars[stage], item_of(next, g), g);
    }
  }
}

#if DW_OP == 0
extern "C" __global__ void __launch_bounds__(THREADS, OCC)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p, const __grid_constant__ TensorMap tmap_x) {
  depthwise(w, y, p, tmap_x);
}
#else
extern "C" __global__ void __launch_bounds__(THREADS, OCC)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p, const __grid_constant__ TensorMap tmap_dy) {
  depthwise(w, dx, p, tmap_dy);
}
#endif
#endif
