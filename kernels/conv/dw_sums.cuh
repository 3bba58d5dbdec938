// How the splits of a depthwise backward-weight meet (dw_tma_bwd_weight.cu, dw_tc_bwd_weight.cu),
// without atomics: block (split, channel block cb) leaves its sums in its shared memory,
// part[tap * CH + channel], and
// - CLUSTER == 1: writes them, fp32, into its slice of a workspace laid out as dw, which a
//   second launch adds up and converts;
// - CLUSTER > 1: the splits are the CLUSTER blocks of a thread-block cluster; after a cluster
//   barrier block r adds every CLUSTER-th (channel, tap) over the cluster's blocks (distributed
//   shared memory) and writes dw: one launch, no workspace.
#pragma once
#include "dw_tma.cuh"

#ifndef CLUSTER
#define CLUSTER 1
#endif

#if FARM_DTYPE != 0 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace dw {

#if CLUSTER > 1
// A barrier over the cluster's blocks (release/acquire: shared-memory writes before it are
// seen by the other blocks' reads after it) and a float of block `rank`'s shared memory.
__device__ __forceinline__ void cluster_barrier() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
}
__device__ __forceinline__ float cluster_read(const float* local, u32 rank) {
  u32 remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote)
               : "r"(sm90_smem(local)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
#endif

// The block's sums `part` (BLOCK threads, this one `tid`) met with the other splits', as above.
template <int BLOCK>
__device__ __forceinline__ void meet_splits(float* part, void* out, const Geometry& g,
                                            int split, int cb, int tid) {
  constexpr int taps = FR * FR;
#if CLUSTER > 1
  cluster_barrier();
  const u32 rank = (u32)split;  // the cluster spans the grid's x: its blocks are the splits
  elem_t* dw = reinterpret_cast<elem_t*>(out);
  for (int j = (int)rank * BLOCK + tid; j < CH * taps; j += CLUSTER * BLOCK) {
    const int t = j / CH, c = cb * CH + (j - t * CH);
    float total = 0.0f;
#pragma unroll
    for (int r = 0; r < CLUSTER; ++r) total += cluster_read(part + j, (u32)r);
    if (c < g.C) dw[c * taps + t] = from_float(total);
  }
  cluster_barrier();  // the other blocks have read this block's sums
#else
  __syncthreads();
  float* slice = reinterpret_cast<float*>(out) + (long)split * g.C * taps;
  for (int j = tid; j < CH * taps; j += BLOCK) {
    const int t = j / CH, c = cb * CH + (j - t * CH);
    if (c < g.C) slice[c * taps + t] = part[j];
  }
#endif
}

}  // namespace dw
#endif
