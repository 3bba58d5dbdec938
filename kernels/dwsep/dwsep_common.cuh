// Shared by the dwsep_fwd sources: the parameters passed by value and the activation between
// the two stages (kernels/dwsep/problem.py describes the operator and its tensors).
#pragma once
#include "../common.cuh"

// The activation's index in DWSEP_ACTIVATIONS (kernels/dwsep/problem.py).
enum DwsepActivation { DWSEP_NONE = 0, DWSEP_RELU = 1, DWSEP_RELU6 = 2, DWSEP_SILU = 3 };

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
    default: return v;
  }
}
