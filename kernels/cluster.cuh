// Thread-block clusters (sm_90a): a barrier over the cluster's blocks and reads of another
// block's shared memory (distributed shared memory), for the families whose split reductions
// meet there (conv/pointwise_cluster.cu, conv/wgmma_cluster.cu).
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
#endif
