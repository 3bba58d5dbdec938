// conv_dw_tma_bwd_weight: depthwise backward-weight on Hopper's tensor memory accelerator
// (sm_90a), with conv_dw_tma's tiles (dw_tma.cuh). Block (split, channel block) walks the
// output tiles split, split + splits, ... of its CH channels; each tile's dy and the input under
// it (with its halo) arrive by two bulk tensor copies into one of STAGES stages, STAGES - 1 tiles
// ahead. Thread t owns VEC channels of one dy column and keeps their FR x FR sums in registers
// over all its tiles: it walks the tile's input rows once, each row's FR columns read once and
// multiplied by the dy rows they meet. Then the block adds its columns' sums in shared memory
// and writes them, fp32, into its split's slice of the workspace (laid out as dw: no atomics);
// dw_tma_reduce adds the slices and converts.
#define DW_OP 2
#include "dw_tma.cuh"

#define DY_BYTES (TILE_H * TILE_W * CH * 2)
#define X_STAGE ((BOX_BYTES + 1023) / 1024 * 1024)
#define TILE_STAGE (X_STAGE + (DY_BYTES + 1023) / 1024 * 1024)
#define SUMS_BYTES (FR * FR * VEC * THREADS * 4)
#define REGION (STAGES * TILE_STAGE > SUMS_BYTES ? STAGES * TILE_STAGE : SUMS_BYTES)

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_dw_tma_bwd_weight needs sm_90a (bulk tensor copies)"
#endif
// 16-bit elements only: fp32 instances are not generated; the stubs keep the source compilable.
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, float*, ConvParams,
                                             int) {}
#else

extern __shared__ __align__(1024) unsigned char dw_smem[];

namespace dw {

// Tile `it`'s input box and dy box into one stage, on one mbarrier.
__device__ __forceinline__ void fetch_pair(unsigned char* stage, const TensorMap& map_x,
                                           const TensorMap& map_dy, u64* bar, const Item& it,
                                           const Geometry& g) {
  sm90_mbar_expect(bar, BOX_BYTES + DY_BYTES);
  sm90_tma_4d(stage, map_x, it.cb * CH, it.ow0 * STRIDE - g.pw, it.oh0 * STRIDE - g.ph, it.n,
              bar);
  sm90_tma_4d(stage + X_STAGE, map_dy, it.cb * CH, it.ow0, it.oh0, it.n, bar);
}

}  // namespace dw

extern "C" __global__ void __launch_bounds__(THREADS, OCC)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  float* __restrict__ ws, ConvParams p, int splits,
                  const __grid_constant__ TensorMap tmap_x,
                  const __grid_constant__ TensorMap tmap_dy) {
  using namespace dw;
  const Geometry g = geometry(p);
  const int tid = threadIdx.x, piece = tid % PIECES, col = tid / PIECES;
  const int split = blockIdx.x, cb = blockIdx.y, blocks = gridDim.y;
  const int spatial = g.N * ((g.Ho + TILE_H - 1) / TILE_H) * ((g.Wo + TILE_W - 1) / TILE_W);
  u64* bars;
  unsigned char* base = stages_and_barriers(dw_smem, REGION, bars);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int tile = split + s * splits;
      if (tile < spatial)
        fetch_pair(base + s * TILE_STAGE, tmap_x, tmap_dy, &bars[s],
                   item_of(tile * blocks + cb, g), g);
    }
  }
  float acc[FR * FR][VEC];
#pragma unroll
  for (int t = 0; t < FR * FR; ++t)
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[t][e] = 0.0f;
  int k = 0;
  for (int tile = split; tile < spatial; tile += splits, ++k) {
    const int stage = k % STAGES;
    const unsigned char* in = base + stage * TILE_STAGE;
    const unsigned char* din = in + X_STAGE;
    sm90_mbar_wait(&bars[stage], (k / STAGES) & 1);
    // zeros outside x and past dy's edge (the boxes' fill), so every pixel of the tile counts
    float dv[TILE_H][VEC];
#pragma unroll
    for (int ih = 0; ih < IN_H; ++ih) {
      if (ih % STRIDE == 0 && ih / STRIDE < TILE_H)  // dy row ih / STRIDE's first input row
        unpack(*reinterpret_cast<const raw_t*>(din + box_offset((ih / STRIDE) * TILE_W + col,
                                                                 piece)),
               dv[ih / STRIDE]);
#pragma unroll
      for (int s = 0; s < FR; ++s) {
        float u[VEC];
        unpack(*reinterpret_cast<const raw_t*>(in + box_offset(ih * IN_W + col * STRIDE + s,
                                                                piece)),
               u);
#pragma unroll
        for (int r = 0; r < FR; ++r) {
          const int d = ih - r;
          if (d < 0 || d % STRIDE || d / STRIDE >= TILE_H) continue;
#pragma unroll
          for (int e = 0; e < VEC; ++e)
            acc[r * FR + s][e] = fmaf(u[e], dv[d / STRIDE][e], acc[r * FR + s][e]);
        }
      }
    }
    __syncthreads();  // the stage is consumed
    const int next = tile + STAGES * splits;
    if (tid == 0 && next < spatial)
      fetch_pair(base + stage * TILE_STAGE, tmap_x, tmap_dy, &bars[stage],
                 item_of(next * blocks + cb, g), g);
  }
  // The block's columns added up: sums[(t * VEC + e) * THREADS + thread], then per (channel, tap)
  float* sums = reinterpret_cast<float*>(base);
#pragma unroll
  for (int t = 0; t < FR * FR; ++t)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[(t * VEC + e) * THREADS + tid] = acc[t][e];
  __syncthreads();
  const int taps = FR * FR;
  float* slice = ws + (long)split * g.C * taps;
  for (int j = tid; j < CH * taps; j += THREADS) {
    const int cl = j / taps, t = j - cl * taps, c = cb * CH + cl;
    if (c >= g.C) break;  // j grows with c
    const float* from = sums + (t * VEC + cl % VEC) * THREADS + cl / VEC;
    float total = 0.0f;
    for (int q = 0; q < TILE_W; ++q) total += from[q * PIECES];
    slice[c * taps + t] = total;
  }
}
#endif

// dw = the splits' slices of the workspace added up, converted.
extern "C" __global__ void dw_tma_reduce(const float* __restrict__ ws, elem_t* __restrict__ dw,
                                         int n, int splits) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    float total = 0.0f;
    for (int k = 0; k < splits; ++k) total += ws[(long)k * n + i];
    dw[i] = from_float(total);
  }
}
