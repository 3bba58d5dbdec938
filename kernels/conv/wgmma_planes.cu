// conv_wgmma_planes: conv_wgmma's split backward-weight (wgmma.cu, included whole) with each
// slice's sums stored into its own fp32 plane of the workspace (slice_planes.cuh), then
// sum_planes adding the planes into dw: no launch to zero the workspace, no atomics.
#include "slice_planes.cuh"
#include "wgmma.cu"

// dw[i] = the sum of the `planes` planes' element i, in plane order; n = K x R x S x Cg.
extern "C" __global__ void __launch_bounds__(256) sum_planes(const float* __restrict__ ws,
                                                              elem_t* __restrict__ dw, int n,
                                                              int planes) {
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
    float sum = 0.0f;
    for (int z = 0; z < planes; ++z) sum += ws[(long long)z * n + i];
    dw[i] = from_float(sum);
  }
}
