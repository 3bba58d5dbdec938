// gn_onepass: group-normalization backward with one thread block per (n, g) holding the whole
// group. Two entries, launched in order:
//   gn_onepass_main     grid (N * G), block FARM_THREADS. Pass 1 over the group: per-channel
//                       ds = sum dy * x and db = sum dy (fp32), written to the workspace
//                       [ds: N x C][db: N x C], and sum1 / sum2 -> c1, c2 (block reduction).
//                       Pass 2 over the group (x and dy again, mostly from L2): dx.
//   gn_onepass_dparams  grid (ceil(C / 32)), block FARM_THREADS: dgamma, dbeta from the
//                       workspace, summed over N in a fixed order (no atomics; the workspace
//                       needs no zeroing: every entry is written before it is read).
// Macros:
//   FARM_LAYOUT   0 NHWC: the group is HW rows of Cg contiguous channels (row stride C). A
//                   thread owns FARM_CPT consecutive channels ("a slot", FARM_CPT / FARM_VEC
//                   vector accesses per row); tpr = min(slots, THREADS) threads share a row,
//                   rpb = THREADS / tpr rows run in parallel; slots beyond tpr are done in
//                   further rounds. Column sums over the rows: registers, then a pairwise tree
//                   in shared memory.
//                 1 NCHW: the group is Cg contiguous rows of HW elements. Teams of tpc threads
//                   (a power of two: the largest <= HW / VEC, at most THREADS) take one channel
//                   each, THREADS / tpc channels at a time; team sums by shuffles (and shared
//                   memory across 32-lane segments).
//   FARM_THREADS  threads per block (128, 256, 512)
//   FARM_VEC      elements per access: along C (NHWC; needs Cg % VEC == 0) or along HW (NCHW;
//                 needs HW % VEC == 0); VEC * sizeof(elem) <= 16
//   FARM_CPT      NHWC: channels per thread, a multiple of FARM_VEC (NCHW: must be 1)
// Shared memory is static: 8 * FARM_THREADS * FARM_CPT + 8 * FARM_THREADS / 32 bytes.
#include "gn_common.cuh"

#ifndef FARM_CPT
#define FARM_CPT FARM_VEC
#endif
#if FARM_LAYOUT == 0 && FARM_CPT % FARM_VEC != 0
#error "FARM_CPT must be a multiple of FARM_VEC"
#endif
#if FARM_LAYOUT == 1 && FARM_CPT != 1
#error "FARM_CPT is for NHWC; NCHW instances use FARM_CPT=1"
#endif
#if FARM_THREADS * FARM_CPT > 4096
#error "FARM_THREADS * FARM_CPT above 4096: the row sums would need over 32 KiB of shared memory"
#endif

constexpr int kVecPerSlot = FARM_CPT / FARM_VEC;

extern "C" __global__ void __launch_bounds__(FARM_THREADS, FARM_MIN_BLOCKS)
gn_onepass_main(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                const elem_t* __restrict__ gamma, const float* __restrict__ mean,
                const float* __restrict__ rstd, elem_t* __restrict__ dx,
                float* __restrict__ ws, GnParams p) {
  __shared__ float scratch[2 * FARM_THREADS / 32];
  const int tid = threadIdx.x;
  const int ng = blockIdx.x;  // n * G + g
  const int n = ng / p.G, g = ng - n * p.G;
  const int Cg = p.Cg, C = p.C, HW = p.HW;
  const float m = mean[ng], r = rstd[ng];
  float* ws_ds = ws + (long)n * C + (long)g * Cg;  // this group's channels of sample n
  float* ws_db = ws_ds + (long)p.N * C;
  const elem_t* gam = gamma + (long)g * Cg;
  float s1 = 0.0f, s2 = 0.0f;  // this thread's share of sum1, sum2

#if FARM_LAYOUT == 0
  __shared__ float red[2][FARM_THREADS * FARM_CPT];
  const long base = (long)n * HW * C + (long)g * Cg;  // element (n, hw = 0, c = g * Cg)
  const int slots = (Cg + FARM_CPT - 1) / FARM_CPT;
  const int tpr = slots < FARM_THREADS ? slots : FARM_THREADS;
  const int rpb = FARM_THREADS / tpr;
  const int col = tid % tpr, row = tid / tpr;
  const int width = tpr * FARM_CPT;  // channels per round
  // Pass 1: per-channel sums, one round of tpr slots at a time.
  for (int s0 = 0; s0 < slots; s0 += tpr) {
    const int c0 = (s0 + col) * FARM_CPT;  // first channel (within the group) of this slot
    const bool on = row < rpb && s0 + col < slots;
    float ads[FARM_CPT], adb[FARM_CPT];
#pragma unroll
    for (int k = 0; k < FARM_CPT; ++k) ads[k] = adb[k] = 0.0f;
    if (on) {
      const elem_t* xp = x + base + c0;
      const elem_t* dp = dy + base + c0;
      for (int hw = row; hw < HW; hw += rpb) {
        const long off = (long)hw * C;
#pragma unroll
        for (int v = 0; v < kVecPerSlot; ++v) {
          if (c0 + v * FARM_VEC < Cg) {  // whole vectors: Cg % VEC == 0 (applicability)
            float xv[FARM_VEC], dv[FARM_VEC];
            load_vec<FARM_VEC>(xp + off + v * FARM_VEC, xv);
            load_vec<FARM_VEC>(dp + off + v * FARM_VEC, dv);
#pragma unroll
            for (int e = 0; e < FARM_VEC; ++e) {
              ads[v * FARM_VEC + e] += dv[e] * xv[e];
              adb[v * FARM_VEC + e] += dv[e];
            }
          }
        }
      }
    }
    __syncthreads();  // the previous round's column sums have been read
    if (row < rpb) {
#pragma unroll
      for (int k = 0; k < FARM_CPT; ++k) {
        red[0][row * width + col * FARM_CPT + k] = ads[k];
        red[1][row * width + col * FARM_CPT + k] = adb[k];
      }
    }
    tree_rows(red[0], red[1], rpb, width);
    for (int k = tid; k < width; k += FARM_THREADS) {
      const int c = s0 * FARM_CPT + k;
      if (c < Cg) {
        const float ds = red[0][k], db = red[1][k], gm = to_float(gam[c]);
        ws_ds[c] = ds;
        ws_db[c] = db;
        s1 += ds * gm;
        s2 += db * gm;
      }
    }
  }
#else
  const long base = ((long)n * C + (long)g * Cg) * HW;  // the group is contiguous
  const int hwv = HW / FARM_VEC;                        // HW % VEC == 0 (applicability)
  const int tpc = hwv < FARM_THREADS ? pow2_floor(hwv) : FARM_THREADS;
  const int cpb = FARM_THREADS / tpc;
  const int team = tid / tpc, lane = tid % tpc;
  for (int c0 = 0; c0 < Cg; c0 += cpb) {
    const int c = c0 + team;
    float ads = 0.0f, adb = 0.0f;
    if (c < Cg) {
      const elem_t* xp = x + base + (long)c * HW;
      const elem_t* dp = dy + base + (long)c * HW;
      for (int v = lane; v < hwv; v += tpc) {
        float xv[FARM_VEC], dv[FARM_VEC];
        load_vec<FARM_VEC>(xp + v * FARM_VEC, xv);
        load_vec<FARM_VEC>(dp + v * FARM_VEC, dv);
#pragma unroll
        for (int e = 0; e < FARM_VEC; ++e) {
          ads += dv[e] * xv[e];
          adb += dv[e];
        }
      }
    }
    const float2 t = team_sum2(ads, adb, tpc, scratch);
    if (c < Cg && lane == 0) {
      const float gm = to_float(gam[c]);
      ws_ds[c] = t.x;
      ws_db[c] = t.y;
      s1 += t.x * gm;
      s2 += t.y * gm;
    }
  }
#endif

  const float2 sums = block_sum2(s1, s2, scratch);  // {sum1, sum2}
  const float inv_m = 1.0f / ((float)Cg * (float)HW);
  const float c1 = (sums.y * m - sums.x) * r * r * r * inv_m;
  const float c2 = -c1 * m - sums.y * r * inv_m;

  // Pass 2: dx = dy * gamma * rstd + x * c1 + c2.
#if FARM_LAYOUT == 0
  for (int s0 = 0; s0 < slots; s0 += tpr) {
    const int c0 = (s0 + col) * FARM_CPT;
    if (row >= rpb || s0 + col >= slots) continue;
    float a[FARM_CPT];
#pragma unroll
    for (int k = 0; k < FARM_CPT; ++k) a[k] = c0 + k < Cg ? to_float(gam[c0 + k]) * r : 0.0f;
    const elem_t* xp = x + base + c0;
    const elem_t* dp = dy + base + c0;
    elem_t* op = dx + base + c0;
    for (int hw = row; hw < HW; hw += rpb) {
      const long off = (long)hw * C;
#pragma unroll
      for (int v = 0; v < kVecPerSlot; ++v) {
        if (c0 + v * FARM_VEC < Cg) {
          float xv[FARM_VEC], dv[FARM_VEC], o[FARM_VEC];
          load_vec<FARM_VEC>(xp + off + v * FARM_VEC, xv);
          load_vec<FARM_VEC>(dp + off + v * FARM_VEC, dv);
#pragma unroll
          for (int e = 0; e < FARM_VEC; ++e) o[e] = dv[e] * a[v * FARM_VEC + e] + xv[e] * c1 + c2;
          store_vec<FARM_VEC>(op + off + v * FARM_VEC, o);
        }
      }
    }
  }
#else
  for (int c0 = 0; c0 < Cg; c0 += cpb) {
    const int c = c0 + team;
    if (c >= Cg) break;
    const float a = to_float(gam[c]) * r;
    const elem_t* xp = x + base + (long)c * HW;
    const elem_t* dp = dy + base + (long)c * HW;
    elem_t* op = dx + base + (long)c * HW;
    for (int v = lane; v < hwv; v += tpc) {
      float xv[FARM_VEC], dv[FARM_VEC], o[FARM_VEC];
      load_vec<FARM_VEC>(xp + v * FARM_VEC, xv);
      load_vec<FARM_VEC>(dp + v * FARM_VEC, dv);
#pragma unroll
      for (int e = 0; e < FARM_VEC; ++e) o[e] = dv[e] * a + xv[e] * c1 + c2;
      store_vec<FARM_VEC>(op + v * FARM_VEC, o);
    }
  }
#endif
}

extern "C" __global__ void __launch_bounds__(FARM_THREADS, FARM_MIN_BLOCKS)
gn_onepass_dparams(const float* __restrict__ ws, const float* __restrict__ mean,
                   const float* __restrict__ rstd, elem_t* __restrict__ dgamma,
                   elem_t* __restrict__ dbeta, GnParams p) {
  __shared__ float red[2 * FARM_THREADS];
  dparams_block(ws, 1, mean, rstd, dgamma, dbeta, p, blockIdx.x, red);
}
