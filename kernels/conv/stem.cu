// conv_stem: backward-data of convolutions with few input channels a group (C/G = CG, 1 to 4:
// the stems of image networks, RGB in, tens of channels out), any filter, stride, padding and
// dilation, on the CUDA cores (fp32 accumulation), for NVIDIA and AMD alike.
//
// dx[n, h, w, g, c] = sum over k, r, s of dy[n, oh, ow, g, k] w[g, k, r, s, c] where
// h + pad_h - r dil_h = oh stride_h (and the same along w). The input pixels fall into
// stride_h x stride_w classes by (h mod stride_h, w mod stride_w); a class's pixels receive
// from the same filter taps, at an output offset that moves by one with each step of the class
// (oh = i + (rh + pad_h - r dil_h) / stride_h for h = rh + i stride_h). Block (x, y, z) serves
// class y of group z: every thread of a warp holds pixels of one class at consecutive w, so the
// tap loops are the same for the warp and the filter's values, staged in shared memory as fp32
// ([R x S][K/G][CG], the whole group's), are read once a warp. A thread computes PIX pixels of
// one column, consecutive in the class (rows i0 .. i0 + PIX - 1): each filter value read serves
// them all. With VECTOR, dy's channels arrive 16 bytes at a time (K and K/G multiples of
// 16 / sizeof(elem_t)). With LANES > 1 that many consecutive threads share a pixel, each summing
// every LANES-th VEC of its channels, and add their sums by shuffles: a warp's loads then read
// whole rows of dy (with one thread a pixel, each load of a warp touches 32 rows, whose next
// pieces the L1 must keep until the thread comes back for them). Blocks walk the class's
// (n, row group, column) items grid-stride, BLOCK / LANES consecutive items at a time.
//
// Dynamic shared memory: R x S x K/G x CG floats (conv/stem.py keeps it to 48 KB). Macros: CG
// (1 to 4), PIX (1, 2 or 4), VECTOR (0 or 1), LANES (1, 2, 4 or 8), BLOCK (threads).
#include "../common.cuh"

#ifndef CG
#define CG 3
#endif
#ifndef PIX
#define PIX 2
#endif
#ifndef VECTOR
#define VECTOR 1
#endif
#ifndef LANES
#define LANES 1
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#define VEC (VECTOR ? 16 / (int)sizeof(elem_t) : 1)  // dy's channels a load
#define SLOTS (BLOCK / LANES)                        // a block's pixels at a time

// dy's VEC channels at `at` as floats.
__device__ __forceinline__ void load_channels(const elem_t* __restrict__ at, float (&f)[VEC]) {
#if VECTOR
  const uint4 v = *reinterpret_cast<const uint4*>(at);
  const u32 word[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int e = 0; e < VEC; ++e)
#if FARM_DTYPE == 0
    f[e] = __uint_as_float(word[e]);
#else
    f[e] = to_float((elem_t)(e % 2 ? word[e / 2] >> 16 : word[e / 2] & 0xffffu));
#endif
#else
  f[0] = to_float(*at);
#endif
}

// The sum over the aligned segment of LANES lanes that `v` is one of, on every lane of it (the
// segments of 32 lanes on both vendors: an AMD wavefront of 64 holds two).
__device__ __forceinline__ float lanes_sum(float v) {
#pragma unroll
  for (int m = 1; m < LANES; m <<= 1)
#ifdef FARM_HIP
    v += __shfl_xor(v, m, 32);
#else
    v += __shfl_xor_sync(0xffffffffu, v, m, 32);
#endif
  return v;
}

// Whether t is a multiple of s (t may be negative).
__device__ __forceinline__ bool divides(int t, int s) { return t % s == 0; }

extern "C" __global__ void __launch_bounds__(BLOCK)
stem_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
              elem_t* __restrict__ dx, ConvParams p) {
  extern __shared__ float ws[];  // [R x S][Kg][CG] of group g
  const int g = blockIdx.z, rh = (int)blockIdx.y / p.stride_w, rw = (int)blockIdx.y % p.stride_w;
  const int taps = p.R * p.S, count = taps * p.Kg * CG;
  for (int e = threadIdx.x; e < count; e += BLOCK) {
    const int c = e % CG, k = (e / CG) % p.Kg, t = e / (CG * p.Kg);
    ws[e] = to_float(w[((long)(g * p.Kg + k) * taps + t) * p.Cg + c]);
  }
  __syncthreads();
  const int Hc = rh < p.H ? (p.H - rh + p.stride_h - 1) / p.stride_h : 0;  // the class's rows
  const int Wc = rw < p.W ? (p.W - rw + p.stride_w - 1) / p.stride_w : 0;  // and columns
  const int groups = (Hc + PIX - 1) / PIX;                                  // of PIX rows
  const long items = (long)p.N * groups * Wc;
  const int lane = threadIdx.x % LANES;  // this thread's channels: lane VEC, + LANES VEC, ...
  // the block's items at a time, the same for every thread (the shuffles need the whole warp)
  for (long first = (long)blockIdx.x * SLOTS; first < items; first += (long)gridDim.x * SLOTS) {
    const long item = first + threadIdx.x / LANES;
    const bool valid = item < items;
    const int j = (int)(item % Wc), i0 = (int)(item / Wc % groups) * PIX;
    const int n = (int)(item / Wc / groups);
    float acc[PIX][CG];
#pragma unroll
    for (int q = 0; q < PIX; ++q)
#pragma unroll
      for (int c = 0; c < CG; ++c) acc[q][c] = 0.0f;
    for (int r = 0; r < (valid ? p.R : 0); ++r) {
      const int th = rh + p.pad_h - r * p.dil_h;
      if (!divides(th, p.stride_h)) continue;
      const int oh0 = i0 + th / p.stride_h;  // pixel i0's output row under tap r
      for (int s = 0; s < p.S; ++s) {
        const int tw = rw + p.pad_w - s * p.dil_w;
        if (!divides(tw, p.stride_w)) continue;
        const int ow = j + tw / p.stride_w;
        if ((unsigned)ow >= (unsigned)p.Q) continue;
        const float* wt = ws + (r * p.S + s) * p.Kg * CG;
        // pixel q's dy row: (n, oh0 + q, ow), group g's channels; read only where oh is in range
        const long first = (((long)n * p.P + oh0) * p.Q + ow) * p.K + g * p.Kg;
        const long step = (long)p.Q * p.K;
#pragma unroll 1
        for (int k = lane * VEC; k < p.Kg; k += LANES * VEC) {
          float wk[VEC][CG];
#pragma unroll
          for (int e = 0; e < VEC; ++e)
#pragma unroll
            for (int c = 0; c < CG; ++c) wk[e][c] = wt[(k + e) * CG + c];
#pragma unroll
          for (int q = 0; q < PIX; ++q) {
            if ((unsigned)(oh0 + q) < (unsigned)p.P && i0 + q < Hc) {
              float f[VEC];
              load_channels(dy + first + q * step + k, f);
#pragma unroll
              for (int e = 0; e < VEC; ++e)
#pragma unroll
                for (int c = 0; c < CG; ++c) acc[q][c] = fmaf(f[e], wk[e][c], acc[q][c]);
            }
          }
        }
      }
    }
#if LANES > 1
#pragma unroll
    for (int q = 0; q < PIX; ++q)
#pragma unroll
      for (int c = 0; c < CG; ++c) acc[q][c] = lanes_sum(acc[q][c]);
#endif
    if (!valid || lane) continue;
    const int wcol = rw + j * p.stride_w;
#pragma unroll
    for (int q = 0; q < PIX; ++q) {
      if (i0 + q < Hc) {
        elem_t* out = dx + (((long)n * p.H + rh + (i0 + q) * p.stride_h) * p.W + wcol) * p.C +
                      g * p.Cg;
#pragma unroll
        for (int c = 0; c < CG; ++c) out[c] = from_float(acc[q][c]);
      }
    }
  }
}
