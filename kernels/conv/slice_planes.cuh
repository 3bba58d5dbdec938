// Each split slice's fp32 sums stored into its own plane of the workspace, for wgmma.cu's split
// backward-weight: included before that file, its float atomicAdd (the slice's sums, the only
// float atomics there) becomes a plain store at the same place of plane blockIdx.z / G, planes
// of K x R x S x Cg floats (the names p, the kernel's ConvParams, is in scope at that call).
// Nothing is zeroed first and nothing waits for L2; a second launch sums the planes into dw,
// in the same order every time. The int atomicAdd (fused_reduce's tile counters) stays the
// atomic; the family runs without fused_reduce.
#pragma once

__device__ __forceinline__ void farm_plane_store(float* address, float value, long long plane) {
  address[plane] = value;
}
__device__ __forceinline__ int farm_plane_store(int* address, int value, long long) {
  return atomicAdd(address, value);
}
#define atomicAdd(address, value)                                                          \
  farm_plane_store(address, value,                                                         \
                   (long long)(blockIdx.z / p.G) * p.K * p.Cg * p.R * p.S)
