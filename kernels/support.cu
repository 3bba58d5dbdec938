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

// acc[0] += sum (out - ref)^2, acc[1] += sum ref^2; stats[0] = max |out - ref| and
// stats[2] = max |ref| (float bits); stats[1] = count of elements of out that are NaN or infinite.
extern "C" __global__ void compare(const elem_t* out, const float* ref, u64 n, double* acc,
                                   u32* stats) {
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
  atomicAdd(&acc[0], d2);
  atomicAdd(&acc[1], r2);
  atomicMax(&stats[0], __float_as_uint(worst));  // non-negative floats order like their bits
  atomicMax(&stats[2], __float_as_uint(peak));
  if (bad) atomicAdd(&stats[1], bad);
}
