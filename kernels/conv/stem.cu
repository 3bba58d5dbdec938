// conv_stem: forward and backward-data of convolutions with few input channels a group (C/G =
// CG, 1 to 4: the stems of image networks, RGB in, tens of channels out), any filter, stride,
// padding and dilation, on the CUDA cores (fp32 accumulation), for NVIDIA and AMD alike.
//
// stem_fwd: thread = an output pixel and KT of its group's output channels (grid y: the
// channel slices, z: the groups); a warp's threads hold consecutive pixels of one slice, whose
// filter values ([R x S x CG][KT] floats in shared memory) every thread reads at the same
// address. Per tap a thread reads its pixel's CG input channels and adds them times the tap's
// KT x CG values to its KT sums, which it writes 16 bytes at a time with VECTOR. Blocks walk
// the N x P x Q pixels grid-stride.
//
// stem_bwd_data:
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
// stem_bwd_data_patches: backward-data of the patch stems (R = S = stride = PATCH, no padding
// or dilation, H and W multiples of PATCH), whose output pixels each own a PATCH x PATCH block
// of input pixels that no other reaches: a thread takes one output pixel and writes its block,
// dy's K/G channels times the group's filter ([K/G][PATCH x PATCH x CG] floats in shared
// memory, read at one address by the whole warp). Each dy row is read once, where the
// residue classes of stem_bwd_data read it once per class.
//
// Dynamic shared memory: stem_fwd R x S x CG x KT floats, stem_bwd_data and
// stem_bwd_data_patches R x S x K/G x CG (conv/stem.py keeps them to 48 KB). Macros: CG (1 to 4), BLOCK (threads), VECTOR (0 or 1),
// KT (8, 16 or 32; stem_fwd), PIX (1, 2 or 4) and LANES (1, 4 or 8; stem_bwd_data), PATCH (2
// or 4; stem_bwd_data_patches).
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
#ifndef KT
#define KT 16
#endif
#ifndef PATCH
#define PATCH 0  // stem_bwd_data_patches only where it is 2 or 4
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

#if FARM_DTYPE != 0
// Two outputs as one 32-bit word of 16-bit values (the first in the low half).
__device__ __forceinline__ u32 pack2(float a, float b) {
  return (u32)from_float(a) | ((u32)from_float(b) << 16);
}
#endif

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

extern "C" __global__ void __launch_bounds__(BLOCK)
stem_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
         ConvParams p) {
  extern __shared__ float ws[];  // [R x S][CG][KT]: output channels k0 .. k0 + KT - 1 of group g
  const int g = blockIdx.z, k0 = blockIdx.y * KT, taps = p.R * p.S;
  for (int e = threadIdx.x; e < taps * CG * KT; e += BLOCK) {
    const int kk = e % KT, c = (e / KT) % CG, t = e / (KT * CG);
    ws[e] = k0 + kk < p.Kg ? to_float(w[((long)(g * p.Kg + k0 + kk) * taps + t) * p.Cg + c])
                           : 0.0f;
  }
  __syncthreads();
  const long pixels = (long)p.N * p.P * p.Q;
  for (long pix = (long)blockIdx.x * BLOCK + threadIdx.x; pix < pixels;
       pix += (long)gridDim.x * BLOCK) {
    const int ow = (int)(pix % p.Q), oh = (int)(pix / p.Q % p.P), n = (int)(pix / p.Q / p.P);
    float acc[KT];
#pragma unroll
    for (int kk = 0; kk < KT; ++kk) acc[kk] = 0.0f;
    for (int r = 0; r < p.R; ++r) {
      const int ih = oh * p.stride_h - p.pad_h + r * p.dil_h;
      if ((unsigned)ih >= (unsigned)p.H) continue;
      for (int s = 0; s < p.S; ++s) {
        const int iw = ow * p.stride_w - p.pad_w + s * p.dil_w;
        if ((unsigned)iw >= (unsigned)p.W) continue;
        const elem_t* in = x + (((long)n * p.H + ih) * p.W + iw) * p.C + g * p.Cg;
        const float* wt = ws + (r * p.S + s) * CG * KT;
#pragma unroll
        for (int c = 0; c < CG; ++c) {
          const float v = to_float(in[c]);
#pragma unroll
          for (int kk = 0; kk < KT; kk += 4) {
            const float4 w4 = *reinterpret_cast<const float4*>(wt + c * KT + kk);
            acc[kk] = fmaf(v, w4.x, acc[kk]);
            acc[kk + 1] = fmaf(v, w4.y, acc[kk + 1]);
            acc[kk + 2] = fmaf(v, w4.z, acc[kk + 2]);
            acc[kk + 3] = fmaf(v, w4.w, acc[kk + 3]);
          }
        }
      }
    }
    elem_t* out = y + pix * p.K + g * p.Kg + k0;
#if VECTOR && FARM_DTYPE != 0
#pragma unroll
    for (int kk = 0; kk < KT; kk += 8)  // conv/stem.py: K/G and K multiples of 8
      if (k0 + kk < p.Kg)
        *reinterpret_cast<uint4*>(out + kk) =
            make_uint4(pack2(acc[kk], acc[kk + 1]), pack2(acc[kk + 2], acc[kk + 3]),
                       pack2(acc[kk + 4], acc[kk + 5]), pack2(acc[kk + 6], acc[kk + 7]));
#else
#pragma unroll
    for (int kk = 0; kk < KT; ++kk)
      if (k0 + kk < p.Kg) out[kk] = from_float(acc[kk]);
#endif
  }
}

#if PATCH > 0
extern "C" __global__ void __launch_bounds__(BLOCK)
stem_bwd_data_patches(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                      elem_t* __restrict__ dx, ConvParams p) {
  constexpr int OUT = PATCH * PATCH * CG;  // a patch's values: (r, s, c), c fastest
  extern __shared__ float ws[];            // [K/G][OUT] of group g
  const int g = blockIdx.z;
  for (int e = threadIdx.x; e < p.Kg * OUT; e += BLOCK) {
    const int k = e / OUT, rsc = e % OUT;  // w[g, k, r, s, c] is [k][rsc] already
    ws[e] = to_float(w[(long)(g * p.Kg + k) * OUT + rsc]);
  }
  __syncthreads();
  const long pixels = (long)p.N * p.P * p.Q;
  for (long pix = (long)blockIdx.x * BLOCK + threadIdx.x; pix < pixels;
       pix += (long)gridDim.x * BLOCK) {
    const int ow = (int)(pix % p.Q), oh = (int)(pix / p.Q % p.P), n = (int)(pix / p.Q / p.P);
    float acc[OUT];
#pragma unroll
    for (int o = 0; o < OUT; ++o) acc[o] = 0.0f;
    const elem_t* row = dy + pix * p.K + g * p.Kg;
#pragma unroll 1
    for (int k = 0; k < p.Kg; k += VEC) {
      float f[VEC];
      load_channels(row + k, f);
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        // OUT is a multiple of 4 (PATCH is 2 or 4): the filter's values 16 bytes at a time
        const float4* wk = reinterpret_cast<const float4*>(ws + (k + e) * OUT);
#pragma unroll
        for (int o = 0; o < OUT / 4; ++o) {
          const float4 v = wk[o];
          acc[4 * o] = fmaf(f[e], v.x, acc[4 * o]);
          acc[4 * o + 1] = fmaf(f[e], v.y, acc[4 * o + 1]);
          acc[4 * o + 2] = fmaf(f[e], v.z, acc[4 * o + 2]);
          acc[4 * o + 3] = fmaf(f[e], v.w, acc[4 * o + 3]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < PATCH; ++r) {
      elem_t* out = dx + (((long)n * p.H + oh * PATCH + r) * p.W + ow * PATCH) * p.C + g * p.Cg;
#pragma unroll
      for (int s = 0; s < PATCH; ++s)
#pragma unroll
        for (int c = 0; c < CG; ++c) out[s * p.C + c] = from_float(acc[(r * PATCH + s) * CG + c]);
    }
  }
}
#endif
