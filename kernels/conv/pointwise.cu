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
// Macros: CONV_OP (0 forward, 1 backward-data), WARPS, ROWS (pixels a chunk, a multiple of
// 32), COLS (output channels a pass over a chunk: 32, 64 or 128; more take more passes),
// STAGES (2 to 4). Dynamic shared memory (conv/pointwise.py): the weight NC16 x (J16 + 8)
// u16, then per warp STAGES x ROWS x (J16 + 8) and ROWS x (NC16 + 8) u16.
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
#ifndef STAGES
#define STAGES 3
#endif
#if ROWS % 32 || COLS % 16 || STAGES < 2 || STAGES > 4
#error "conv_pointwise: ROWS a multiple of 32, COLS of 16, 2 <= STAGES <= 4"
#endif
// The blocks a multiprocessor must hold by registers (COLS accumulators a thread and 48 more;
// conv/pointwise.py sizes the persistent grid by the same count)
#define MIN_BLOCKS (65536 / (32 * WARPS * (COLS + 48)))

#if FARM_DTYPE == 0
// No fp32 path on the matrix units: fp32 instances are not generated.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
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

// One chunk's rows [m0, m0 + ROWS) of `in` ([M][J]) into a stage (pitch jp), 16 bytes a copy,
// zeros past M and past J (up to J16).
__device__ __forceinline__ void load_chunk(u16* stage, const elem_t* __restrict__ in, long m0,
                                           long M, int J, int jp) {
  const int lane = threadIdx.x & 31, per_row = round16(J) / 8;
  const int step_rows = 32 / per_row, step_cols = 32 - step_rows * per_row;
  int row = lane / per_row, col = lane - row * per_row;
  for (int q = lane; q < ROWS * per_row; q += 32) {
    const long m = m0 + row;
    const bool ok = m < M && col * 8 < J;
    cp_async16(stage + row * jp + col * 8, in + (ok ? m * J + col * 8 : 0), ok);
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
    if (c < chunks) load_chunk(stages + s * ROWS * jp, in, c * ROWS, M, J, jp);
    cp_async_commit();
  }
  load_weight(wsm, w, J, NC, jp);
  int s = 0;
  for (long c = first; c < chunks; c += step) {
    const long ahead = c + (STAGES - 1) * step;
    const int s_ahead = (s + STAGES - 1) % STAGES;
    if (ahead < chunks) load_chunk(stages + s_ahead * ROWS * jp, in, ahead * ROWS, M, J, jp);
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

}  // namespace pw

#if CONV_OP == 0
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  pw::stream(x, w, y, p, p.C, p.K);
}
#else
extern "C" __global__ void __launch_bounds__(32 * WARPS, MIN_BLOCKS)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  pw::stream(dy, w, dx, p, p.K, p.C);
}
#endif

#endif  // FARM_DTYPE != 0
