// conv_wgmma_blockdiag_bwd_weight: the backward-weight of a grouped convolution of C/G below 64
// channels (a divisor of 64) as conv_wgmma_red's split one over C / 64 super-groups of 64
// channels (wgmma_red.cu, included whole): its fp32 sums are dw' [K][R][S][64], whose block
// diagonal is dw; extract_blockdiag then converts that block into dw [K][R][S][Cg].
#include "wgmma_red.cu"

// dw from the workspace's dw', a grid-stride loop over dw's elements: element (k, rs, c) is
// dw''s (k, rs, slot Cg + c), slot the place of k's group (k / Kg) among its super-group's
// 64 / Cg groups (the inverse of expand_blockdiag's placement).
extern "C" __global__ void __launch_bounds__(256) extract_blockdiag(const float* __restrict__ ws,
                                                                     elem_t* __restrict__ dw,
                                                                     int K, int RS, int Cg,
                                                                     int Kg) {
  const long long total = (long long)K * RS * Cg;
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < total; i += gridDim.x * 256ll) {
    const long long krs = i / Cg;
    const int c = (int)(i - krs * Cg), k = (int)(krs / RS);
    dw[i] = from_float(ws[krs * 64 + (k / Kg) % (64 / Cg) * Cg + c]);
  }
}
