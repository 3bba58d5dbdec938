// conv_pointwise_cluster: pointwise layers (1x1, stride 1, no padding, one group) with few
// pixels and a long reduction, forward and backward-data: out[m][n] = sum_j in[m][j] B[j][n]
// with in = x, B = w^T (forward) or in = dy, B = w (backward-data), M = N*H*W small (the
// squeeze-and-excitation layers' 1x1 maps, the last stages at batch 1). NVIDIA mma.sync
// m16n8k16, fp32 sums, sm_90a (thread-block clusters).
//
// The reduction is split over the CLUSTER blocks of a thread-block cluster: block rank r of the
// cluster over output tile (TM rows, TN columns) sums its share of the k-chunks of 64, copied
// by cp.async into STAGES buffers (zeros past M, J and NC); the four warps each hold TN / 4
// columns of the tile. The blocks leave their sums in shared memory, and after a cluster
// barrier block r adds every CLUSTER-th pair of the tile over the cluster's blocks (distributed
// shared memory) and writes it: one launch, no workspace, no atomics.
//
// Macros: CONV_OP (0 forward, 1 backward-data), CLUSTER (2, 4 or 8), TM (16, 32 or 64), TN
// (64 or 128), STAGES (2 or 3). Grid: x CLUSTER * ceil(NC / TN), y ceil(M / TM); 128 threads.
// Dynamic shared memory (conv/pointwise_cluster.py): STAGES x (TM x 72 + B) u16, B = TN x 72
// (forward's w as [n][k]) or 64 x (TN + 8) (backward-data's as [k][n]), or the tile's fp32
// sums where larger.
#include "../cluster.cuh"
#include "../mma_sync.cuh"

#ifndef CONV_OP
#define CONV_OP 0
#endif
#ifndef CLUSTER
#define CLUSTER 4
#endif
#ifndef TM
#define TM 32
#endif
#ifndef TN
#define TN 64
#endif
#ifndef STAGES
#define STAGES 2
#endif
#if TM % 16 || (TN != 64 && TN != 128) || STAGES < 2 || STAGES > 3
#error "conv_pointwise_cluster: TM a multiple of 16, TN 64 or 128, STAGES 2 or 3"
#endif

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#if FARM_DTYPE != 0
#error "conv_pointwise_cluster needs sm_90a (thread-block clusters)"
#endif
// No fp32 path on the matrix units: fp32 instances are not generated.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
#else

namespace pwc {

constexpr int KC = 64, AP = KC + 8;  // a k-chunk; A's rows (and forward B's) 9 chunks apart
constexpr int BP = CONV_OP == 0 ? KC + 8 : TN + 8;  // backward-data's B rows (k) TN + 8 apart
constexpr int A_U16 = TM * AP, B_U16 = CONV_OP == 0 ? TN * AP : KC * BP;
constexpr int STAGE_U16 = A_U16 + B_U16, THREADS = 128, WN = TN / 4, NB = WN / 8;

// k-chunk `kc` of A (rows m0.., in[M][J]) and B into a stage, 16 bytes a copy, zeros outside.
__device__ __forceinline__ void load_stage(u16* stage, const elem_t* __restrict__ in,
                                           const elem_t* __restrict__ w, int kc, int m0, int n0,
                                           int M, int J, int NC) {
  const int j0 = kc * KC;
  for (int q = threadIdx.x; q < TM * (KC / 8); q += THREADS) {
    const int r = q >> 3, j = j0 + (q & 7) * 8, m = m0 + r;
    const bool ok = m < M && j < J;
    cp_async16(stage + r * AP + (q & 7) * 8, in + (ok ? (long)m * J + j : 0), ok);
  }
  u16* b = stage + A_U16;
#if CONV_OP == 0  // w [NC][J]: rows n, 64 k each
  for (int q = threadIdx.x; q < TN * (KC / 8); q += THREADS) {
    const int r = q >> 3, j = j0 + (q & 7) * 8, n = n0 + r;
    const bool ok = n < NC && j < J;
    cp_async16(b + r * BP + (q & 7) * 8, w + (ok ? (long)n * J + j : 0), ok);
  }
#else  // w [J][NC]: rows k, TN n each
  for (int q = threadIdx.x; q < KC * (TN / 8); q += THREADS) {
    const int r = q / (TN / 8), c = q - r * (TN / 8), j = j0 + r, n = n0 + c * 8;
    const bool ok = j < J && n < NC;
    cp_async16(b + r * BP + c * 8, w + (ok ? (long)j * NC + n : 0), ok);
  }
#endif
}

struct Acc {
  float c[TM / 16][NB][4];
};

// One stage's k-chunk into the warp's columns [WN * warp, + WN) of the tile.
__device__ __forceinline__ void compute_stage(Acc& acc, const u16* stage, int warp, int lane) {
  const u16* a = stage;
  const u16* b = stage + A_U16;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8, i = lane & 7, j = lane >> 3;
#pragma unroll
  for (int ks = 0; ks < KC / 16; ++ks) {
    u32 bf[NB / 2][4];
#pragma unroll
    for (int p = 0; p < NB / 2; ++p) {
      const int n = WN * warp + 16 * p;
#if CONV_OP == 0  // [n][k]: matrices (n, k), (n, k + 8), (n + 8, k), (n + 8, k + 8)
      ldmatrix_x4(bf[p], b + (n + i + (j >> 1) * 8) * BP + 16 * ks + (j & 1) * 8);
#else  // [k][n], transposed: (k, n), (k + 8, n), (k, n + 8), (k + 8, n + 8)
      ldmatrix_x4_trans(bf[p], b + (16 * ks + i + (j & 1) * 8) * BP + n + (j >> 1) * 8);
#endif
    }
#pragma unroll
    for (int h = 0; h < TM / 16; ++h) {
      u32 af[4];
      ldmatrix_x4(af, a + (16 * h + a_row) * AP + 16 * ks + a_col);
#pragma unroll
      for (int p = 0; p < NB / 2; ++p) {
        mma16816(acc.c[h][2 * p], af, bf[p][0], bf[p][1]);
        mma16816(acc.c[h][2 * p + 1], af, bf[p][2], bf[p][3]);
      }
    }
  }
}

__device__ __forceinline__ void run(const elem_t* __restrict__ in, const elem_t* __restrict__ w,
                                    elem_t* __restrict__ out, const ConvParams& p, int J,
                                    int NC) {
  extern __shared__ __align__(16) u16 smem[];
  const int M = p.N * p.H * p.W, rank = blockIdx.x % CLUSTER;
  const int n0 = blockIdx.x / CLUSTER * TN, m0 = blockIdx.y * TM;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int chunks = (J + KC - 1) / KC, per = (chunks + CLUSTER - 1) / CLUSTER;
  const int kc0 = rank * per, kc1 = kc0 + per < chunks ? kc0 + per : chunks;
  Acc acc;
#pragma unroll
  for (int h = 0; h < TM / 16; ++h)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc.c[h][nb][e] = 0.0f;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (kc0 + s < kc1) load_stage(smem + s * STAGE_U16, in, w, kc0 + s, m0, n0, M, J, NC);
    cp_async_commit();
  }
  for (int kc = kc0; kc < kc1; ++kc) {
    const int i = kc - kc0;
    if (kc + STAGES - 1 < kc1)
      load_stage(smem + (i + STAGES - 1) % STAGES * STAGE_U16, in, w, kc + STAGES - 1, m0, n0,
                 M, J, NC);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncthreads();
    compute_stage(acc, smem + i % STAGES * STAGE_U16, warp, lane);
    __syncthreads();  // the stage is refilled next
  }
  cp_async_wait<0>();
  __syncthreads();
  // the block's sums into shared memory as [TM][TN] fp32, then met with the cluster's
  float* part = reinterpret_cast<float*>(smem);
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int h = 0; h < TM / 16; ++h)
#pragma unroll
    for (int nb = 0; nb < NB; ++nb) {
      const int col = WN * warp + 8 * nb + 2 * t, row = 16 * h + g;
      *reinterpret_cast<float2*>(part + row * TN + col) =
          make_float2(acc.c[h][nb][0], acc.c[h][nb][1]);
      *reinterpret_cast<float2*>(part + (row + 8) * TN + col) =
          make_float2(acc.c[h][nb][2], acc.c[h][nb][3]);
    }
  cluster_meet_pairs<CLUSTER, TM, TN, THREADS>(part, rank, threadIdx.x,
                                               [&](int row, int col, float v0, float v1) {
    const int m = m0 + row, n = n0 + col;
    if (m < M && n < NC)  // NC a multiple of 8: a pair is wholly inside or outside
      *reinterpret_cast<u32*>(out + (long)m * NC + n) = pack_pair(v0, v1);
  });
}

}  // namespace pwc

#if CONV_OP == 0
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(128)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  pwc::run(x, w, y, p, p.C, p.K);
}
#else
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(128)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  pwc::run(dy, w, dx, p, p.K, p.C);
}
#endif

#endif  // FARM_DTYPE != 0 and sm_90a
