// gn_twopass: group-normalization backward in three launches, made for shapes with few
// (n, g) groups or long rows (where one block per group leaves the GPU idle):
//   gn_twopass_partial  grid (x_blocks, splits, N), block FARM_THREADS. Per-(n, c) partial
//                       ds = sum dy * x, db = sum dy over one of `splits` chunks of HW, to the
//                       workspace [ds: splits x N x C][db: splits x N x C].
//   gn_twopass_finish   grid (ceil(N * G / (THREADS / 32)) + ceil(C / 32)), block FARM_THREADS.
//                       The first blocks: one 32-lane segment per (n, g) sums the partials over
//                       the splits and the group's channels -> c1, c2, and writes per-(n, c)
//                       coefficients a = gamma * rstd, b = c1, k = c2 after the partials
//                       ([a: N x C][b: N x C][k: N x C]). The last ceil(C / 32) blocks: dgamma,
//                       dbeta (32 channels per block, samples split over the block's rows).
//   gn_twopass_dx       grid (x_blocks, N), block FARM_THREADS: dx = dy * a + x * b + k, an
//                       elementwise grid-stride loop over each sample's C * HW elements.
// Every workspace entry is written before it is read: it needs no zeroing. No atomics: the
// results are the same every run.
// Macros:
//   FARM_LAYOUT   0 NHWC, 1 NCHW
//   FARM_THREADS  threads per block (128, 256, 512)
//   FARM_VEC      elements per access along C (NHWC; needs C % VEC == 0) or HW (NCHW; needs
//                 HW % VEC == 0); VEC * sizeof(elem) <= 16
// The split of HW (the farm's config field split_hw) is a launch-time choice: gridDim.y of
// gn_twopass_partial and the `splits` argument of the other two, which must be equal.
// gn_twopass_partial's `lanes`: NHWC, threads along C per row (rows in parallel = THREADS /
// lanes; gridDim.x * lanes >= C / VEC); NCHW, threads per channel (a power of two <= THREADS;
// channels per block = THREADS / lanes; gridDim.x * (THREADS / lanes) >= C).
// Shared memory is static: at most 8 * FARM_THREADS * FARM_VEC + 8 * FARM_THREADS / 32 bytes.
#include "gn_common.cuh"

extern "C" __global__ void __launch_bounds__(FARM_THREADS, FARM_MIN_BLOCKS)
gn_twopass_partial(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                   float* __restrict__ ws, GnParams p, int lanes) {
  const int tid = threadIdx.x;
  const int s = blockIdx.y, splits = gridDim.y, n = blockIdx.z;
  const int C = p.C, HW = p.HW;
  float* ws_ds = ws + ((long)s * p.N + n) * C;
  float* ws_db = ws_ds + (long)splits * p.N * C;
#if FARM_LAYOUT == 0
  __shared__ float red[2][FARM_THREADS * FARM_VEC];
  const int cv = C / FARM_VEC;  // vectors per row (C % VEC == 0: applicability)
  const int tpr = lanes, rpb = FARM_THREADS / tpr;
  const int col = tid % tpr, row = tid / tpr;
  const int v = blockIdx.x * tpr + col;  // this thread's vector along C
  const int len = (HW + splits - 1) / splits;
  const int hw0 = s * len, hw1 = min(HW, hw0 + len);
  float ads[FARM_VEC], adb[FARM_VEC];
#pragma unroll
  for (int e = 0; e < FARM_VEC; ++e) ads[e] = adb[e] = 0.0f;
  if (row < rpb && v < cv) {
    const long base = (long)n * HW * C + (long)v * FARM_VEC;
    for (int hw = hw0 + row; hw < hw1; hw += rpb) {
      float xv[FARM_VEC], dv[FARM_VEC];
      load_vec<FARM_VEC>(x + base + (long)hw * C, xv);
      load_vec<FARM_VEC>(dy + base + (long)hw * C, dv);
#pragma unroll
      for (int e = 0; e < FARM_VEC; ++e) {
        ads[e] += dv[e] * xv[e];
        adb[e] += dv[e];
      }
    }
  }
  const int width = tpr * FARM_VEC;
  if (row < rpb) {
#pragma unroll
    for (int e = 0; e < FARM_VEC; ++e) {
      red[0][row * width + col * FARM_VEC + e] = ads[e];
      red[1][row * width + col * FARM_VEC + e] = adb[e];
    }
  }
  tree_rows(red[0], red[1], rpb, width);
  for (int k = tid; k < width; k += FARM_THREADS) {
    const int c = blockIdx.x * width + k;
    if (c < C) {
      ws_ds[c] = red[0][k];
      ws_db[c] = red[1][k];
    }
  }
#else
  __shared__ float scratch[2 * FARM_THREADS / 32];
  const int tpc = lanes, cpb = FARM_THREADS / tpc;
  const int team = tid / tpc, lane = tid % tpc;
  const int c = blockIdx.x * cpb + team;
  const int hwv = HW / FARM_VEC;  // HW % VEC == 0 (applicability)
  const int len = (hwv + splits - 1) / splits;
  const int v0 = s * len, v1 = min(hwv, v0 + len);
  float ads = 0.0f, adb = 0.0f;
  if (c < C) {
    const long base = ((long)n * C + c) * HW;
    for (int v = v0 + lane; v < v1; v += tpc) {
      float xv[FARM_VEC], dv[FARM_VEC];
      load_vec<FARM_VEC>(x + base + (long)v * FARM_VEC, xv);
      load_vec<FARM_VEC>(dy + base + (long)v * FARM_VEC, dv);
#pragma unroll
      for (int e = 0; e < FARM_VEC; ++e) {
        ads += dv[e] * xv[e];
        adb += dv[e];
      }
    }
  }
  const float2 t = team_sum2(ads, adb, tpc, scratch);
  if (c < C && lane == 0) {
    ws_ds[c] = t.x;
    ws_db[c] = t.y;
  }
#endif
}

extern "C" __global__ void __launch_bounds__(FARM_THREADS, FARM_MIN_BLOCKS)
gn_twopass_finish(const elem_t* __restrict__ gamma, const float* __restrict__ mean,
                  const float* __restrict__ rstd, float* __restrict__ ws,
                  elem_t* __restrict__ dgamma, elem_t* __restrict__ dbeta, GnParams p,
                  int splits) {
  constexpr int SEGS = FARM_THREADS / 32;
  const int groups = p.N * p.G;
  const int coef_blocks = (groups + SEGS - 1) / SEGS;
  if ((int)blockIdx.x >= coef_blocks) {  // dgamma, dbeta (uniform over the block)
    __shared__ float red[2 * FARM_THREADS];
    dparams_block(ws, splits, mean, rstd, dgamma, dbeta, p, blockIdx.x - coef_blocks, red);
    return;
  }
  const int lane = threadIdx.x & 31;
  const int ng = blockIdx.x * SEGS + (threadIdx.x >> 5);
  const bool on = ng < groups;
  const int n = on ? ng / p.G : 0, g = on ? ng - n * p.G : 0;
  const long plane = (long)p.N * p.C;
  const long row = (long)n * p.C + (long)g * p.Cg;  // (n, first channel of g)
  float s1 = 0.0f, s2 = 0.0f;
  if (on) {
    for (int c = lane; c < p.Cg; c += 32) {
      float ds = 0.0f, db = 0.0f;
      for (int s = 0; s < splits; ++s) {
        ds += ws[s * plane + row + c];
        db += ws[(splits + s) * plane + row + c];
      }
      const float gm = to_float(gamma[g * p.Cg + c]);
      s1 += ds * gm;
      s2 += db * gm;
    }
  }
  s1 = seg_sum(s1, 32);  // the whole warp calls it; each segment gets its group's sums
  s2 = seg_sum(s2, 32);
  if (!on) return;
  const float m = mean[ng], r = rstd[ng];
  const float inv_m = 1.0f / ((float)p.Cg * (float)p.HW);
  const float c1 = (s2 * m - s1) * r * r * r * inv_m;
  const float c2 = -c1 * m - s2 * r * inv_m;
  float* ca = ws + 2 * splits * plane;
  for (int c = lane; c < p.Cg; c += 32) {
    ca[row + c] = to_float(gamma[g * p.Cg + c]) * r;
    ca[plane + row + c] = c1;
    ca[2 * plane + row + c] = c2;
  }
}

extern "C" __global__ void __launch_bounds__(FARM_THREADS, FARM_MIN_BLOCKS)
gn_twopass_dx(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
              const float* __restrict__ ws, elem_t* __restrict__ dx, GnParams p, int splits) {
  const int n = blockIdx.y, C = p.C;
  const long plane = (long)p.N * C;
  const float* ca = ws + 2 * splits * plane + (long)n * C;  // coefficients of sample n
  const float* cb = ca + plane;
  const float* ck = cb + plane;
  const long sample = (long)C * p.HW;
  const elem_t* xs = x + n * sample;
  const elem_t* ds = dy + n * sample;
  elem_t* os = dx + n * sample;
  // C * HW < 2^31 and a multiple of VEC (applicability): 32-bit unsigned indices never wrap.
  const u32 nv = (u32)(sample / FARM_VEC), C32 = (u32)C;
  for (u32 j = blockIdx.x * FARM_THREADS + threadIdx.x; j < nv; j += gridDim.x * FARM_THREADS) {
    const u32 e0 = j * FARM_VEC;
    float xv[FARM_VEC], dv[FARM_VEC], o[FARM_VEC];
    load_vec<FARM_VEC>(xs + e0, xv);
    load_vec<FARM_VEC>(ds + e0, dv);
#if FARM_LAYOUT == 0
    const u32 c = e0 % C32;  // VEC consecutive channels of one pixel
    float a[FARM_VEC], b[FARM_VEC], k[FARM_VEC];
    load_f32<FARM_VEC>(ca + c, a);
    load_f32<FARM_VEC>(cb + c, b);
    load_f32<FARM_VEC>(ck + c, k);
#pragma unroll
    for (int e = 0; e < FARM_VEC; ++e) o[e] = dv[e] * a[e] + xv[e] * b[e] + k[e];
#else
    const u32 c = e0 / (u32)p.HW;  // VEC consecutive positions of one channel
    const float a = ca[c], b = cb[c], k = ck[c];
#pragma unroll
    for (int e = 0; e < FARM_VEC; ++e) o[e] = dv[e] * a + xv[e] * b + k;
#endif
    store_vec<FARM_VEC>(os + e0, o);
  }
}
