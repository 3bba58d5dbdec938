// Float atomicAdd as a reduction that returns nothing, for the split reductions' fp32 sums.
// Inside the wgmma kernels' split epilogues (wgmma.cu's backward-weight, wgmma_split.cu's
// add_slice) ptxas keeps atomicAdd(float*, float) a returning atomic (ATOMG) although the
// value is unused: each waits for L2's reply before its destination register is used again,
// and the consumers spend about half their time there (Nsight Compute: long-scoreboard stalls
// behind 64 to 128 ATOMG a thread). Included before those files, this maps every float
// atomicAdd to red.global.add.f32 (REDG); an int atomicAdd (the tiles' counters, whose value is
// read) stays the atomic. A float atomicAdd whose value is read would not compile.
#pragma once

__device__ __forceinline__ void farm_atomic_add(float* address, float value) {
  asm volatile("red.global.add.f32 [%0], %1;" ::"l"(address), "f"(value) : "memory");
}
__device__ __forceinline__ int farm_atomic_add(int* address, int value) {
  return atomicAdd(address, value);
}
#define atomicAdd(address, value) farm_atomic_add(address, value)
