// conv_pointwise: 1x1 convolutions of stride 1 without padding or groups (the pointwise layers),
// forward and backward-data, as a stream of rows through a GEMM whose other two dimensions are
// small: out[m][n] = sum_j in[m][j] * B[j][n] over the N*H*W pixels m, with in = x, B = w^T
// (forward) or in = dy, B = w (backward-data). NVIDIA mma.sync m16n8k16, fp32 sums.
//
// The whole weight sits in shared memory for the block's life, as [n][j] (j contiguous, rows
// J16 + 8 apart: an odd number of 16-byte chunks, so that ldmatrix's eight rows land in
// distinct banks). Blocks are persistent and their warps independent after that: warp w of
// block b takes chunks of ROWS pixels b * WARPS + w, then every gridDim.x * WARPS-th, each
// copied by 16-byte cp.async (zeros past the last pixel and past J) into one of the warp's
// STAGES buffers, STAGES - 1 chunks ahead of its math. A chunk's outputs go through a
// warp-private buffer to 16-byte stores of whole rows (a chunk's outputs are one contiguous
// run of memory). No barrier but __syncwarp after the weight is in.
//
// Backward-weight (CONV_OP 2), dw[k][c] = sum_m dy[m][k] x[m][c]: grid y is dw's tiles of TK x
// TC, grid x the blocks that split the pixels; a warp streams its chunks' dy and x columns of
// the tile the same way and holds the tile's fp32 sums (both operands by ldmatrix.trans: the
// pixels are the reduction), the block's warps add theirs in shared memory and the block
// writes its part to the workspace; pointwise_weight_sum adds the parts into dw.
//
// Macros: CONV_OP (0 forward, 1 backward-data, 2 backward-weight), WARPS, ROWS (pixels a chunk,
// a multiple of 32), COLS (output channels a pass over a chunk: 32, 64 or 128; more take more
// passes), TK and TC (backward-weight's tile), STAGES (2 to 4). Dynamic shared memory
// (conv/pointwise.py): the weight NC16 x (J16 + 8) u16, then per warp STAGES x ROWS x
// (J16 + 8) and ROWS x (NC16 + 8) u16; backward-weight per warp STAGES x ROWS x (TK + TC + 16).
#include "../mma_sync.cuh"

#ifndef CONV_OP
#define CONV_OP 0
#endif
#ifndef WARPS
#define WARPS 4
#endif
#ifndef ROWS
#define ROWS 32
#endif
#ifndef COLS
#define COLS 64
#endif
#ifndef TK
#define TK 32
#endif
#ifndef TC
#define TC 32
#endif
#ifndef STAGES
#define STAGES 3
#endif
#if ROWS % 32 || COLS % 16 || STAGES < 2 || STAGES > 4
#error "conv_pointwise: ROWS a multiple of 32, COLS of 16, 2 <= STAGES <= 4"
#endif
#if CONV_OP == 2 && (TK % 16 || TC % 16)
#error "conv_pointwise: backward-weight's tile TK x TC in multiples of 16"
#endif
// Accumulators a thread, and the blocks a multiprocessor must hold by registers (ACC and 48
// more; conv/pointwise.py sizes the persistent grid by the same count)
#define ACC (CONV_OP == 2 ? TK * TC / 32 : COLS)
#define MIN_BLOCKS (65536 / (32 * WARPS * (ACC + 48)))

#if FARM_DTYPE == 0
// No fp32 path on the matrix units: fp32 instances are not generated.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, float*, ConvParams) {}
extern "C" __global__ void pointwise_weight_sum(const float*, elem_t*, ConvParams, int) {}
#else

namespace pw {

__device__ __forceinline__ int round16(int v) { return (v + 15) & ~15; }

// The weight as B[n][j] into shared memory (pitch jp), zeros past NC and J: forward's w is
// [K = NC][C = J] already; backward-data's [K = J][C = NC] is transposed on the way in.
__device__ __forceinline__ void load_weight(u16* wsm, const elem_t* __restrict__ w, int J,
                                            int NC, int jp) {
  const int nc16 = round16(NC), pieces = J / 8 * NC;
  for (int i = threadIdx.x; i < nc16 * jp / 8; i += blockDim.x)  // zero it all first
    reinterpret_cast<uint4*>(wsm)[i] = make_uint4(0, 0, 0, 0);
  __syncthreads();
  for (int q = threadIdx.x; q < pieces; q += blockDim.x) {
#if CONV_OP == 0
    const int n = q / (J / 8), j = (q - n * (J / 8)) * 8;
    *reinterpret_cast<uint4*>(wsm + n * jp + j) =
        __ldg(reinterpret_cast<const uint4*>(w + (long)n * J + j));
#else
    const int j = q / (NC / 8), n = (q - j * (NC / 8)) * 8;
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(w + (long)j * NC + n));
    const u32 words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      wsm[(n + 2 * e) * jp + j] = (u16)(words[e] & 0xFFFFu);
      wsm[(n + 2 * e + 1) * jp + j] = (u16)(words[e] >> 16);
    }
#endif
  }
  __syncthreads();
}

// One chunk's rows [m0, m0 + ROWS) of `in` ([M][ld]), columns [col0, col0 + width), into a
// stage (pitch `pitch`), 16 bytes a copy, zeros past M and past ld (up to width rounded to 16).
__device__ __forceinline__ void load_chunk(u16* stage, const elem_t* __restrict__ in, long m0,
                                           long M, int ld, int col0, int width, int pitch) {
  const int lane = threadIdx.x & 31, per_row = round16(width) / 8;
  const int step_rows = 32 / per_row, step_cols = 32 - step_rows * per_row;
  int row = lane / per_row, col = lane - row * per_row;
  for (int q = lane; q < ROWS * per_row; q += 32) {
    const long m = m0 + row;
    const int c = col0 + col * 8;
    const bool ok = m < M && c < ld;
    cp_async16(stage + row * pitch + col * 8, in + (ok ? m * ld + c : 0), ok);
    row += step_rows;
    col += step_cols;
    if (col >= per_row) {
      col -= per_row;
      ++row;
    }
  }
}

// A chunk's math: every 32 rows, COLS output channels a pass, into the warp's output buffer
// (pitch op) as 16-bit pairs.
__device__ __forceinline__ void compute_chunk(const u16* stage, const u16* wsm, u16* obuf,
                                              int J, int NC, int jp, int op) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, ksteps = round16(J) / 16;
  const int a_row = lane & 15, a_col = (lane >> 4) * 8;
  const int b_row = (lane & 7) + ((lane >> 4) << 3), b_col = ((lane >> 3) & 1) * 8;
#pragma unroll 1
  for (int r0 = 0; r0 < ROWS; r0 += 32) {
#pragma unroll 1
    for (int n0 = 0; n0 < NC; n0 += COLS) {
      float acc[2][COLS / 8][4];
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nb = 0; nb < COLS / 8; ++nb)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[h][nb][e] = 0.0f;
#pragma unroll 1
      for (int ks = 0; ks < ksteps; ++ks) {
        u32 a[2][4];
#pragma unroll
        for (int h = 0; h < 2; ++h)
          ldmatrix_x4(a[h], stage + (r0 + 16 * h + a_row) * jp + ks * 16 + a_col);
#pragma unroll
        for (int nb = 0; nb < COLS / 8; nb += 2) {
          if (n0 + 8 * nb >= NC) break;  // warp-uniform: the pass's columns past NC
          u32 b[4];
          ldmatrix_x4(b, wsm + (n0 + 8 * nb + b_row) * jp + ks * 16 + b_col);
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            mma16816(acc[h][nb], a[h], b[0], b[1]);
            mma16816(acc[h][nb + 1], a[h], b[2], b[3]);
          }
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int nb = 0; nb < COLS / 8; ++nb) {
          const int n = n0 + 8 * nb + 2 * t, r = r0 + 16 * h + g;
          if (n0 + 8 * nb >= NC) break;
          *reinterpret_cast<u32*>(obuf + r * op + n) = pack_pair(acc[h][nb][0], acc[h][nb][1]);
          *reinterpret_cast<u32*>(obuf + (r + 8) * op + n) =
              pack_pair(acc[h][nb][2], acc[h][nb][3]);
        }
    }
  }
}

// The warp's output buffer into out rows [m0, min(m0 + ROWS, M)), 16 bytes a store: a chunk's
// rows are one contiguous run of out.
__device__ __forceinline__ void store_chunk(const u16* obuf, elem_t* __restrict__ out, long m0,
                                            long M, int NC, int op) {
  const int lane = threadIdx.x & 31, per_row = NC / 8;
  const long rows = M - m0 < ROWS ? M - m0 : ROWS;
  elem_t* base = out + m0 * NC;
  for (int q = lane; q < rows * per_row; q += 32) {
    const int row = q / per_row, col = (q - row * per_row) * 8;
    *reinterpret_cast<uint4*>(base + (long)q * 8) =
        *reinterpret_cast<const uint4*>(obuf + row * op + col);
  }
}

__device__ __forceinline__ void stream(const elem_t* __restrict__ in,
                                       const elem_t* __restrict__ w, elem_t* __restrict__ out,
                                       const ConvParams& p, int J, int NC) {
  extern __shared__ __align__(16) u16 smem[];
  const int jp = round16(J) + 8, op = round16(NC) + 8, warp = threadIdx.x >> 5;
  const long M = (long)p.N * p.H * p.W, chunks = (M + ROWS - 1) / ROWS;
  u16* wsm = smem;
  u16* stages = wsm + round16(NC) * jp + warp * (STAGES * ROWS * jp + ROWS * op);
  u16* obuf = stages + STAGES * ROWS * jp;
  const long first = (long)blockIdx.x * WARPS + warp, step = (long)gridDim.x * WARPS;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {  // the first chunks' copies under the weight's
    const long c = first + s * step;
    if (c < chunks) load_chunk(stages + s * ROWS * jp, in, c * ROWS, M, J, 0, J, jp);
    cp_async_commit();
  }
  load_weight(wsm, w, J, NC, jp);
  int s = 0;
  for (long c = first; c < chunks; c += step) {
    const long ahead = c + (STAGES - 1) * step;
    const int s_ahead = (s + STAGES - 1) % STAGES;
    if (ahead < chunks)
      load_chunk(stages + s_ahead * ROWS * jp, in, ahead * ROWS, M, J, 0, J, jp);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncwarp();
    compute_chunk(stages + s * ROWS * jp, wsm, obuf, J, NC, jp, op);
    __syncwarp();
    store_chunk(obuf, out, c * ROWS, M, NC, op);
    __syncwarp();
    s = s + 1 == STAGES ? 0 : s + 1;
  }
  cp_async_wait<0>();
}


// Backward-weight: one chunk's sums into the warp's tile, 16 pixels a k-step. A = dy^T (rows
// k, the pixels along k16) and B = x (pixels by channels c) both from their row-major stages
// by ldmatrix.trans.
struct WeightAcc {
  float c[TK / 16][TC / 8][4];
};

__device__ __forceinline__ void weight_chunk(WeightAcc& acc, const u16* dys, const u16* xs) {
  constexpr int DP = TK + 8, XP = TC + 8;
  const int lane = threadIdx.x & 31, i = lane & 7, j = lane >> 3;
#pragma unroll
  for (int ms = 0; ms < ROWS / 16; ++ms) {
    u32 b[TC / 16][4];
#pragma unroll
    for (int cj = 0; cj < TC / 16; ++cj)
      ldmatrix_x4_trans(b[cj], xs + (16 * ms + i + (j & 1) * 8) * XP + 16 * cj + (j >> 1) * 8);
#pragma unroll
    for (int ki = 0; ki < TK / 16; ++ki) {
      u32 a[4];
      ldmatrix_x4_trans(a, dys + (16 * ms + i + (j >> 1) * 8) * DP + 16 * ki + (j & 1) * 8);
#pragma unroll
      for (int cj = 0; cj < TC / 16; ++cj) {
        mma16816(acc.c[ki][2 * cj], a, b[cj][0], b[cj][1]);
        mma16816(acc.c[ki][2 * cj + 1], a, b[cj][2], b[cj][3]);
      }
    }
  }
}

__device__ __forceinline__ void weight_stream(const elem_t* __restrict__ x,
                                              const elem_t* __restrict__ dy,
                                              float* __restrict__ ws, const ConvParams& p) {
  extern __shared__ __align__(16) u16 smem[];
  constexpr int DP = TK + 8, XP = TC + 8, STAGE = ROWS * (DP + XP);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c_tiles = (p.C + TC - 1) / TC, k0 = blockIdx.y / c_tiles * TK;
  const int c0 = (blockIdx.y - blockIdx.y / c_tiles * c_tiles) * TC;
  const long M = (long)p.N * p.H * p.W, chunks = (M + ROWS - 1) / ROWS;
  u16* stages = smem + warp * STAGES * STAGE;
  auto load = [&](int s, long c) {
    load_chunk(stages + s * STAGE, dy, c * ROWS, M, p.K, k0, TK, DP);
    load_chunk(stages + s * STAGE + ROWS * DP, x, c * ROWS, M, p.C, c0, TC, XP);
  };
  const long first = (long)blockIdx.x * WARPS + warp, step = (long)gridDim.x * WARPS;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (first + s * step < chunks) load(s, first + s * step);
    cp_async_commit();
  }
  WeightAcc acc;
#pragma unroll
  for (int ki = 0; ki < TK / 16; ++ki)
#pragma unroll
    for (int nb = 0; nb < TC / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc.c[ki][nb][e] = 0.0f;
  int s = 0;
  for (long c = first; c < chunks; c += step) {
    const long ahead = c + (STAGES - 1) * step;
    if (ahead < chunks) load((s + STAGES - 1) % STAGES, ahead);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncwarp();
    weight_chunk(acc, stages + s * STAGE, stages + s * STAGE + ROWS * DP);
    __syncwarp();
    s = s + 1 == STAGES ? 0 : s + 1;
  }
  cp_async_wait<0>();
  // the block's warps add their tiles in shared memory (over the stages, now free)
  __syncthreads();
  float* red = reinterpret_cast<float*>(smem);
  for (int e = threadIdx.x; e < TK * TC; e += blockDim.x) red[e] = 0.0f;
  __syncthreads();
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int ki = 0; ki < TK / 16; ++ki)
#pragma unroll
    for (int nb = 0; nb < TC / 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        atomicAdd(red + (16 * ki + g + (e >> 1) * 8) * TC + 8 * nb + 2 * t + (e & 1),
                  acc.c[ki][nb][e]);
  __syncthreads();
  float* part = ws + ((long)blockIdx.y * gridDim.x + blockIdx.x) * (TK * TC);
  for (int e = threadIdx.x; e < TK * TC; e += blockDim.x) part[e] = red[e];
}
}  // namespace pw

#if CONV_OP == 0
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  pw::stream(x, w, y, p, p.C, p.K);
}
#elif CONV_OP == 1
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  pw::stream(dy, w, dx, p, p.K, p.C);
}
#else
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  float* __restrict__ ws, ConvParams p) {
  pw::weight_stream(x, dy, ws, p);
}

// dw's tile blockIdx.y: 32 of its elements a block, the `parts` blocks' sums split over the
// eight warps, then added in shared memory.
extern "C" __global__ void __launch_bounds__(256)
pointwise_weight_sum(const float* __restrict__ ws, elem_t* __restrict__ dw, ConvParams p,
                     int parts) {
  __shared__ float sums[8][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, e = blockIdx.x * 32 + lane;
  const float* tile = ws + (long)blockIdx.y * parts * (TK * TC);
  float v = 0.0f;
  if (e < TK * TC)
    for (int b = warp; b < parts; b += 8) v += __ldcg(tile + (long)b * (TK * TC) + e);
  sums[warp][lane] = v;
  __syncthreads();
  if (warp || e >= TK * TC) return;
  for (int w = 1; w < 8; ++w) v += sums[w][lane];
  const int c_tiles = (p.C + TC - 1) / TC, ty = blockIdx.y / c_tiles;
  const int k = ty * TK + e / TC, c = (blockIdx.y - ty * c_tiles) * TC + e % TC;
  if (k < p.K && c < p.C) dw[(long)k * p.C + c] = from_float(v);
}
#endif

#endif  // FARM_DTYPE != 0
