// Fused depthwise-separable convolution forward, the farm's GPU reference: simple loops, one
// thread per output element y[n,p,q,k], which computes the M*C depthwise values of its pixel
// on the fly (every thread of the pixel again: simple, not fast). The depthwise sums run in
// fp32 (R*S products each, every product exact in fp32 for 16-bit inputs), the pointwise sum
// in fp64; y is fp32. One source for NVRTC and hipRTC, no headers.
//
//   d[j] = sum_{r,s} x[n, p*stride - pad + r, q*stride - pad + s, j / M] * w_dw[j, r, s]
//   a[j] = act(d[j] * scale[j] + shift[j])                                    j < M*C
//   y[n,p,q,k] = sum_j a[j] * w_pw[k, j]  (+ b_pw[k] when pw_bias)
//
// Channels-last: x N x H x W x C, w_dw M*C x R x S, scale and shift M*C, w_pw K x M*C, b_pw K
// (read only when pw_bias), y N x P x Q x K (kernels/dwsep/problem.py). A grid-stride loop:
// any grid is right; blocks of up to REF_BLOCK threads.
#include "dwsep_common.cuh"

#ifndef REF_BLOCK
#define REF_BLOCK 256
#endif

extern "C" __global__ void __launch_bounds__(REF_BLOCK)
dwsep_fwd_ref(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
              const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
              const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
              float* __restrict__ y, DwsepParams p) {
  const long total = (long)p.N * p.P * p.Q * p.K;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
       i += (long)gridDim.x * blockDim.x) {
    const int k = (int)(i % p.K);
    long rest = i / p.K;
    const int q = (int)(rest % p.Q);
    rest /= p.Q;
    const int oh = (int)(rest % p.P);
    const int n = (int)(rest / p.P);
    double acc = 0.0;
    for (int j = 0; j < p.MC; ++j) {
      const int c = j / p.M;  // depthwise channel j reads input channel j / M
      float d = 0.0f;
      for (int r = 0; r < p.R; ++r) {
        const int h = oh * p.stride - p.pad + r;
        if (h < 0 || h >= p.H) continue;
        for (int s = 0; s < p.S; ++s) {
          const int w = q * p.stride - p.pad + s;
          if (w < 0 || w >= p.W) continue;
          d += to_float(x[(((long)n * p.H + h) * p.W + w) * p.C + c]) *
               to_float(w_dw[((long)j * p.R + r) * p.S + s]);
        }
      }
      const float a = dwsep_activate(d * to_float(scale[j]) + to_float(shift[j]), p.activation);
      acc += (double)a * (double)to_float(w_pw[(long)k * p.MC + j]);
    }
    if (p.pw_bias) acc += (double)to_float(b_pw[k]);
    y[i] = (float)acc;
  }
}
