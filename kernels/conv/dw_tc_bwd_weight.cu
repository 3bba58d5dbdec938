// conv_dw_tc_bwd_weight: depthwise backward-weight on the tensor cores (sm_90a), with
// conv_dw_tma's tiles of 64 channels (dw_tma.cuh). Block (split, channel block) walks the dy
// tiles split, split + splits, ... ; each tile's dy and the input under it (with its halo)
// arrive by two bulk tensor copies (128-byte swizzled) into one of STAGES stages, STAGES - 1
// tiles ahead.
//
// dw[c][tap] = sum over pixels of x[pixel + tap][c] * dy[pixel][c], for the 8 channels of a
// warp's group, as mma.sync m16n8k16 over k = 16 dy pixels (two runs of 8 along a dy row):
// A's rows are (two taps) x (the 8 channels), gathered from the input box by ldmatrix.trans at
// the taps' shifts; B is the 16 pixels' dy of the 8 channels; D[(tap, c)][c'] is kept where
// c == c' (the diagonal), the other entries are discarded. The products of two 16-bit values are
// exact in fp32 and the sums fp32. Warp w takes channel group w (of 8) and every k step of a
// tile, and holds ceil(FR * FR / 2) accumulator tiles over all its tiles.
// Then the splits' sums meet as in conv_dw_tma_bwd_weight (dw_sums.cuh: in a workspace that
// dw_tc_reduce adds up, or in a thread-block cluster's shared memory).
// Macros: CH 64, VEC 8, WARPS 8 (one a group), FR, STRIDE, TILE_H, TILE_W (a multiple of 8,
// TILE_H * TILE_W of 16), STAGES, CLUSTER, OCC (blocks a multiprocessor the registers allow).
#define DW_OP 2
#include "dw_sums.cuh"

#ifndef WARPS
#define WARPS 8
#endif
#if CH != 64 || VEC != 8 || WARPS != 8
#error "conv_dw_tc_bwd_weight: 64 channels a block (128-byte rows), 8 warps of 8 channels each"
#endif
#if TILE_W % 8 || (TILE_H * TILE_W) % 16
#error "TILE_W must be a multiple of 8, TILE_H * TILE_W of 16"
#endif
#define TC_THREADS (WARPS * 32)
#define TAPS (FR * FR)
#define PAIRS ((TAPS + 1) / 2)
#define STEPS (TILE_H * TILE_W / 16)                // k steps of 16 dy pixels a tile
#define RUNS_W (TILE_W / 8)                          // runs of 8 dy pixels along a row
#define DY_BYTES (TILE_H * TILE_W * CH * 2)
#define X_STAGE ((BOX_BYTES + 1023) / 1024 * 1024)
#define TILE_STAGE (X_STAGE + (DY_BYTES + 1023) / 1024 * 1024)
#define SUMS_BYTES (CH * TAPS * 4)
#define REGION (STAGES * TILE_STAGE > SUMS_BYTES ? STAGES * TILE_STAGE : SUMS_BYTES)

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_dw_tc_bwd_weight needs sm_90a (bulk tensor copies)"
#endif
// 16-bit elements only: fp32 instances are not generated; the stubs keep the source compilable.
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, void*, ConvParams,
                                             int) {}
#else

extern __shared__ __align__(1024) unsigned char dw_smem[];

namespace dwtc {
using namespace dw;

__device__ __forceinline__ void ldmatrix_x2_trans(u32 (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(sm90_smem(p)));
}

// Tile `it`'s input box and dy box into one stage, on one mbarrier.
__device__ __forceinline__ void fetch_tile(unsigned char* stage, const TensorMap& map_x,
                                           const TensorMap& map_dy, u64* bar, const Item& it,
                                           const Geometry& g) {
  sm90_mbar_expect(bar, BOX_BYTES + DY_BYTES);
  sm90_tma_4d(stage, map_x, it.cb * CH, it.ow0 * STRIDE - g.pw, it.oh0 * STRIDE - g.ph, it.n,
              bar);
  sm90_tma_4d(stage + X_STAGE, map_dy, it.cb * CH, it.ow0, it.oh0, it.n, bar);
}

// Tap t's shift in the input box, in pixels.
__host__ __device__ constexpr int tap_shift(int t) { return t / FR * IN_W + t % FR; }

}  // namespace dwtc

#if CLUSTER > 1
#define TC_KERNEL extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1)
#else
#define TC_KERNEL extern "C" __global__ void
#endif

TC_KERNEL __launch_bounds__(TC_THREADS, OCC)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  void* __restrict__ out, ConvParams p, int splits,
                  const __grid_constant__ TensorMap tmap_x,
                  const __grid_constant__ TensorMap tmap_dy) {
  using namespace dwtc;
  const Geometry g = geometry(p);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = warp;
  const int split = blockIdx.x, cb = blockIdx.y, blocks = gridDim.y;
  const int spatial = g.N * ((g.Ho + TILE_H - 1) / TILE_H) * ((g.Wo + TILE_W - 1) / TILE_W);
  u64* bars;
  unsigned char* base = stages_and_barriers(dw_smem, REGION, bars);
  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      const int tile = split + s * splits;
      if (tile < spatial)
        fetch_tile(base + s * TILE_STAGE, tmap_x, tmap_dy, &bars[s],
                   item_of(tile * blocks + cb, g), g);
    }
  }
  // ldmatrix rows: lane 8 j + i gives row i of matrix j. B (x2): matrix j = run j of the step;
  // A (x4): matrix j = tap 2 pair + (j & 1), run j >> 1.
  const int i = lane & 7, j = lane >> 3;
  float acc[PAIRS][4];
#pragma unroll
  for (int q = 0; q < PAIRS; ++q)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[q][e] = 0.0f;
  int k = 0;
  for (int tile = split; tile < spatial; tile += splits, ++k) {
    const int stage = k % STAGES;
    const unsigned char* xin = base + stage * TILE_STAGE;
    const unsigned char* din = xin + X_STAGE;
    sm90_mbar_wait(&bars[stage], (k / STAGES) & 1);
#pragma unroll
    for (int step = 0; step < STEPS; ++step) {
      const int run_b = 2 * step + (j & 1), run_a = 2 * step + (j >> 1);
      u32 b[2];
      ldmatrix_x2_trans(b, din + box_offset((run_b / RUNS_W) * TILE_W + run_b % RUNS_W * 8 + i,
                                            group));
      // the input box's pixel under dy pixel (row, column) = (run_a / RUNS_W, ...) at tap 0
      const int x0 = run_a / RUNS_W * STRIDE * IN_W + (run_a % RUNS_W * 8 + i) * STRIDE;
#pragma unroll
      for (int q = 0; q < PAIRS; ++q) {
        constexpr int last = TAPS - 1;
        const int t0 = 2 * q, t1 = 2 * q + 1 < TAPS ? 2 * q + 1 : last;  // an odd last: twice
        u32 a[4];
        ldmatrix_x4_trans(a, reinterpret_cast<const u16*>(
                                 xin + box_offset(x0 + ((j & 1) ? tap_shift(t1) : tap_shift(t0)),
                                                  group)));
        mma16816(acc[q], a, b[0], b[1]);
      }
    }
    __syncthreads();  // the stage is consumed
    const int next = tile + STAGES * splits;
    if (tid == 0 && next < spatial)
      fetch_tile(base + stage * TILE_STAGE, tmap_x, tmap_dy, &bars[stage],
                 item_of(next * blocks + cb, g), g);
  }
  // The block's sums, part[tap * CH + channel], are the diagonals: lane (g8, t4) = (lane / 4,
  // lane % 4) holds D[row][2 t4 + {0, 1}] for rows g8 (tap 2q) and g8 + 8 (tap 2q + 1), so
  // channel g8's entries where 2 t4 + {0, 1} == g8.
  float* part = reinterpret_cast<float*>(base);
  const int g8 = lane >> 2, t4 = lane & 3, odd = g8 & 1, c8 = group * 8 + g8;
  if (t4 == g8 >> 1) {
#pragma unroll
    for (int q = 0; q < PAIRS; ++q) {
      part[2 * q * CH + c8] = odd ? acc[q][1] : acc[q][0];
      if (2 * q + 1 < TAPS) part[(2 * q + 1) * CH + c8] = odd ? acc[q][3] : acc[q][2];
    }
  }
  meet_splits<TC_THREADS>(part, out, g, split, cb, tid);
}
#endif

// dw = the splits' slices of the workspace added up, converted: thread (x, y) of a block adds
// slices y, y + 8, ... of four consecutive entries (one 16-byte load a slice), then row y == 0
// adds the eight partial sums. n, the entries of dw, is a multiple of 8 (C is).
extern "C" __global__ void __launch_bounds__(256)
dw_tc_reduce(const float4* __restrict__ ws, elem_t* __restrict__ dw, int n, int splits) {
  __shared__ float4 partial[8][32];
  const int x4 = threadIdx.x & 31, y = threadIdx.x >> 5, quads = n / 4;
  for (int first = blockIdx.x * 32; first < quads; first += gridDim.x * 32) {
    const int q = first + x4;
    float4 total = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (q < quads)
      for (int s = y; s < splits; s += 8) {
        const float4 v = ws[(long)s * quads + q];
        total.x += v.x, total.y += v.y, total.z += v.z, total.w += v.w;
      }
    partial[y][x4] = total;
    __syncthreads();
    if (y == 0 && q < quads) {
#pragma unroll
      for (int r = 1; r < 8; ++r) {
        const float4 v = partial[r][x4];
        total.x += v.x, total.y += v.y, total.z += v.z, total.w += v.w;
      }
      dw[4 * q] = from_float(total.x), dw[4 * q + 1] = from_float(total.y);
      dw[4 * q + 2] = from_float(total.z), dw[4 * q + 3] = from_float(total.w);
    }
    __syncthreads();
  }
}
