// Kernels the measurement loop itself needs: random inputs and the comparison with a reference.
#include "common.cuh"

__device__ __forceinline__ u32 mix(u64 x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return (u32)x;
}

// Uniform values in [-scale, scale), a different stream for every seed; never all zeros.
extern "C" __global__ void fill_random(elem_t* out, u64 n, u32 seed, float scale) {
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    u32 bits = mix(i * 0x9e3779b97f4a7c15ULL + seed);
    float u = (bits >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = from_float((2.0f * u - 1.0f) * scale);
  }
}

__device__ __forceinline__ u64 clock_ns() {
#ifdef FARM_HIP
  return __builtin_amdgcn_s_memrealtime() * 10;  // a 100 MHz constant clock
#else
  u64 now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  return now;
#endif
}

// Spins until the host writes `value` to `gate` (host memory the GPU reads), or `limit_ns` has
// passed. Queued ahead of a batch of timed launches and released once the host has queued the
// whole batch, it keeps the host's launch overhead out of every timed interval.
extern "C" __global__ void hold(const volatile u32* gate, u32 value, u64 limit_ns) {
  const u64 start = clock_ns();
  while (*gate != value && clock_ns() - start < limit_ns) {}
}

#ifdef FARM_HIP
#define WARP 64
__device__ __forceinline__ double shfl_down(double v, int d) { return __shfl_down(v, d); }
__device__ __forceinline__ float shfl_down(float v, int d) { return __shfl_down(v, d); }
__device__ __forceinline__ u32 shfl_down(u32 v, int d) { return __shfl_down(v, d); }
#else
#define WARP 32
__device__ __forceinline__ double shfl_down(double v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ float shfl_down(float v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}
__device__ __forceinline__ u32 shfl_down(u32 v, int d) {
  return __shfl_down_sync(0xffffffffu, v, d);
}
#endif

// acc[0] += sum (out - ref)^2, acc[1] += sum ref^2; stats[0] = max |out - ref| and
// stats[2] = max |ref| (float bits); stats[1] = count of elements of out that are NaN or infinite.
// Reduced per warp, then per block, so each block makes one atomic per statistic.
extern "C" __global__ void __launch_bounds__(256)
compare(const elem_t* out, const float* ref, u64 n, double* acc, u32* stats) {
  double d2 = 0.0, r2 = 0.0;
  float worst = 0.0f, peak = 0.0f;
  u32 bad = 0;
  for (u64 i = blockIdx.x * (u64)blockDim.x + threadIdx.x; i < n;
       i += (u64)gridDim.x * blockDim.x) {
    float o = to_float(out[i]), r = ref[i];
    peak = fmaxf(peak, fabsf(r));
    if (!isfinite(o)) { bad++; continue; }
    float d = o - r;
    d2 += (double)d * d;
    r2 += (double)r * r;
    worst = fmaxf(worst, fabsf(d));
  }
  for (int step = WARP / 2; step > 0; step /= 2) {
    d2 += shfl_down(d2, step);
    r2 += shfl_down(r2, step);
    worst = fmaxf(worst, shfl_down(worst, step));
    peak = fmaxf(peak, shfl_down(peak, step));
    bad += shfl_down(bad, step);
  }
  __shared__ double sd2[256 / WARP], sr2[256 / WARP];
  __shared__ float sworst[256 / WARP], speak[256 / WARP];
  __shared__ u32 sbad[256 / WARP];
  int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
  if (lane == 0) {
    sd2[warp] = d2; sr2[warp] = r2; sworst[warp] = worst; speak[warp] = peak; sbad[warp] = bad;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < (int)(blockDim.x / WARP); ++w) {
      d2 += sd2[w]; r2 += sr2[w]; bad += sbad[w];
      worst = fmaxf(worst, sworst[w]); peak = fmaxf(peak, speak[w]);
    }
    atomicAdd(&acc[0], d2);
    atomicAdd(&acc[1], r2);
    atomicMax(&stats[0], __float_as_uint(worst));  // non-negative floats order like their bits
    atomicMax(&stats[2], __float_as_uint(peak));
    if (bad) atomicAdd(&stats[1], bad);
  }
}
