// conv_dw_tma_bwd_weight: depthwise backward-weight on Hopper's tensor memory accelerator
// (sm_90a), with conv_dw_tma's tiles (dw_tma.cuh). Block (split, channel block) walks the
// output tiles split, split + splits, ... of its CH channels; each tile's dy and the input under
// it (with its halo) arrive by two bulk tensor copies into one of STAGES stages, STAGES - 1 tiles
// ahead. Thread t owns VEC channels of one dy column in one of ROWS bands of the tile's rows and
// keeps their FR x FR sums in registers over all its tiles: it walks its band's input rows once,
// each row's FR columns read once and multiplied by the dy rows they meet. Then the block adds
// its threads' sums in shared memory, and the splits' sums meet without atomics (dw_sums.cuh:
// in a workspace that dw_tma_reduce adds up, or in a thread-block cluster's shared memory).
#define DW_OP 2
#include "dw_sums.cuh"
#define WTHREADS (THREADS * ROWS)                 // a block's threads
#define DY_BYTES (TILE_H * TILE_W * CH * 2)
#define X_STAGE ((BOX_BYTES + 1023) / 1024 * 1024)
#define TILE_STAGE (X_STAGE + (DY_BYTES + 1023) / 1024 * 1024)
#define SUM_PITCH (WTHREADS + 1)                   // a (tap, channel of a piece)'s row of sums
#define SUMS_BYTES (FR * FR * VEC * SUM_PITCH * 4 + CH * FR * FR * 4)
#define REGION (STAGES * TILE_STAGE > SUMS_BYTES ? STAGES * TILE_STAGE : SUMS_BYTES)

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_dw_tma_bwd_weight needs sm_90a (bulk tensor copies)"
#endif
// 16-bit elements only: fp32 instances are not generated; the stubs keep the source compilable.
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, void*, ConvParams,
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

#if CLUSTER > 1
#define WEIGHT_KERNEL extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
#else
#define WEIGHT_KERNEL extern "C" __global__ void
#endif

WEIGHT_KERNEL __launch_bounds__(WTHREADS, OCC)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  void* __restrict__ out, ConvParams p, int splits,
                  const __grid_constant__ TensorMap tmap_x,
                  const __grid_constant__ TensorMap tmap_dy) {
  using namespace dw;
  const Geometry g = geometry(p);
  const int tid = threadIdx.x, piece = tid % PIECES, col = (tid / PIECES) % TILE_W;
  const int band = tid / THREADS, in0 = band * BAND_H * STRIDE, dy0 = band * BAND_H;
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
    float dv[BAND_H][VEC];
#pragma unroll
    for (int ih = 0; ih < BAND_IN; ++ih) {
      if (ih % STRIDE == 0 && ih / STRIDE < BAND_H)  // dy row ih / STRIDE's first input row
        unpack(*reinterpret_cast<const raw_t*>(
                   din + box_offset((dy0 + ih / STRIDE) * TILE_W + col, piece)),
               dv[ih / STRIDE]);
#pragma unroll
      for (int s = 0; s < FR; ++s) {
        float u[VEC];
        unpack(*reinterpret_cast<const raw_t*>(
                   in + box_offset((in0 + ih) * IN_W + col * STRIDE + s, piece)),
               u);
#pragma unroll
        for (int r = 0; r < FR; ++r) {
          const int d = ih - r;
          if (d < 0 || d % STRIDE || d / STRIDE >= BAND_H) continue;
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
  // The block's threads added up: sums[(t * VEC + e) * SUM_PITCH + thread] (the pitch keeps a
  // warp's reads of one tap's channels in distinct banks), then per (tap, channel) into
  // part[t * CH + channel].
  float* sums = reinterpret_cast<float*>(base);
  float* part = sums + FR * FR * VEC * SUM_PITCH;
#pragma unroll
  for (int t = 0; t < FR * FR; ++t)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sums[(t * VEC + e) * SUM_PITCH + tid] = acc[t][e];
  __syncthreads();
  constexpr int taps = FR * FR;
  for (int j = tid; j < CH * taps; j += WTHREADS) {
    const int t = j / CH, cl = j - t * CH;
    const float* from = sums + (t * VEC + cl % VEC) * SUM_PITCH + cl / VEC;
    float total = 0.0f;
#pragma unroll 4
    for (int q = 0; q < WTHREADS / PIECES; ++q) total += from[q * PIECES];
    part[j] = total;
  }
  meet_splits<WTHREADS>(part, out, g, split, cb, tid);
}
#endif

// dw = the splits' slices of the workspace added up, converted. A block takes 32 consecutive
// entries at a time; its warp w adds slices w, w + 8, ... (each warp's loads coalesced, eight
// sums in flight an entry) and warp 0 adds the eight partial sums.
extern "C" __global__ void __launch_bounds__(256)
dw_tma_reduce(const float* __restrict__ ws, elem_t* __restrict__ dw, int n, int splits) {
  __shared__ float partial[8][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int first = blockIdx.x * 32; first < n; first += gridDim.x * 32) {
    const int i = first + lane;
    float total = 0.0f;
    if (i < n)
      for (int k = warp; k < splits; k += 8) total += ws[(long)k * n + i];
    partial[warp][lane] = total;
    __syncthreads();
    if (warp == 0 && i < n) {
#pragma unroll
      for (int w = 1; w < 8; ++w) total += partial[w][lane];
      dw[i] = from_float(total);
    }
    __syncthreads();
  }
}
