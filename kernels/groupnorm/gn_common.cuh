// Shared by the group-normalization backward sources (reference.cu, onepass.cu, twopass.cu):
// the problem parameters, vector loads and stores through fp32, and deterministic reductions.
// One source for NVRTC and hipRTC, no headers (see ../common.cuh for the element types).
//
// Operator (per sample n and group g of G; Cg = C / G channels per group, HW = H * W,
// M = Cg * HW elements per group; mean, rstd: fp32 [N * G], index n * G + g):
//   ds[n,c] = sum_hw dy * x,  db[n,c] = sum_hw dy
//   sum1 = sum_{c in g} ds[n,c] * gamma[c],  sum2 = sum_{c in g} db[n,c] * gamma[c]
//   c1 = (sum2 * mean - sum1) * rstd^3 / M,  c2 = -c1 * mean - sum2 * rstd / M
//   dx = dy * gamma[c] * rstd + x * c1 + c2
//   dgamma[c] = sum_n (ds[n,c] - mean * db[n,c]) * rstd,  dbeta[c] = sum_n db[n,c]
// Layouts: FARM_LAYOUT 0 = NHWC (channels last, contiguous C), 1 = NCHW.
#pragma once
#include "../common.cuh"

#ifndef FARM_THREADS
#define FARM_THREADS 256
#endif
#ifndef FARM_VEC
#define FARM_VEC 1
#endif
#ifndef FARM_LAYOUT
#define FARM_LAYOUT 0
#endif
// Blocks per multiprocessor the registers must allow (__launch_bounds__). 1 states no occupancy
// target: without one, NVRTC 13's ptxas spilled a few registers to reach full occupancy on some
// instances (e.g. 40 bytes at 32 registers where 40 registers need none).
#ifndef FARM_MIN_BLOCKS
#define FARM_MIN_BLOCKS 1
#endif

#if FARM_THREADS % 32 != 0 || FARM_THREADS > 1024
#error "FARM_THREADS must be a multiple of 32, at most 1024"
#endif
#if FARM_VEC != 1 && FARM_VEC != 2 && FARM_VEC != 4 && FARM_VEC != 8
#error "FARM_VEC must be 1, 2, 4 or 8"
#endif
#if FARM_LAYOUT != 0 && FARM_LAYOUT != 1
#error "FARM_LAYOUT must be 0 (NHWC) or 1 (NCHW)"
#endif

// Passed by value as the last-but-one argument of every entry (8 x int32; see plan.GnParams).
// `layout` is read by the reference only; the families are compiled for one FARM_LAYOUT.
struct GnParams {
  int N, C, H, W, G, Cg, HW, layout;
};

constexpr int kElemBytes = (int)sizeof(elem_t);
static_assert(FARM_VEC * kElemBytes <= 16, "one vector access is at most 16 bytes");

// ---------------------------------------------------------------------------------------------
// V consecutive elements (aligned to V elements) as fp32, and back.
struct alignas(16) GnRaw16 { u32 w[4]; };
struct alignas(8) GnRaw8 { u32 w[2]; };

template <int V>
__device__ __forceinline__ void gn_unpack(const u32* words, float* out) {
#if FARM_DTYPE == 0
#pragma unroll
  for (int i = 0; i < V; ++i) out[i] = __uint_as_float(words[i]);
#else
#pragma unroll
  for (int i = 0; i < V / 2; ++i) {
    out[2 * i] = to_float((u16)(words[i] & 0xffffu));
    out[2 * i + 1] = to_float((u16)(words[i] >> 16));
  }
#endif
}

template <int V>
__device__ __forceinline__ void gn_pack(const float* in, u32* words) {
#if FARM_DTYPE == 0
#pragma unroll
  for (int i = 0; i < V; ++i) words[i] = __float_as_uint(in[i]);
#else
#pragma unroll
  for (int i = 0; i < V / 2; ++i)
    words[i] = (u32)from_float(in[2 * i]) | ((u32)from_float(in[2 * i + 1]) << 16);
#endif
}

template <int V>
__device__ __forceinline__ void load_vec(const elem_t* p, float* out) {
  constexpr int BYTES = V * kElemBytes;
  if constexpr (BYTES == 16) {
    GnRaw16 r = *reinterpret_cast<const GnRaw16*>(p);
    gn_unpack<V>(r.w, out);
  } else if constexpr (BYTES == 8) {
    GnRaw8 r = *reinterpret_cast<const GnRaw8*>(p);
    gn_unpack<V>(r.w, out);
  } else if constexpr (BYTES == 4) {
    u32 r = *reinterpret_cast<const u32*>(p);
    gn_unpack<V>(&r, out);
  } else {
    out[0] = to_float(p[0]);
  }
}

template <int V>
__device__ __forceinline__ void store_vec(elem_t* p, const float* in) {
  constexpr int BYTES = V * kElemBytes;
  if constexpr (BYTES == 16) {
    GnRaw16 r;
    gn_pack<V>(in, r.w);
    *reinterpret_cast<GnRaw16*>(p) = r;
  } else if constexpr (BYTES == 8) {
    GnRaw8 r;
    gn_pack<V>(in, r.w);
    *reinterpret_cast<GnRaw8*>(p) = r;
  } else if constexpr (BYTES == 4) {
    u32 r;
    gn_pack<V>(in, &r);
    *reinterpret_cast<u32*>(p) = r;
  } else {
    p[0] = from_float(in[0]);
  }
}

// V consecutive fp32 values (aligned to V floats when V is 2 or 4; 8 = two 16-byte loads).
template <int V>
__device__ __forceinline__ void load_f32(const float* p, float* out) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int i = 0; i < V / 4; ++i) {
      float4 v = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
    }
  } else if constexpr (V == 2) {
    float2 v = *reinterpret_cast<const float2*>(p);
    out[0] = v.x; out[1] = v.y;
  } else {
    out[0] = p[0];
  }
}

// ---------------------------------------------------------------------------------------------
// Reductions. Lanes are grouped in aligned segments of 32 on both vendors (an AMD wavefront of
// 64 holds two), so the geometry never depends on the warp size. All are deterministic.

__device__ __forceinline__ float xor32(float v, int mask) {
#ifdef FARM_HIP
  return __shfl_xor(v, mask, 32);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask, 32);
#endif
}

// Sum over aligned segments of `width` lanes (a power of two, at most 32): every lane of a
// segment gets its segment's sum. Every thread of the warp must call it (width uniform).
__device__ __forceinline__ float seg_sum(float v, int width) {
  for (int m = width >> 1; m > 0; m >>= 1) v += xor32(v, m);
  return v;
}

// Sums of a and b over the whole block, returned to every thread. `scratch` holds
// 2 * FARM_THREADS / 32 floats. Every thread must call it.
__device__ __forceinline__ float2 block_sum2(float a, float b, float* scratch) {
  a = seg_sum(a, 32);
  b = seg_sum(b, 32);
  const int seg = threadIdx.x >> 5;
  __syncthreads();  // scratch may still be read from an earlier call
  if ((threadIdx.x & 31) == 0) {
    scratch[2 * seg] = a;
    scratch[2 * seg + 1] = b;
  }
  __syncthreads();
  float ta = 0.0f, tb = 0.0f;
#pragma unroll
  for (int i = 0; i < FARM_THREADS / 32; ++i) {
    ta += scratch[2 * i];
    tb += scratch[2 * i + 1];
  }
  return make_float2(ta, tb);
}

// Sums of a and b over teams of `team` consecutive threads (a power of two, at most
// FARM_THREADS); the result is valid in the team's first thread. `scratch` holds
// 2 * FARM_THREADS / 32 floats. Every thread must call it (team uniform over the block).
__device__ __forceinline__ float2 team_sum2(float a, float b, int team, float* scratch) {
  a = seg_sum(a, team < 32 ? team : 32);
  b = seg_sum(b, team < 32 ? team : 32);
  if (team <= 32) return make_float2(a, b);
  const int seg = threadIdx.x >> 5, per = team >> 5;
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    scratch[2 * seg] = a;
    scratch[2 * seg + 1] = b;
  }
  __syncthreads();
  float ta = 0.0f, tb = 0.0f;
  if (threadIdx.x % team == 0)
    for (int i = 0; i < per; ++i) {
      ta += scratch[2 * (seg + i)];
      tb += scratch[2 * (seg + i) + 1];
    }
  return make_float2(ta, tb);
}

// a and b hold `rows` rows of `width` floats each (row-major, rows * width <= what the caller
// allocated); afterwards row 0 holds the column sums (a pairwise tree over the rows: the same
// order every run). Starts and ends with a barrier; every thread must call it.
__device__ __forceinline__ void tree_rows(float* a, float* b, int rows, int width) {
  for (int active = rows; active > 1;) {
    const int half = (active + 1) >> 1, moved = (active - half) * width, off = half * width;
    __syncthreads();
    for (int i = threadIdx.x; i < moved; i += FARM_THREADS) {
      a[i] += a[i + off];
      b[i] += b[i + off];
    }
    active = half;
  }
  __syncthreads();
}

// Largest power of two <= v (v >= 1).
__device__ __forceinline__ int pow2_floor(int v) { return 1 << (31 - __clz(v)); }

// The per-channel parameter reduction shared by both families: workspace partial sums ds, db
// laid out [splits][N][C] (db after all of ds), summed over splits and samples:
//   dgamma[c] = sum_n rstd * (ds - mean * db),  dbeta[c] = sum_n db.
// A block owns 32 consecutive channels (`block` numbers it); its FARM_THREADS / 32 rows of
// lanes take samples n = row, row + rows, ..., then the rows are summed in a fixed order.
__device__ __forceinline__ void dparams_block(const float* __restrict__ ws, int splits,
                                              const float* __restrict__ mean,
                                              const float* __restrict__ rstd,
                                              elem_t* __restrict__ dgamma,
                                              elem_t* __restrict__ dbeta, const GnParams& p,
                                              int block, float* red /* 2 * FARM_THREADS */) {
  constexpr int ROWS = FARM_THREADS / 32;
  const int lane = threadIdx.x & 31, row = threadIdx.x >> 5;
  const int c = block * 32 + lane;
  const long plane = (long)p.N * p.C;
  float dg = 0.0f, dbt = 0.0f;
  if (c < p.C) {
    const int g = c / p.Cg;
    for (int n = row; n < p.N; n += ROWS) {
      float ds = 0.0f, db = 0.0f;
      for (int s = 0; s < splits; ++s) {
        ds += ws[s * plane + (long)n * p.C + c];
        db += ws[(splits + s) * plane + (long)n * p.C + c];
      }
      const float m = mean[n * p.G + g], r = rstd[n * p.G + g];
      dg += (ds - m * db) * r;
      dbt += db;
    }
  }
  red[threadIdx.x] = dg;
  red[FARM_THREADS + threadIdx.x] = dbt;
  __syncthreads();
  if (row == 0 && c < p.C) {
    for (int r = 1; r < ROWS; ++r) {
      dg += red[r * 32 + lane];
      dbt += red[FARM_THREADS + r * 32 + lane];
    }
    dgamma[c] = from_float(dg);
    dbeta[c] = from_float(dbt);
  }
}
