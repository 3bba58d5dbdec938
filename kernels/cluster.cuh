// Thread-block clusters (sm_90a): a barrier over the cluster's blocks, reads of another block's
// shared memory (distributed shared memory) and a tile's sums met over the blocks, for the
// families whose split reductions meet there (conv/pointwise_cluster.cu, conv/wgmma_cluster.cu).
#pragma once
#include "common.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// A barrier over the cluster's non-exited threads (release/acquire: shared-memory writes before
// it are seen by the other blocks' reads after it).
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
}

// A float pair of cluster block `rank`'s shared memory at the offset of `local` (8-aligned).
__device__ __forceinline__ float2 cluster_read2(const float* local, u32 rank) {
  u32 remote;
  float2 v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote)
               : "r"((u32)__cvta_generic_to_shared(local)), "r"(rank));
  asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y)
               : "r"(remote) : "memory");
  return v;
}

// The sums of an NRows x NCols fp32 tile `part` (row-major, at the same offset in every block of
// the cluster) met: after a cluster barrier, block `rank` adds every NBlocks-th share of the
// tile's pairs over the cluster's blocks, thread `tid` of NThreads one pair at a time, and
// hands them to f(row, col, sum0, sum1); a second barrier keeps each block's sums until the
// others have read them.
template <int NBlocks, int NRows, int NCols, int NThreads, class F>
__device__ __forceinline__ void cluster_meet_pairs(const float* part, int rank, int tid, F&& f) {
  cluster_barrier();
  for (int e = (rank * NThreads + tid) * 2; e < NRows * NCols; e += NBlocks * NThreads * 2) {
    float2 total = make_float2(0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < NBlocks; ++r) {
      const float2 v = cluster_read2(part + e, (u32)r);
      total.x += v.x;
      total.y += v.y;
    }
    const int row = e / NCols;
    f(row, e - row * NCols, total.x, total.y);
  }
  cluster_barrier();
}
#endif
