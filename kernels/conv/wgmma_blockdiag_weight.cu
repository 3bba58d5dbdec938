// conv_wgmma_blockdiag_weight: a grouped backward-weight of C/G below 64 channels as
// conv_wgmma's split backward-weight over super-groups of `per` groups (wgmma.cu, included
// whole), each slice's fp32 sums of the super-groups' filter dw' [K][R][S][per Cg] stored into
// a plane of its own (slice_planes.cuh); sum_blockdiag_planes then adds, for each of dw's
// elements, the planes' entries on the diagonal blocks (output channel k's group at its slot
// among its super-group's `per` groups) and converts.
#include "slice_planes.cuh"
#include "wgmma.cu"

// dw [K][R][S][Cg] from `planes` planes of dw' [K][R][S][per Cg] (fp32), in plane order.
extern "C" __global__ void __launch_bounds__(256)
sum_blockdiag_planes(const float* __restrict__ ws, elem_t* __restrict__ dw, int K, int RS,
                     int Cg, int Kg, int per, int planes) {
  const int n = K * RS * Cg, width = per * Cg;
  const long long plane = (long long)K * RS * width;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
    const int krs = i / Cg, c = i - krs * Cg, k = krs / RS;
    const float* src = ws + (long long)krs * width + (k / Kg) % per * Cg + c;
    float sum = 0.0f;
    for (int z = 0; z < planes; ++z) sum += src[z * plane];
    dw[i] = from_float(sum);
  }
}
