// What the wgmma families whose pointwise weight arrives by bulk copies share
// (wgmma_resident.cu with BULK, wgmma_ring.cu): the weight packed beforehand into the stages'
// own image, [K tiles][chunks][TILE_N rows of 128 bytes, swizzled], so that a stage arrives by
// one bulk copy (the TMA engine) signalled on an mbarrier (sm90.cuh's); and the distributed
// shared memory of a cluster (an address in another block, a store there, the proxy fence).
// The including kernel defines TILE_N and includes dwsep_wgmma.cuh first.
#pragma once
#include "../sm90.cuh"

// The packed weight, one thread per 16-byte piece; zeros past K and MC.
__device__ __forceinline__ void pack_stages(const elem_t* __restrict__ w_pw,
                                            unsigned char* __restrict__ packed,
                                            const DwsepParams& p) {
  const int chunks = (p.MC + 63) / 64, k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
  const int piece = (int)(i & 7), row = (int)((i >> 3) % TILE_N);
  const long tile = (i >> 3) / TILE_N;  // k tile * chunks + chunk
  if (tile >= (long)k_tiles * chunks) return;
  const int k = (int)(tile / chunks) * TILE_N + row, j = (int)(tile % chunks) * 64 + 8 * piece;
  uint4 v = make_uint4(0u, 0u, 0u, 0u);
  if (k < p.K && j < p.MC) v = __ldg(reinterpret_cast<const uint4*>(w_pw + (long)k * p.MC + j));
  *reinterpret_cast<uint4*>(packed + tile * TILE_N * ROW_BYTES + sw128_offset(row, piece)) = v;
}

// One thread: the stage's bytes expected on `bar`, then the bulk copy that brings them.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, u64* bar) {
  sm90_mbar_expect(bar, bytes);
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
      ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
}

// The address of `local`'s counterpart in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ u32 cluster_address(const void* local, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote)
               : "r"(smem_u32(local)), "r"(rank));
  return remote;
}
__device__ __forceinline__ void cluster_store16(u32 remote, uint4 v) {
  asm volatile("st.shared::cluster.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(remote), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
// Stores of this thread in any state space (the cluster's shared memory included) ordered
// before the async proxy's (wgmma's) reads.
__device__ __forceinline__ void fence_proxy_async_all() {
  asm volatile("fence.proxy.async;\n" ::: "memory");
}
