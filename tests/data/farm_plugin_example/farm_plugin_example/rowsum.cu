// rowsum_fwd: y[r] = sum over c of x[r * cols + c], x a rows x cols matrix (row-major), sums
// in fp32 (the reference: fp64). One source, three builds:
//   FARM_REFERENCE   rowsum_reference: one thread per row, fp32 y; rowsum_inputs: x = |x|
//   LANES defined    rowsum_lanes: LANES threads per row, THREADS / LANES rows per block
//   neither          rowsum_thread: one thread per row
// THREADS, LANES and VEC are the families' config fields (farm_plugin_example/families.py).
// common.cuh is the farm's (kernels/common.cuh): elem_t, to_float, from_float by FARM_DTYPE.
#include "common.cuh"

#ifdef FARM_REFERENCE

// The farm fills x with random values in [-1, 1]; a row of them may sum to almost nothing,
// and then no fp32 sum comes relatively close to the exact one. |x| (the sums of exponentials,
// squares or activations that rows hold in practice) keeps every partial sum below the result.
extern "C" __global__ void rowsum_inputs(elem_t* __restrict__ x, int elements) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < elements;
       i += (long)gridDim.x * blockDim.x) {
    const float v = to_float(x[i]);
    x[i] = from_float(v < 0.f ? -v : v);
  }
}

extern "C" __global__ void rowsum_reference(const elem_t* __restrict__ x, float* __restrict__ y,
                                            int rows, int cols) {
  for (long r = blockIdx.x * (long)blockDim.x + threadIdx.x; r < rows;
       r += (long)gridDim.x * blockDim.x) {
    double sum = 0.0;
    for (int c = 0; c < cols; ++c) sum += to_float(x[r * cols + c]);
    y[r] = (float)sum;
  }
}

#else

#ifndef THREADS
#define THREADS 256
#endif
#ifndef VEC
#define VEC 1
#endif
static_assert(VEC * sizeof(elem_t) <= 16, "one load is at most 16 bytes");

// VEC consecutive elements, loaded at once (cols % VEC == 0 keeps every row aligned).
struct alignas(VEC * sizeof(elem_t)) Vec {
  elem_t v[VEC];
};

// acc[k] += element k of v; pairwise_total adds N partial sums pairwise.
__device__ __forceinline__ void vec_add(float* acc, const Vec& v) {
#pragma unroll
  for (int k = 0; k < VEC; ++k) acc[k] += to_float(v.v[k]);
}

template <int N>
__device__ __forceinline__ float pairwise_total(float* acc) {
#pragma unroll
  for (int s = N / 2; s > 0; s >>= 1) {
#pragma unroll
    for (int j = 0; j < s; ++j) acc[j] += acc[j + s];
  }
  return acc[0];
}

#ifdef LANES
static_assert(THREADS % LANES == 0 && (LANES & (LANES - 1)) == 0, "LANES: a power of two");

extern "C" __global__ void __launch_bounds__(THREADS)
rowsum_lanes(const elem_t* __restrict__ x, elem_t* __restrict__ y, int rows, int cols) {
  __shared__ float partial[THREADS];
  const int lane = threadIdx.x % LANES, slot = threadIdx.x / LANES;
  const int vectors = cols / VEC;
  for (long first = (long)blockIdx.x * (THREADS / LANES); first < rows;
       first += (long)gridDim.x * (THREADS / LANES)) {  // the same trips for the whole block
    const long r = first + slot;
    float acc[VEC] = {};
    if (r < rows) {
      const Vec* row = reinterpret_cast<const Vec*>(x + r * cols);
      for (int i = lane; i < vectors; i += LANES) vec_add(acc, row[i]);
    }
    partial[threadIdx.x] = pairwise_total<VEC>(acc);
    __syncthreads();
    for (int s = LANES / 2; s > 0; s >>= 1) {
      if (lane < s) partial[threadIdx.x] += partial[threadIdx.x + s];
      __syncthreads();
    }
    if (lane == 0 && r < rows) y[r] = from_float(partial[threadIdx.x]);
    __syncthreads();
  }
}

#else

// Four vectors at a time into 4 * VEC independent partial sums, added pairwise at the end:
// shorter dependency chains, and a rounding error that grows more slowly along a long row.
extern "C" __global__ void __launch_bounds__(THREADS)
rowsum_thread(const elem_t* __restrict__ x, elem_t* __restrict__ y, int rows, int cols) {
  const long r = blockIdx.x * (long)THREADS + threadIdx.x;
  if (r >= rows) return;
  const Vec* row = reinterpret_cast<const Vec*>(x + r * cols);
  const int vectors = cols / VEC;
  float acc[4 * VEC] = {};
  int i = 0;
  for (; i + 4 <= vectors; i += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) vec_add(acc + u * VEC, row[i + u]);
  }
  for (; i < vectors; ++i) vec_add(acc, row[i]);
  y[r] = from_float(pairwise_total<4 * VEC>(acc));
}

#endif
#endif
