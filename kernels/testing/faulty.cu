// Deliberately broken forward convolutions for the farm's own tests (FAULT selects the bug):
// 0 correct, 1 wrong values, 2 leaves one element unwritten, 3 writes far out of bounds,
// 4 never finishes.
#include "../common.cuh"

#ifndef FAULT
#define FAULT 0
#endif

extern "C" __global__ void conv2d_fwd(const elem_t* x, const elem_t* w, elem_t* y,
                                      ConvParams p, volatile int* never_set) {
#if FAULT == 4
  while (*never_set == 0) { }
#endif
  long total = (long)p.N * p.P * p.Q * p.K;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
       i += (long)gridDim.x * blockDim.x) {
    int kk = i % p.K;
    long rest = i / p.K;
    int q = rest % p.Q; rest /= p.Q;
    int oh = rest % p.P;
    int n = rest / p.P;
    int g = kk / p.Kg;
    float acc = 0.0f;
    for (int r = 0; r < p.R; ++r) {
      int h = oh * p.stride_h - p.pad_h + r * p.dil_h;
      if (h < 0 || h >= p.H) continue;
      for (int s = 0; s < p.S; ++s) {
        int wi = q * p.stride_w - p.pad_w + s * p.dil_w;
        if (wi < 0 || wi >= p.W) continue;
        for (int c = (FAULT == 1 ? 1 : 0); c < p.Cg; ++c)
          acc += to_float(x[(((long)n * p.H + h) * p.W + wi) * p.C + (long)g * p.Cg + c]) *
                 to_float(w[(((long)kk * p.R + r) * p.S + s) * p.Cg + c]);
      }
    }
#if FAULT == 2
    if (i == total - 1) continue;
#endif
#if FAULT == 3
    y[i + (1L << 40)] = from_float(acc);
#else
    y[i] = from_float(acc);
#endif
  }
}
