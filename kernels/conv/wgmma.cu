// conv_wgmma: implicit-GEMM grouped convolution on Hopper's warpgroup matrix instructions
// (sm_90a), all three directions, with the GEMM view of conv_igemm (igemm.cu's header) and its
// tile loaders (igemm_loaders.cuh).
//
// A block computes a BLOCK_M x BLOCK_N tile of the GEMM over k-tiles of 64. Its warpgroups:
//  - PRODUCERS producer warpgroups gather each k-tile's A and B by 16-byte cp.async (zero-fill
//    for padding, taps and edges) into one of STAGES stages, 128-byte swizzled;
//  - BLOCK_M / 64 consumer warpgroups issue m64nBLOCK_Nk16 wgmma on their 64 rows of the stage
//    and hold the fp32 accumulators; at the end they write the tile (or, for a backward-weight
//    slice of the reduction, add it into the fp32 workspace that split_k.cuh converts).
// Named barriers FULL (producers arrive, consumers wait) and EMPTY (the reverse) per stage. A
// producer hands a k-tile over LAG = STAGES - 2 k-tiles late, so that the copies of LAG + 1
// k-tiles are in flight at once.
// Operands with K contiguous in memory (fwd A and B, bwd_data A) are K-major tiles; the others
// (bwd_data B, bwd_weight A and B) MN-major, read by wgmma transposed (sm90.cuh's layouts).
//
// Dynamic shared memory (conv/wgmma.py): 1024 (alignment) + STAGES * (BLOCK_M + BLOCK_N) * 128.
// Macros: IGEMM_OP (0 fwd, 1 bwd_data, 2 bwd_weight), BLOCK_M (64, 128), BLOCK_N (64, 128,
// 256), STAGES (2 to 7), PRODUCERS (1 or 2).
#include "../common.cuh"
#include "../sm90.cuh"

#ifndef IGEMM_OP
#define IGEMM_OP 0
#endif
#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef STAGES
#define STAGES 4
#endif
#ifndef PRODUCERS
#define PRODUCERS 1
#endif
#if BLOCK_M % 64 || (BLOCK_N != 64 && BLOCK_N != 128 && BLOCK_N != 256) || STAGES < 2 || \
    STAGES > 7 || PRODUCERS < 1
#error "conv_wgmma: BLOCK_M a multiple of 64, BLOCK_N 64, 128 or 256, 2 <= STAGES <= 7"
#endif
#define CONSUMERS (BLOCK_M / 64)
#define WG_THREADS (128 * (CONSUMERS + PRODUCERS))

#include "split_k.cuh"

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_wgmma needs sm_90a (wgmma.mma_async)"
#endif
// No fp32 path on the matrix units: fp32 instances are not generated; these stubs only keep the
// source compilable for that type.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void igemm_bwd_weight_split(const elem_t*, const elem_t*, float*, ConvParams,
                                                  int) {}
#else

namespace ig {

constexpr int BM = BLOCK_M, BN = BLOCK_N, BK = 64, V = 8, NT = 128 * PRODUCERS, NST = STAGES;
constexpr int BAD = -(1 << 28);  // a coordinate that fails every bounds check
constexpr bool A_KMAJOR = IGEMM_OP != 2, B_KMAJOR = IGEMM_OP == 0;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int MN_BLOCK_BYTES = BK * 128;  // an MN-major tile's 64-wide blocks
constexpr int FULL = 1, EMPTY = 1 + NST;    // named barrier ids (0 is __syncthreads)
constexpr int LAG = NST - 2;

// Element offset of (row, col) in a tile of ROWS x COLS: K-major tiles have COLS = 64 (one
// 128-byte row a row); MN-major ones ROWS = 64 k-rows and COLS = M or N in 64-wide blocks.
template <int ROWS, int COLS>
__device__ __forceinline__ int tile_offset(int row, int col) {
  return (col >> 6) * ROWS * 64 + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

#include "igemm_loaders.cuh"

// The producer's end of k-tile `step`: its copies landed (all but the newest PENDING groups),
// made visible to wgmma, the stage handed to the consumers.
template <int PENDING>
__device__ __forceinline__ void hand_over(int step) {
  cp_async_wait<PENDING>();
  sm90_fence_proxy_async();
  sm90_arrive(FULL + step % NST, WG_THREADS);
}

// A producer warpgroup's loop over k-tiles [kt0, kt1); t is its thread among the producers.
template <class LA, class LB>
__device__ __forceinline__ void produce(unsigned char* stages, const LA& la, const LB& lb,
                                        int kt0, int kt1) {
  const int steps = kt1 - kt0;
  for (int step = 0; step < steps; ++step) {
    const int s = step % NST;
    if (step >= NST) sm90_sync(EMPTY + s, WG_THREADS);  // k-tile step - NST's wgmma done
    u16* a = reinterpret_cast<u16*>(stages + s * STAGE_BYTES);
    u16* b = reinterpret_cast<u16*>(stages + s * STAGE_BYTES + A_BYTES);
    la.visit(kt0 + step, [&](int, int off, const elem_t* src, bool ok) { copy_vec(a + off, src, ok); });
    lb.visit(kt0 + step, [&](int, int off, const elem_t* src, bool ok) { copy_vec(b + off, src, ok); });
    cp_async_commit();
    if (step >= LAG) hand_over<LAG>(step - LAG);
  }
  for (int step = steps - LAG > 0 ? steps - LAG : 0; step < steps; ++step) hand_over<0>(step);
}

// A consumer warpgroup's loop: its 64 rows (m_group) of every stage into acc.
__device__ __forceinline__ void consume(float (&acc)[BN / 2], const unsigned char* stages,
                                        int m_group, int steps) {
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
  sm90_keep(acc);
  constexpr u32 A_STEP = A_KMAJOR ? 2 : 128, B_STEP = B_KMAJOR ? 2 : 128;  // a k16, in 16 B
  for (int step = 0; step < steps; ++step) {
    const int s = step % NST;
    sm90_sync(FULL + s, WG_THREADS);
    const unsigned char* a = stages + s * STAGE_BYTES + m_group * 64 * 128;
    const u64 da = sm90_desc(a, A_KMAJOR ? 16 : MN_BLOCK_BYTES);
    const u64 db = sm90_desc(stages + s * STAGE_BYTES + A_BYTES, B_KMAJOR ? 16 : MN_BLOCK_BYTES);
    sm90_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
      wgmma_m64k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(acc, da + kk * A_STEP, db + kk * B_STEP);
    sm90_commit();
    sm90_wait<1>();  // the previous k-tile's wgmma is done: its stage goes back
    if (step >= 1 && step - 1 + NST < steps) sm90_arrive(EMPTY + (step - 1) % NST, WG_THREADS);
  }
  sm90_wait<0>();
  sm90_keep(acc);
}

// Calls f(row, col, v0, v1) for the consumer's accumulator pairs (col, col + 1): warp w of the
// warpgroup holds rows 16 w + lane / 4 and 8 more; per 8 columns n, acc[4n .. 4n + 1] and
// acc[4n + 2 .. 4n + 3].
template <class F>
__device__ __forceinline__ void for_each_pair(const float (&acc)[BN / 2], int m_group, F&& f) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int row = m_group * 64 + 16 * warp + (lane >> 2);
#pragma unroll
  for (int n = 0; n < BN / 8; ++n) {
    const int col = 8 * n + 2 * (lane & 3);
    f(row, col, acc[4 * n], acc[4 * n + 1]);
    f(row + 8, col, acc[4 * n + 2], acc[4 * n + 3]);
  }
}

// The tile's rows [m0, M) and columns [n0, N) into out at row_offset(m) + column: pairs, as
// every channel count here is a multiple of 8.
template <class RowOffset>
__device__ __forceinline__ void store_pairs(const float (&acc)[BN / 2], int m_group,
                                            elem_t* out, int m0, int M, int n0, int N,
                                            RowOffset&& row_offset) {
  for_each_pair(acc, m_group, [&](int r, int c, float v0, float v1) {
    const int m = m0 + r, j = n0 + c;
    if (m < M && j < N)
      *reinterpret_cast<u32*>(out + row_offset(m) + j) = (u32)from_float(v0) | ((u32)from_float(v1) << 16);
  });
}

__device__ __forceinline__ void tile_coords(int N, int& m0, int& n0) {
  const int ntiles = (N + BN - 1) / BN;  // n fastest: neighbouring blocks share the A rows
  const int mt = blockIdx.x / ntiles;
  m0 = mt * BM;
  n0 = (blockIdx.x - mt * ntiles) * BN;
}

__device__ __forceinline__ unsigned char* stage_memory() {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = sm90_smem(smem_raw);
  return smem_raw + (((raw + 1023u) & ~1023u) - raw);
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  using namespace ig;
  const int g = blockIdx.z, M = p.N * p.P * p.Q, steps = (p.Cg * p.R * p.S + BK - 1) / BK;
  int m0, n0;
  tile_coords(p.Kg, m0, n0);
  if (m0 >= M) return;
  unsigned char* stages = stage_memory();
  const int wg = threadIdx.x >> 7;
  if (wg >= CONSUMERS) {
    const int t = threadIdx.x - 128 * CONSUMERS;
    LoaderA la;
    la.init(x, p, g, m0, t);
    LoaderB lb;
    lb.init(w, p, g, n0, t);
    produce(stages, la, lb, 0, steps);
    return;
  }
  float acc[BN / 2];
  consume(acc, stages, wg, steps);
  const int K = p.K, gk = g * p.Kg;
  store_pairs(acc, wg, y, m0, M, n0, p.Kg, [&](int m) { return m * K + gk; });
}

#elif IGEMM_OP == 1
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  using namespace ig;
  Residue rz;
  rz.init(p, blockIdx.z);
  int m0, n0;
  tile_coords(p.Cg, m0, n0);
  if (m0 >= rz.M) return;
  const int steps = (rz.ktotal(p) + BK - 1) / BK;  // no taps: zeros
  unsigned char* stages = stage_memory();
  const int wg = threadIdx.x >> 7;
  if (wg >= CONSUMERS) {
    const int t = threadIdx.x - 128 * CONSUMERS;
    LoaderA la;
    la.init(dy, p, rz, m0, t);
    LoaderB lb;
    lb.init(w, p, rz, n0, t);
    produce(stages, la, lb, 0, steps);
    return;
  }
  float acc[BN / 2];
  consume(acc, stages, wg, steps);
  const int HW = rz.Hr * rz.Wr, Wr = rz.Wr, sh = p.stride_h, sw = p.stride_w;
  const int H = p.H, W = p.W, C = p.C, gc = rz.g * p.Cg, rh = rz.rh, rw = rz.rw;
  FastDiv by_hw, by_wr;
  by_hw.init(HW);
  by_wr.init(Wr);
  store_pairs(acc, wg, dx, m0, rz.M, n0, p.Cg, [&](int m) {
    const int n = by_hw.div(m), t = m - n * HW, a = by_wr.div(t), b = t - a * Wr;
    return ((n * H + rh + a * sh) * W + rw + b * sw) * C + gc;
  });
}

#else
// Unsplit: dw written directly. Split (igemm_bwd_weight_split): slice z / G covers k-tiles
// [slice * kt_per_split, + kt_per_split) and adds its sums atomically into the zeroed fp32
// workspace [K][R][S][Cg]; igemm_reduce then writes dw.
template <bool SPLIT>
__device__ __forceinline__ void bwd_weight(const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ dy, elem_t* __restrict__ dw,
                                           const ConvParams& p, float* __restrict__ ws,
                                           int kt_per_split) {
  using namespace ig;
  const int g = blockIdx.z % p.G, slice = blockIdx.z / p.G;
  const int CRS = p.Cg * p.R * p.S, KT = (p.N * p.P * p.Q + BK - 1) / BK;
  int m0, n0;
  tile_coords(CRS, m0, n0);
  if (m0 >= p.Kg) return;
  int kt0 = 0, kt1 = KT;
  if (SPLIT) {
    kt0 = slice * kt_per_split;
    kt1 = kt0 + kt_per_split < KT ? kt0 + kt_per_split : KT;
    if (kt1 < kt0) kt1 = kt0;
  }
  unsigned char* stages = stage_memory();
  const int wg = threadIdx.x >> 7;
  if (wg >= CONSUMERS) {
    const int t = threadIdx.x - 128 * CONSUMERS;
    LoaderA la;
    la.init(dy, p, g, m0, t);
    LoaderB lb;
    lb.init(x, p, g, n0, t);
    produce(stages, la, lb, kt0, kt1);
    return;
  }
  float acc[BN / 2];
  consume(acc, stages, wg, kt1 - kt0);
  const int gk = g * p.Kg;
  if (SPLIT) {
    for_each_pair(acc, wg, [&](int r, int c, float v0, float v1) {
      const int m = m0 + r, j = n0 + c;
      if (m >= p.Kg || j >= CRS) return;
      float* out = ws + (gk + m) * CRS + j;
      atomicAdd(out, v0);
      atomicAdd(out + 1, v1);
    });
  } else {
    store_pairs(acc, wg, dw, m0, p.Kg, n0, CRS, [&](int m) { return (gk + m) * CRS; });
  }
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  elem_t* __restrict__ dw, ConvParams p) {
  bwd_weight<false>(x, dy, dw, p, nullptr, 0);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
igemm_bwd_weight_split(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                       float* __restrict__ ws, ConvParams p, int kt_per_split) {
  bwd_weight<true>(x, dy, nullptr, p, ws, kt_per_split);
}
#endif

#endif  // FARM_DTYPE != 0 and sm_90a
