// conv_wgmma: implicit-GEMM grouped convolution on Hopper's warpgroup matrix instructions
// (sm_90a), all three directions, with the GEMM view of conv_igemm (igemm.cu's header) and its
// tile loaders (igemm_loaders.cuh).
//
// A block computes a BLOCK_M x BLOCK_N tile of the GEMM over k-tiles of 64. Its warpgroups:
//  - PRODUCERS producer warpgroups gather each k-tile's A and B by 16-byte cp.async (zero-fill
//    for padding, taps and edges) into one of STAGES stages, 128-byte swizzled;
//  - BLOCK_M / WG_M consumer warpgroups issue m64nBLOCK_Nk16 wgmma on their WG_M rows (one or
//    two 64-row blocks) of the stage and hold the fp32 accumulators; at the end they write the
//    tile (or, for a backward-weight slice of the reduction, add it into the fp32 workspace,
//    the last slice of a tile writing dw from it).
// Blocks are persistent: each takes every gridDim.x-th tile of its grid z slice, the stages'
// ring running on from one tile to the next, so that the producers load the next tile while
// the consumers write the last one.
// Named barriers FULL (producers arrive, consumers wait) and EMPTY (the reverse) per stage. A
// producer hands a k-tile over LAG = (STAGES - 1) / 2 k-tiles late, so that the copies of
// LAG + 1 k-tiles are in flight at once.
// With TMA, the operand that is a plain strided tensor arrives by bulk tensor copies instead
// (tensor maps built on the host, conv/wgmma.py), issued by one producer thread and completed
// on the stage's mbarrier, which the consumers wait on besides FULL: TMA 1 is fwd's and
// bwd_data's weight (B) or bwd_weight's dy (A); TMA 2 adds, for a 1x1 convolution of stride 1
// without padding and groups, the operand that is then a plain [N*H*W][channels] matrix too:
// fwd's x (A), bwd_data's dy (A), bwd_weight's x (B).
// Operands with K contiguous in memory (fwd A and B, bwd_data A) are K-major tiles; the others
// (bwd_data B, bwd_weight A and B) MN-major, read by wgmma transposed (sm90.cuh's layouts).
//
// Dynamic shared memory (conv/wgmma.py): 1024 (alignment) + STAGES * (BLOCK_M + BLOCK_N) * 128
// + 64 (the mbarriers). Macros: IGEMM_OP (0 fwd, 1 bwd_data, 2 bwd_weight), BLOCK_M (64, 128,
// 256), BLOCK_N (64, 128, 256), WG_M (64, 128: rows a consumer computes), STAGES (2 to 7),
// PRODUCERS (1 or 2), TMA (0, 1, 2).
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
#ifndef TMA
#define TMA 0
#endif
#if IGEMM_OP == 0
#define TMA_A (TMA == 2)
#define TMA_B (TMA >= 1)
#elif IGEMM_OP == 1
#define TMA_A (TMA == 2)
#define TMA_B (TMA >= 1)
#else
#define TMA_A (TMA >= 1)
#define TMA_B (TMA == 2)
#endif
// the kernels' tensor map parameters
#if TMA_A && TMA_B
#define MAPS , const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b
#elif TMA_A
#define MAPS , const __grid_constant__ TensorMap tmap_a
#elif TMA_B
#define MAPS , const __grid_constant__ TensorMap tmap_b
#else
#define MAPS
#endif
#if BLOCK_M % 64 || (BLOCK_N != 64 && BLOCK_N != 128 && BLOCK_N != 256) || STAGES < 2 || \
    STAGES > 7 || PRODUCERS < 1
#error "conv_wgmma: BLOCK_M a multiple of 64, BLOCK_N 64, 128 or 256, 2 <= STAGES <= 7"
#endif
#ifndef WG_M
#define WG_M 64
#endif
#if WG_M != 64 && WG_M != 128
#error "conv_wgmma: a consumer warpgroup computes WG_M = 64 or 128 rows"
#endif
#define CONSUMERS (BLOCK_M / WG_M)
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
extern "C" __global__ void wgmma_bwd_weight_split(const elem_t*, const elem_t*, elem_t*, float*,
                                                   ConvParams, int, int, int) {}
#else

namespace ig {

constexpr int BM = BLOCK_M, BN = BLOCK_N, BK = 64, V = 8, NT = 128 * PRODUCERS, NST = STAGES;
constexpr int BAD = -(1 << 28);  // a coordinate that fails every bounds check
constexpr bool A_KMAJOR = IGEMM_OP != 2, B_KMAJOR = IGEMM_OP == 0;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int MN_BLOCK_BYTES = BK * 128;  // an MN-major tile's 64-wide blocks
constexpr int FULL = 1, EMPTY = 1 + NST;    // named barrier ids (0 is __syncthreads)
// k-tiles a producer's hand-over trails its copies: the copies of LAG + 1 k-tiles in flight,
// while the consumers may run NST - 1 - LAG k-tiles ahead of the stage the producer waits to
// refill (at most NST - 2 cannot deadlock; at NST - 2 every k-tile waits on that round trip).
// Without cp.async there is nothing to trail.
constexpr int LAG = TMA_A && TMA_B ? 0 : (NST - 1) / 2;
constexpr int TMA_BYTES = (TMA_A ? A_BYTES : 0) + (TMA_B ? B_BYTES : 0);

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

// A producer warpgroup's loop over one tile's k-tiles [kt0, kt1): the gathered operands by
// cp.async from every producer thread, the TMA operands by tma(kt, a, b, mbarrier) from the
// first. `step` counts the block's k-tiles over all its tiles (the stages' ring goes on).
template <class LA, class LB, class Tma>
__device__ __forceinline__ void produce(unsigned char* stages, u64* bars, const LA& la,
                                        const LB& lb, int kt0, int kt1, int& step, Tma&& tma) {
  const int t = threadIdx.x - 128 * CONSUMERS;
  for (int kt = kt0; kt < kt1; ++kt, ++step) {
    const int s = step % NST;
    if (step >= NST) sm90_sync(EMPTY + s, WG_THREADS);  // k-tile step - NST's wgmma done
    unsigned char* a = stages + s * STAGE_BYTES;
    unsigned char* b = a + A_BYTES;
    if (TMA_BYTES && t == 0) {
      sm90_mbar_expect(bars + s, TMA_BYTES);
      tma(kt, a, b, bars + s);
    }
    if (!TMA_A)
      la.visit(kt, [&](int, int off, const elem_t* src, bool ok) {
        copy_vec(reinterpret_cast<u16*>(a) + off, src, ok);
      });
    if (!TMA_B)
      lb.visit(kt, [&](int, int off, const elem_t* src, bool ok) {
        copy_vec(reinterpret_cast<u16*>(b) + off, src, ok);
      });
    cp_async_commit();
    if (step >= LAG) hand_over<LAG>(step - LAG);
  }
}

// The producer's last LAG k-tiles handed over, after its last tile (`steps` k-tiles in all).
__device__ __forceinline__ void produce_end(int steps) {
  for (int step = steps - LAG > 0 ? steps - LAG : 0; step < steps; ++step) hand_over<0>(step);
}

// A consumer warpgroup's accumulators: WG_M / 64 row blocks of 64 x BN.
constexpr int MI = WG_M / 64;
struct Acc {
  float c[MI][BN / 2];
};

// A consumer warpgroup's loop over one tile's `steps` k-tiles: its WG_M rows (m_group) of each
// stage into acc. `step` counts the block's k-tiles over its tiles, `total` of them: a stage
// goes back where the producer will fill it again.
__device__ __forceinline__ void consume(Acc& acc, const unsigned char* stages, u64* bars,
                                        int m_group, int steps, int& step, int total) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc.c[mi][i] = 0.0f;
    sm90_keep(acc.c[mi]);
  }
  constexpr u32 A_STEP = A_KMAJOR ? 2 : 128, B_STEP = B_KMAJOR ? 2 : 128;  // a k16, in 16 B
  for (int i = 0; i < steps; ++i, ++step) {
    const int s = step % NST;
    sm90_sync(FULL + s, WG_THREADS);
    if (TMA_BYTES) sm90_mbar_wait(bars + s, (step / NST) & 1);
    const unsigned char* a = stages + s * STAGE_BYTES + m_group * WG_M * 128;
    const u64 da = sm90_desc(a, A_KMAJOR ? 16 : MN_BLOCK_BYTES);
    const u64 db = sm90_desc(stages + s * STAGE_BYTES + A_BYTES, B_KMAJOR ? 16 : MN_BLOCK_BYTES);
    sm90_fence();
    // a 64-row block of A is 8 KB on in either layout (K-major rows, MN-major blocks)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int mi = 0; mi < MI; ++mi)
        wgmma_m64k16<A_KMAJOR ? 0 : 1, B_KMAJOR ? 0 : 1>(acc.c[mi], da + mi * 512 + kk * A_STEP,
                                                          db + kk * B_STEP);
    sm90_commit();
    sm90_wait<1>();  // the previous k-tile's wgmma is done: its stage goes back
    if (i >= 1 && step - 1 + NST < total) sm90_arrive(EMPTY + (step - 1) % NST, WG_THREADS);
  }
  sm90_wait<0>();
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) sm90_keep(acc.c[mi]);
  if (steps >= 1 && step - 1 + NST < total) sm90_arrive(EMPTY + (step - 1) % NST, WG_THREADS);
}

// Calls f(row, col, v0, v1) for the consumer's accumulator pairs (col, col + 1): in each
// 64-row block, warp w of the warpgroup holds rows 16 w + lane / 4 and 8 more; per 8 columns n,
// c[4n .. 4n + 1] and c[4n + 2 .. 4n + 3].
template <class F>
__device__ __forceinline__ void for_each_pair(const Acc& acc, int m_group, F&& f) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int row = m_group * WG_M + mi * 64 + 16 * warp + (lane >> 2);
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      const int col = 8 * n + 2 * (lane & 3);
      f(row, col, acc.c[mi][4 * n], acc.c[mi][4 * n + 1]);
      f(row + 8, col, acc.c[mi][4 * n + 2], acc.c[mi][4 * n + 3]);
    }
  }
}

// Two values rounded to the element type, packed (v0 in the low half) by one instruction.
__device__ __forceinline__ u32 pack_rn(float v0, float v1) {
  u32 d;
#if FARM_DTYPE == 2
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(v1), "f"(v0));
#else
  asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(d) : "f"(v1), "f"(v0));
#endif
  return d;
}

// The tile's rows [m0, M) and columns [n0, N) into out at row_offset(m) + column, 16 bytes a
// store: the four lanes of a quad hold the pairs (2 q, 2 q + 1) of eight columns; a transpose
// within the quad (three shuffles) gives lane q all eight columns of block 4 k + q, so that a
// quad writes 64 contiguous bytes of a row. Every channel count here is a multiple of 8: a
// 16-byte piece is wholly inside N or outside it, and aligned.
template <class RowOffset>
__device__ __forceinline__ void store_pairs(const Acc& acc, int m_group, elem_t* out, int m0,
                                            int M, int n0, int N, RowOffset&& row_offset) {
  static_assert(BN % 32 == 0, "four column blocks of 8 a quad step");
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, q = lane & 3;
  // x[i] for a lane-dependent i without local memory
  auto pick = [](const u32(&x)[4], int i) {
    return i == 0 ? x[0] : i == 1 ? x[1] : i == 2 ? x[2] : x[3];
  };
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + m_group * WG_M + mi * 64 + 16 * warp + (lane >> 2) + 8 * half;
      elem_t* row = out + (m < M ? row_offset(m) : 0);
#pragma unroll
      for (int k = 0; k < BN / 32; ++k) {
        u32 x[4], z[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int n = 4 * (4 * k + j) + 2 * half;
          x[j] = pack_rn(acc.c[mi][n], acc.c[mi][n + 1]);
        }
        z[0] = pick(x, q);
#pragma unroll
        for (int t = 1; t < 4; ++t)  // send x[q ^ t], receive lane (q ^ t)'s x[q]
          z[t] = __shfl_xor_sync(0xFFFFFFFFu, pick(x, q ^ t), t);
        // z[t] holds columns 2 (q ^ t), + 1 of block 4 k + q: in column order
        const uint4 v = make_uint4(pick(z, q), pick(z, q ^ 1), pick(z, q ^ 2), pick(z, q ^ 3));
        const int col = n0 + 8 * (4 * k + q);
        if (m < M && col < N) *reinterpret_cast<uint4*>(row + col) = v;
      }
    }
}

// Persistent blocks: block x takes tiles x, x + gridDim.x, ... of the M x N tiles of its grid
// z slice (every tile of a slice has the same k-tiles), n fastest (neighbouring tiles share
// their A rows in L2).
struct Tiles {
  int n_tiles, count, mine;  // tiles along N, in the slice, this block's
  __device__ __forceinline__ Tiles(int M, int N) {
    n_tiles = (N + BN - 1) / BN;
    count = (M + BM - 1) / BM * n_tiles;
    const int x = blockIdx.x;
    mine = count > x ? (count - x + (int)gridDim.x - 1) / (int)gridDim.x : 0;
  }
  __device__ __forceinline__ void origin(int i, int& m0, int& n0) const {
    const int tile = blockIdx.x + i * gridDim.x, mt = tile / n_tiles;
    m0 = mt * BM;
    n0 = (tile - mt * n_tiles) * BN;
  }
};

// The stages (1024-byte aligned) and after them their mbarriers, initialized for TMA.
__device__ __forceinline__ unsigned char* stage_memory(u64*& bars) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = sm90_smem(smem_raw);
  unsigned char* stages = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  bars = reinterpret_cast<u64*>(stages + NST * STAGE_BYTES);
  if (TMA_BYTES) {
    if (threadIdx.x == 0) {
      for (int s = 0; s < NST; ++s) sm90_mbar_init(bars + s, 1);
      sm90_mbar_fence_init();
    }
    __syncthreads();
  }
  return stages;
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p MAPS) {
  using namespace ig;
  const int g = blockIdx.z, M = p.N * p.P * p.Q, steps = (p.Cg * p.R * p.S + BK - 1) / BK;
  const Tiles tiles(M, p.Kg);
  if (!tiles.mine) return;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7, kg = g * p.Kg;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      LoaderA la;
      la.init(x, p, g, m0, threadIdx.x - 128 * CONSUMERS);
      LoaderB lb;
      lb.init(w, p, g, n0, threadIdx.x - 128 * CONSUMERS);
      produce(stages, bars, la, lb, 0, steps, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
#if TMA_B  // w as [K][CRS]: the tile's BN rows, 64 columns
        sm90_tma_2d(b, tmap_b, kt * BK, kg + n0, bar);
#endif
#if TMA_A  // x as [NHW][C]: the tile's BM pixels, 64 channels
        sm90_tma_2d(a, tmap_a, kt * BK, m0, bar);
#endif
      });
    }
    produce_end(step);
    return;
  }
  const int K = p.K, total = tiles.mine * steps;
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, steps, step, total);
    store_pairs(acc, wg, y, m0, M, n0, p.Kg, [&](int m) { return m * K + kg; });
  }
}

#elif IGEMM_OP == 1
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p MAPS) {
  using namespace ig;
  Residue rz;
  rz.init(p, blockIdx.z);
  const Tiles tiles(rz.M, p.Cg);
  if (!tiles.mine) return;
  const int steps = (rz.ktotal(p) + BK - 1) / BK;  // no taps: zeros
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      LoaderA la;
      la.init(dy, p, rz, m0, threadIdx.x - 128 * CONSUMERS);
      LoaderB lb;
      lb.init(w, p, rz, n0, threadIdx.x - 128 * CONSUMERS);
      produce(stages, bars, la, lb, 0, steps, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
#if TMA_A  // dy as [NPQ][K] (1x1, stride 1, no padding, G = 1): BM pixels, 64 channels
        sm90_tma_2d(a, tmap_a, kt * BK, m0, bar);
#else
        (void)a;
#endif
#if TMA_B  // w as [K][R][S][Cg]: one tap (Kg a multiple of 64, or 1x1 with G = 1, where the
           // k-tiles past K are zeros), 64 k, BN / 64 blocks of c
        const int kk = kt * BK, j = kk / p.Kg, k = kk - j * p.Kg, jr = j / rz.tw.count;
        const int r = rz.th.r0 + jr * rz.th.step;
        const int s = rz.tw.r0 + (j - jr * rz.tw.count) * rz.tw.step;
#pragma unroll
        for (int c = 0; c < BN / 64; ++c)
          sm90_tma_4d(b + c * MN_BLOCK_BYTES, tmap_b, n0 + 64 * c, s, r, rz.g * p.Kg + k, bar);
#endif
      });
    }
    produce_end(step);
    return;
  }
  const int HW = rz.Hr * rz.Wr, Wr = rz.Wr, sh = p.stride_h, sw = p.stride_w;
  const int H = p.H, W = p.W, C = p.C, gc = rz.g * p.Cg, rh = rz.rh, rw = rz.rw;
  const int total = tiles.mine * steps;
  FastDiv by_hw, by_wr;
  by_hw.init(HW);
  by_wr.init(Wr);
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, steps, step, total);
    store_pairs(acc, wg, dx, m0, rz.M, n0, p.Cg, [&](int m) {
      const int n = by_hw.div(m), t = m - n * HW, a = by_wr.div(t), b = t - a * Wr;
      return ((n * H + rh + a * sh) * W + rw + b * sw) * C + gc;
    });
  }
}

#else
// The consumers' own barrier (the producers may have left): the id after the stages' two.
__device__ __forceinline__ void consumers_sync() {
  sm90_sync(1 + 2 * ig::NST, 128 * CONSUMERS);
}

// Unsplit: dw written directly. Split (wgmma_bwd_weight_split): slice z / G covers k-tiles
// [slice * kt_per_split, + kt_per_split) and adds its sums atomically into the zeroed fp32
// workspace [K][R][S][Cg]. With fused_reduce it then counts the tile in the int counters after
// it (one per tile of each group), and the block that counts a tile the `splits`-th time reads
// its sums back from L2 and writes dw: the reduction ends in the kernel. Without, igemm_reduce
// converts the whole workspace in a third launch (over every multiprocessor: faster where the
// tiles are few and large).
template <bool SPLIT>
__device__ __forceinline__ void bwd_weight(const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ dy, elem_t* __restrict__ dw,
                                           const ConvParams& p, float* __restrict__ ws,
                                           int kt_per_split, int splits, int fused_reduce,
                                           const TensorMap* tmap_a, const TensorMap* tmap_b) {
  using namespace ig;
  const int g = blockIdx.z % p.G, slice = blockIdx.z / p.G;
  const int CRS = p.Cg * p.R * p.S, KT = (p.N * p.P * p.Q + BK - 1) / BK;
  const Tiles tiles(p.Kg, CRS);
  if (!tiles.mine) return;
  int kt0 = 0, kt1 = KT;
  if (SPLIT) {
    kt0 = slice * kt_per_split;
    kt1 = kt0 + kt_per_split < KT ? kt0 + kt_per_split : KT;
    if (kt1 < kt0) kt1 = kt0;
  }
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7, kg = g * p.Kg;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      LoaderA la;
      la.init(dy, p, g, m0, threadIdx.x - 128 * CONSUMERS);
      LoaderB lb;
      lb.init(x, p, g, n0, threadIdx.x - 128 * CONSUMERS);
      produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
#if TMA_A  // dy as [NPQ][K]: 64 rows of the reduction, BM / 64 blocks of k
#pragma unroll
        for (int c = 0; c < BM / 64; ++c)
          sm90_tma_2d(a + c * MN_BLOCK_BYTES, *tmap_a, kg + m0 + 64 * c, kt * BK, bar);
#endif
#if TMA_B  // x as [NHW][C] (1x1, stride 1, no padding, G = 1): the same rows, BN / 64 blocks of c
#pragma unroll
        for (int c = 0; c < BN / 64; ++c)
          sm90_tma_2d(b + c * MN_BLOCK_BYTES, *tmap_b, n0 + 64 * c, kt * BK, bar);
#else
        (void)b;
#endif
      });
    }
    produce_end(step);
    return;
  }
  const int total = tiles.mine * (kt1 - kt0);
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, kt1 - kt0, step, total);
    if (SPLIT) {
      for_each_pair(acc, wg, [&](int r, int c, float v0, float v1) {
        const int m = m0 + r, j = n0 + c;
        if (m >= p.Kg || j >= CRS) return;
        float* out = ws + (kg + m) * CRS + j;
        atomicAdd(out, v0);
        atomicAdd(out + 1, v1);
      });
      if (!fused_reduce) continue;
      __threadfence();  // this block's sums before its count
      consumers_sync();
      int* counters = reinterpret_cast<int*>(ws + (long)p.K * CRS);
      volatile int* last = reinterpret_cast<volatile int*>(bars + 7);  // a spare barrier slot
      if (threadIdx.x == 0)
        *last = atomicAdd(counters + g * tiles.count + blockIdx.x + i * gridDim.x, 1) ==
                splits - 1;
      consumers_sync();
      if (*last) {
        __threadfence();  // every slice's sums after their counts
        for_each_pair(acc, wg, [&](int r, int c, float, float) {
          const int m = m0 + r, j = n0 + c;
          if (m >= p.Kg || j >= CRS) return;
          const float2 v = __ldcg(reinterpret_cast<const float2*>(ws + (kg + m) * CRS + j));
          *reinterpret_cast<u32*>(dw + (kg + m) * CRS + j) = pack_rn(v.x, v.y);
        });
      }
      consumers_sync();  // `last` is read before the next tile sets it
    } else {
      store_pairs(acc, wg, dw, m0, p.Kg, n0, CRS, [&](int m) { return (kg + m) * CRS; });
    }
  }
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  elem_t* __restrict__ dw, ConvParams p MAPS) {
#if TMA_B
  bwd_weight<false>(x, dy, dw, p, nullptr, 0, 1, 0, &tmap_a, &tmap_b);
#elif TMA_A
  bwd_weight<false>(x, dy, dw, p, nullptr, 0, 1, 0, &tmap_a, nullptr);
#else
  bwd_weight<false>(x, dy, dw, p, nullptr, 0, 1, 0, nullptr, nullptr);
#endif
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_bwd_weight_split(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                       elem_t* __restrict__ dw, float* __restrict__ ws, ConvParams p,
                       int kt_per_split, int splits, int fused_reduce MAPS) {
#if TMA_B
  bwd_weight<true>(x, dy, dw, p, ws, kt_per_split, splits, fused_reduce, &tmap_a, &tmap_b);
#elif TMA_A
  bwd_weight<true>(x, dy, dw, p, ws, kt_per_split, splits, fused_reduce, &tmap_a, nullptr);
#else
  bwd_weight<true>(x, dy, dw, p, ws, kt_per_split, splits, fused_reduce, nullptr, nullptr);
#endif
}
#endif

#endif  // FARM_DTYPE != 0 and sm_90a
