// conv_dw_tma: depthwise convolution (C/G == K/G == 1), forward and unit-stride backward-data,
// channels-last, 16-bit elements, on Hopper's tensor memory accelerator (sm_90a).
//
// Work items are (block of CH channels, output tile of TILE_H x TILE_W pixels of one image), the
// channel block fastest: the blocks running at once read every channel of the same pixels. Blocks are persistent: block b takes items b, b + gridDim.x, ... The
// input under an item's tile, with its halo, arrives in shared memory by one bulk tensor copy
// (box CH channels x IN_W x IN_H, 128-byte-swizzled where CH is 64; zeros where the box leaves
// the tensor, so padding costs nothing) into one of STAGES stages, STAGES - 1 items ahead of
// the one computed.
//
// Thread t owns channels VEC (t % (CH / VEC)) .. + VEC - 1 of the block and output column
// t / (CH / VEC), and walks the tile's input rows top to bottom: each row's FR input columns
// are read once (2 VEC bytes each) and added into every output row they reach; an output row
// is written as soon as its last input row is in. The taps as fp32 in registers (FR * FR *
// VEC: 72 for 3x3 filters and 8 channels, 100 for 5x5 and 4, 98 for 7x7 and 2); fp32
// accumulation.
//
// Macros: DW_OP (0 forward, 1 backward-data: dx = correlation of dy with the filter reversed
// and the padding mirrored), CH (16, 32 or 64), VEC (8, 4 or 2), TILE_H, TILE_W, STAGES, FR
// (R == S), STRIDE (both directions), OCC (blocks a multiprocessor the registers must allow:
// the persistent grid's blocks are all resident).
#include "../common.cuh"
#include "../mma_sync.cuh"
#include "../sm90.cuh"

#ifndef DW_OP
#define DW_OP 0
#endif
#ifndef CH
#define CH 64
#endif
#ifndef VEC
#define VEC 8
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

#define PIECES (CH / VEC)
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
  const int byte = piece * VEC * 2;
  return CH == 64 ? q * 128 + (((byte >> 4) ^ (q & 7)) << 4) + (byte & 15) : q * (CH * 2) + byte;
}

// VEC 16-bit elements as one load or store.
#if VEC == 8
typedef uint4 raw_t;
#elif VEC == 4
typedef uint2 raw_t;
#else
typedef u32 raw_t;
#endif

__device__ __forceinline__ void unpack(const raw_t& v, float (&f)[VEC]) {
  const u32* w = reinterpret_cast<const u32*>(&v);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) {
#if FARM_DTYPE == 2
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
#else
    f[2 * i] = half_to_float((u16)(w[i] & 0xffffu));
    f[2 * i + 1] = half_to_float((u16)(w[i] >> 16));
#endif
  }
}

__device__ __forceinline__ raw_t pack(const float (&a)[VEC]) {
  raw_t r;
  u32* w = reinterpret_cast<u32*>(&r);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) w[i] = pack_pair(a[2 * i], a[2 * i + 1]);
  return r;
}

struct Item {
  int n, oh0, ow0, cb;
};

__device__ __forceinline__ Item item_of(int item, const Geometry& g) {
  const int tw = (g.Wo + TILE_W - 1) / TILE_W, th = (g.Ho + TILE_H - 1) / TILE_H;
  const int blocks = (g.C + CH - 1) / CH;
  const int s = item / blocks, cb = item - s * blocks;
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
  float f[FR * FR][VEC];
  int current_cb = -1;
  int k = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x, ++k) {
    const Item it = item_of(item, g);
    const int c = it.cb * CH + VEC * piece;
    const bool live = c < g.C;
    if (it.cb != current_cb) {  // uniform over the block
      current_cb = it.cb;
      // channels c .. c + VEC - 1: FR * FR * VEC consecutive 16-bit taps, aligned to 2 VEC
      // bytes (c is a multiple of VEC, FR * FR odd); reversed in backward-data
      const raw_t* src = reinterpret_cast<const raw_t*>(w + (long)c * FR * FR);
#pragma unroll
      for (int i = 0; i < FR * FR; ++i) {
        float v[VEC];
        const raw_t zero{};
        unpack(live ? __ldg(src + i) : zero, v);
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const int t = (VEC * i + e) % (FR * FR), ch = (VEC * i + e) / (FR * FR);
          f[DW_OP == 0 ? t : FR * FR - 1 - t][ch] = v[e];
        }
      }
    }
    const int stage = k % STAGES;
    const unsigned char* in = base + stage * STAGE_BYTES;
    sm90_mbar_wait(&bars[stage], (k / STAGES) & 1);
    const int ow = it.ow0 + col;
    if (live && ow < g.Wo) {
      float acc[TILE_H][VEC];
#pragma unroll
      for (int i = 0; i < TILE_H; ++i)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[i][e] = 0.0f;
      elem_t* dst = out + ((long)(it.n * g.Ho + it.oh0) * g.Wo + ow) * g.C + c;
      const long row_step = (long)g.Wo * g.C;
#pragma unroll
      for (int ih = 0; ih < IN_H; ++ih) {
#pragma unroll
        for (int s = 0; s < FR; ++s) {
          float u[VEC];
          const int q = ih * IN_W + col * STRIDE + s;
          unpack(*reinterpret_cast<const raw_t*>(in + box_offset(q, piece)), u);
#pragma unroll
          for (int r = 0; r < FR; ++r) {
            const int d = ih - r;
            if (d < 0 || d % STRIDE || d / STRIDE >= TILE_H) continue;
            const int oh = d / STRIDE;
            const float* tap = f[r * FR + s];
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[oh][e] = fmaf(u[e], tap[e], acc[oh][e]);
          }
        }
        const int done = ih - (FR - 1);  // the output row whose last input row this is
        if (done >= 0 && done % STRIDE == 0 && done / STRIDE < TILE_H) {
          const int oh = done / STRIDE;
          if (it.oh0 + oh < g.Ho) *reinterpret_cast<raw_t*>(dst + oh * row_step) = pack(acc[oh]);
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
