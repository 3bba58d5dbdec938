// Direct convolution, one thread per output element, fp32 accumulation. The farm's reference
// (FARM_REFERENCE: fp32 output) and the conv_naive family (output in the element type).
#include "../common.cuh"

#ifdef FARM_REFERENCE
typedef float out_t;
__device__ __forceinline__ out_t store_value(float v) { return v; }
#else
typedef elem_t out_t;
__device__ __forceinline__ out_t store_value(float v) { return from_float(v); }
#endif

#ifndef BLOCK
#define BLOCK 256
#endif

// y[n,p,q,g,k] = sum_{c,r,s} x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, g, c] * w[g,k,r,s,c]
extern "C" __global__ void __launch_bounds__(BLOCK)
conv2d_fwd(const elem_t* x, const elem_t* w, out_t* y, ConvParams p) {
  long total = (long)p.N * p.P * p.Q * p.K;
  for (long i = blockIdx.x * (long)BLOCK + threadIdx.x; i < total; i += (long)gridDim.x * BLOCK) {
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
        const elem_t* xp = x + (((long)n * p.H + h) * p.W + wi) * p.C + (long)g * p.Cg;
        const elem_t* wp = w + (((long)kk * p.R + r) * p.S + s) * p.Cg;
        for (int c = 0; c < p.Cg; ++c) acc += to_float(xp[c]) * to_float(wp[c]);
      }
    }
    y[i] = store_value(acc);
  }
}

// dx[n,h,w,g,c] = sum_{k,r,s} dy[n,p,q,g,k] * w[g,k,r,s,c] where h = p*sh - ph + r*dh, likewise w
extern "C" __global__ void __launch_bounds__(BLOCK)
conv2d_bwd_data(const elem_t* dy, const elem_t* w, out_t* dx, ConvParams p) {
  long total = (long)p.N * p.H * p.W * p.C;
  for (long i = blockIdx.x * (long)BLOCK + threadIdx.x; i < total; i += (long)gridDim.x * BLOCK) {
    int cc = i % p.C;
    long rest = i / p.C;
    int wi = rest % p.W; rest /= p.W;
    int h = rest % p.H;
    int n = rest / p.H;
    int g = cc / p.Cg, c = cc % p.Cg;
    float acc = 0.0f;
    for (int r = 0; r < p.R; ++r) {
      int ph = h + p.pad_h - r * p.dil_h;
      if (ph < 0 || ph % p.stride_h) continue;
      int oh = ph / p.stride_h;
      if (oh >= p.P) continue;
      for (int s = 0; s < p.S; ++s) {
        int pw = wi + p.pad_w - s * p.dil_w;
        if (pw < 0 || pw % p.stride_w) continue;
        int q = pw / p.stride_w;
        if (q >= p.Q) continue;
        const elem_t* dyp = dy + (((long)n * p.P + oh) * p.Q + q) * p.K + (long)g * p.Kg;
        const elem_t* wp = w + (((long)g * p.Kg * p.R + r) * p.S + s) * p.Cg + c;
        long wstride = (long)p.R * p.S * p.Cg;
        for (int k = 0; k < p.Kg; ++k) acc += to_float(dyp[k]) * to_float(wp[k * wstride]);
      }
    }
    dx[i] = store_value(acc);
  }
}

// dw[g,k,r,s,c] = sum_{n,p,q} dy[n,p,q,g,k] * x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, g, c]
extern "C" __global__ void __launch_bounds__(BLOCK)
conv2d_bwd_weight(const elem_t* x, const elem_t* dy, out_t* dw, ConvParams p) {
  long total = (long)p.K * p.R * p.S * p.Cg;
  for (long i = blockIdx.x * (long)BLOCK + threadIdx.x; i < total; i += (long)gridDim.x * BLOCK) {
    int c = i % p.Cg;
    long rest = i / p.Cg;
    int s = rest % p.S; rest /= p.S;
    int r = rest % p.R;
    int kk = rest / p.R;
    int g = kk / p.Kg;
    float acc = 0.0f;
    for (int n = 0; n < p.N; ++n)
      for (int oh = 0; oh < p.P; ++oh) {
        int h = oh * p.stride_h - p.pad_h + r * p.dil_h;
        if (h < 0 || h >= p.H) continue;
        for (int q = 0; q < p.Q; ++q) {
          int wi = q * p.stride_w - p.pad_w + s * p.dil_w;
          if (wi < 0 || wi >= p.W) continue;
          acc += to_float(dy[(((long)n * p.P + oh) * p.Q + q) * p.K + kk]) *
                 to_float(x[(((long)n * p.H + h) * p.W + wi) * p.C + (long)g * p.Cg + c]);
        }
      }
    dw[i] = store_value(acc);
  }
}
