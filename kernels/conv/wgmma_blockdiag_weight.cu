// conv_wgmma_blockdiag_weight: a grouped backward-weight of C/G below 64 channels (a divisor
// of 64) as conv_wgmma's split backward-weight over C / 64 super-groups of 64 channels
// (wgmma.cu, included whole), each slice's fp32 sums of the super-groups' filter
// dw' [K][R][S][64] stored into a plane of its own (slice_planes.cuh); sum_blockdiag_planes
// then adds, for each of dw's elements, the planes' entries on the diagonal blocks (output
// channel k's group at its slot among its super-group's 64 / Cg groups) and converts.
#include "slice_planes.cuh"
#include "wgmma.cu"

// dw [K][R][S][Cg] from `planes` planes of dw' [K][R][S][64] (fp32), in plane order.
extern "C" __global__ void __launch_bounds__(256)
sum_blockdiag_planes(const float* __restrict__ ws, elem_t* __restrict__ dw, int K, int RS,
                     int Cg, int Kg, int planes) {
  const int n = K * RS * Cg;
  const long long plane = (long long)K * RS * 64;
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) {
    const int krs = i / Cg, c = i - krs * Cg, k = krs / RS;
    const float* src = ws + (long long)krs * 64 + (k / Kg) % (64 / Cg) * Cg + c;
    float sum = 0.0f;
    for (int z = 0; z < planes; ++z) sum += src[z * plane];
    dw[i] = from_float(sum);
  }
}
