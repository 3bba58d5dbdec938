// Shared by the dwsep_fwd sources: the parameters passed by value and the activation between
// the two stages (kernels/dwsep/problem.py describes the operator and its tensors).
#pragma once
#include "../common.cuh"

// The activation's index in DWSEP_ACTIVATIONS (kernels/dwsep/problem.py).
enum DwsepActivation {
  DWSEP_NONE = 0, DWSEP_RELU = 1, DWSEP_RELU6 = 2, DWSEP_SILU = 3, DWSEP_HARDSWISH = 4
};

// Passed by value as a kernel's last argument (15 x int32). MC = M * C.
struct DwsepParams {
  int N, C, H, W, K, R, S, P, Q;
  int stride, pad, M, MC, activation, pw_bias;
};

__device__ __forceinline__ float dwsep_activate(float v, int activation) {
  switch (activation) {
    case DWSEP_RELU: return v > 0.0f ? v : 0.0f;
    case DWSEP_RELU6: return v > 0.0f ? (v < 6.0f ? v : 6.0f) : 0.0f;
    case DWSEP_SILU: return v / (1.0f + expf(-v));
    case DWSEP_HARDSWISH: return v * fminf(fmaxf(v + 3.0f, 0.0f), 6.0f) * (1.0f / 6.0f);
    default: return v;
  }
}

// The activated depthwise value of channel j (reading input channel j / M) at output pixel
// `pix` (n, p, q flattened), from global memory; 0 for a pixel or channel out of range.
__device__ __forceinline__ float dwsep_value(const elem_t* __restrict__ x,
                                             const elem_t* __restrict__ w_dw,
                                             const elem_t* __restrict__ scale,
                                             const elem_t* __restrict__ shift,
                                             const DwsepParams& p, long pix, int j) {
  if (j >= p.MC || pix >= (long)p.N * p.P * p.Q) return 0.0f;
  const int q = (int)(pix % p.Q);
  const long rest = pix / p.Q;
  const int oh = (int)(rest % p.P), n = (int)(rest / p.P);
  const int c = j / p.M;
  float d = 0.0f;
  for (int r = 0; r < p.R; ++r) {
    const int h = oh * p.stride - p.pad + r;
    if (h < 0 || h >= p.H) continue;
    const elem_t* row = x + ((long)n * p.H + h) * p.W * p.C + c;
    const elem_t* wr = w_dw + ((long)j * p.R + r) * p.S;
    for (int s = 0; s < p.S; ++s) {
      const int w = q * p.stride - p.pad + s;
      if (w < 0 || w >= p.W) continue;
      d += to_float(row[(long)w * p.C]) * to_float(wr[s]);
    }
  }
  return dwsep_activate(d * to_float(scale[j]) + to_float(shift[j]), p.activation);
}
