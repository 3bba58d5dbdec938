// conv_wgmma_cluster: conv_wgmma's backward-weight (wgmma.cu, included whole) with the
// reduction over the N*P*Q output pixels split over the CLUSTER blocks of a thread-block cluster
// instead of atomics into a workspace: cluster c takes dw's tile c, its block of rank r the r-th
// share of the k-tiles through conv_wgmma's producer and consumer warpgroups; the consumers
// leave their fp32 sums in the block's (then idle) stages, and after a cluster barrier each
// block adds every 2 x CLUSTER-th pair of the tile over the cluster's blocks (distributed shared
// memory) and writes dw. One launch, no workspace, no atomics: dw's few tiles (K/G x C/G R S)
// times the cluster fill the GPU. Macros: conv_wgmma's, and CLUSTER (2, 4 or 8); grid x is
// CLUSTER x the tiles, grid z the groups.
#define IGEMM_OP 2
#include "wgmma.cu"
#include "../cluster.cuh"

#ifndef CLUSTER
#define CLUSTER 4
#endif

#if FARM_DTYPE != 0 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(WG_THREADS, 1)
wgmma_bwd_weight_cluster(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                         elem_t* __restrict__ dw, ConvParams p MAPS) {
  using namespace ig;
  static_assert(BM * BN * 4 <= NST * STAGE_BYTES, "the tile's fp32 sums fit the stages");
  const int g = blockIdx.z, rank = blockIdx.x % CLUSTER, tile = blockIdx.x / CLUSTER;
  const int CRS = p.Cg * p.R * p.S, KT = (p.N * p.P * p.Q + BK - 1) / BK;
  const int n_tiles = (CRS + BN - 1) / BN, mt = tile / n_tiles;
  const int m0 = mt * BM, n0 = (tile - mt * n_tiles) * BN;
  const int per = (KT + CLUSTER - 1) / CLUSTER;
  const int kt0 = rank * per < KT ? rank * per : KT, kt1 = kt0 + per < KT ? kt0 + per : KT;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7, kg = g * p.Kg;
  int step = 0;
  if (wg >= CONSUMERS) {
    LoaderA la;
    la.init(dy, p, g, m0, threadIdx.x - 128 * CONSUMERS);
    LoaderB lb;
    lb.init(x, p, g, n0, threadIdx.x - 128 * CONSUMERS);
    produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a,
                                                      unsigned char* b, u64* bar) {
#if TMA_A  // dy as [NPQ][K]: 64 rows of the reduction, BM / 64 blocks of k
#pragma unroll
      for (int c = 0; c < BM / 64; ++c)
        sm90_tma_2d(a + c * MN_BLOCK_BYTES, tmap_a, kg + m0 + 64 * c, kt * BK, bar);
#else
      (void)a;
#endif
#if TMA_B  // x as [NHW][C] (1x1, stride 1, no padding, G = 1): BN / 64 blocks of c
#pragma unroll
      for (int c = 0; c < BN / 64; ++c)
        sm90_tma_2d(b + c * MN_BLOCK_BYTES, tmap_b, n0 + 64 * c, kt * BK, bar);
#else
      (void)b;
#endif
    });
    produce_end(step);
    return;  // the cluster barriers below wait on the threads that have not exited
  }
  Acc acc;
  consume(acc, stages, bars, wg, kt1 - kt0, step, kt1 - kt0);
  consumers_sync();  // every consumer is done with the stages
  float* part = reinterpret_cast<float*>(stages);
  for_each_pair(acc, wg, [&](int r, int c, float v0, float v1) {
    *reinterpret_cast<float2*>(part + r * BN + c) = make_float2(v0, v1);
  });
  cluster_meet_pairs<CLUSTER, BM, BN, 128 * CONSUMERS>(part, rank, threadIdx.x,
                                                       [&](int r, int c, float v0, float v1) {
    const int m = m0 + r, j = n0 + c;
    if (m < p.Kg && j < CRS)  // CRS a multiple of 8: a pair is wholly inside or outside
      *reinterpret_cast<u32*>(dw + (long)(kg + m) * CRS + j) = pack_rn(v0, v1);
  });
}
#endif
