// conv_dw_tma: depthwise convolution (C/G == K/G == 1), forward and unit-stride backward-data,
// channels-last, 16-bit elements, on Hopper's tensor memory accelerator (sm_90a).
//
// Work items are (block of CH channels, output tile of TILE_H x TILE_W pixels of one image), the
// channel block fastest: the blocks running at once read every channel of the same pixels.
// Blocks are persistent: block b takes items b, b + gridDim.x, ... The input under an item's
// tile, with its halo, arrives in shared memory by one bulk tensor copy (box CH channels x IN_W
// x IN_H, 128-byte-swizzled where CH is 64; zeros where the box leaves the tensor, so padding
// costs nothing) into one of STAGES stages, STAGES - 1 items ahead of the one computed.
//
// Thread t owns channels VEC (t % (CH / VEC)) .. + VEC - 1 of the block and the COLS adjacent
// output columns from COLS * ((t / (CH / VEC)) % (TILE_W / COLS)) in band
// t / (CH / VEC * TILE_W / COLS) of the tile's ROWS bands of rows, and walks the band's input
// rows top to bottom: each row's SPAN input columns under its outputs are read once (2 VEC bytes
// each) and added into every output row and column of the band they reach (more COLS: fewer
// reads and conversions a product); an output row is written as soon as its last input row is
// in. More bands: more threads a block, fewer
// accumulators and a shorter chain a thread, the rows between bands read twice. The taps as
// fp32 in registers (FR * FR * VEC: 72 for 3x3 filters and 8 channels, 100 for 5x5 and 4, 98
// for 7x7 and 2); fp32 accumulation.
//
// Macros: DW_OP (0 forward, 1 backward-data: dx = correlation of dy with the filter reversed
// and the padding mirrored), CH (16, 32 or 64), VEC (8, 4 or 2), TILE_H, TILE_W, ROWS, STAGES,
// FR (R == S), STRIDE (both directions), OCC (blocks a multiprocessor the registers must allow:
// the persistent grid's blocks are all resident), COLS (output columns a thread, dividing
// TILE_W).
#include "dw_tma.cuh"

#ifndef COLS
#define COLS 1
#endif
#if TILE_W % COLS
#error "COLS must divide TILE_W"
#endif
#define BAND_THREADS (PIECES * TILE_W / COLS)  // a band's threads
#define SPAN ((COLS - 1) * STRIDE + FR)         // input columns under a thread's outputs

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_dw_tma needs sm_90a (bulk tensor copies)"
#endif
// 16-bit elements only: fp32 instances are not generated; the stubs keep the source compilable.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
#else

extern __shared__ __align__(1024) unsigned char dw_smem[];

__device__ __forceinline__ void depthwise(const elem_t* __restrict__ w, elem_t* __restrict__ out,
                                          const ConvParams& p, const TensorMap& map) {
  using namespace dw;
  const Geometry g = geometry(p);
  const int tid = threadIdx.x, piece = tid % PIECES;
  const int col = (ROWS > 1 ? tid / PIECES % (TILE_W / COLS) : tid / PIECES) * COLS;
  const int items = g.N * ((g.Ho + TILE_H - 1) / TILE_H) * ((g.Wo + TILE_W - 1) / TILE_W) *
                    ((g.C + CH - 1) / CH);
  u64* bars;
  unsigned char* base = stages_and_barriers(dw_smem, STAGES * STAGE_BYTES, bars);
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
      float acc[BAND_H][COLS][VEC];
#pragma unroll
      for (int i = 0; i < BAND_H; ++i)
#pragma unroll
        for (int x = 0; x < COLS; ++x)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[i][x][e] = 0.0f;
      const int band = ROWS > 1 ? tid / BAND_THREADS : 0, in0 = band * BAND_H * STRIDE;
      const int oh0 = it.oh0 + band * BAND_H;
      elem_t* dst = out + ((long)(it.n * g.Ho + oh0) * g.Wo + ow) * g.C + c;
      const long row_step = (long)g.Wo * g.C;
#pragma unroll
      for (int ih = 0; ih < BAND_IN; ++ih) {
#pragma unroll
        for (int q = 0; q < SPAN; ++q) {
          float u[VEC];
          const int at = (in0 + ih) * IN_W + col * STRIDE + q;
          unpack(*reinterpret_cast<const raw_t*>(in + box_offset(at, piece)), u);
#pragma unroll
          for (int x = 0; x < COLS; ++x) {
            const int s = q - x * STRIDE;  // the tap's column for output column x
            if (s < 0 || s >= FR) continue;
#pragma unroll
            for (int r = 0; r < FR; ++r) {
              const int d = ih - r;
              if (d < 0 || d % STRIDE || d / STRIDE >= BAND_H) continue;
              const int oh = d / STRIDE;
              const float* tap = f[r * FR + s];
#pragma unroll
              for (int e = 0; e < VEC; ++e) acc[oh][x][e] = fmaf(u[e], tap[e], acc[oh][x][e]);
            }
          }
        }
        const int done = ih - (FR - 1);  // the output row whose last input row this is
        if (done >= 0 && done % STRIDE == 0 && done / STRIDE < BAND_H) {
          const int oh = done / STRIDE;
#pragma unroll
          for (int x = 0; x < COLS; ++x)
            if (oh0 + oh < g.Ho && (x == 0 || ow + x < g.Wo))  // column 0: ow < Wo
              *reinterpret_cast<raw_t*>(dst + oh * row_step + x * g.C) = pack(acc[oh][x]);
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
extern "C" __global__ void __launch_bounds__(BAND_THREADS * ROWS, OCC)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p, const __grid_constant__ TensorMap tmap_x) {
  depthwise(w, y, p, tmap_x);
}
#elif DW_OP == 1
extern "C" __global__ void __launch_bounds__(BAND_THREADS * ROWS, OCC)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p, const __grid_constant__ TensorMap tmap_dy) {
  depthwise(w, dx, p, tmap_dy);
}
#endif
#endif
