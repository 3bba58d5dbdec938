// What the staged wgmma families share (wgmma.cu and wgmma_resident.cu with STAGED): each
// chunk's input rows under a block's pixels staged in shared memory by cp.async (load_input),
// the rows' offsets into them (staged_rows_of), and the depthwise from there (fill_staged: 3x3
// and 5x5 on the tensor cores, fill_chunk_tc). The including kernel defines TILE_P, THREADS,
// PRODUCER_THREADS and FILTER, and includes dwsep_wgmma.cuh first.
#pragma once
#define TC_FILL (FILTER == 3 || FILTER == 5)  // the filter sizes fill_chunk_tc computes
#if TC_FILL
#define TAPS (FILTER * FILTER)
#define PARAM_BYTES (2 * (64 * TAPS + 128))  // a chunk's 64 x TAPS taps, 64 scales, 64 shifts
// 16-pixel groups a producer warp's fill_chunk_tc holds in flight (their A fragments at once):
// up to four for 3x3 filters, one for 5x5 (13 steps of A fragments a group)
#if FILTER == 3
#define IN_FLIGHT (TILE_P / 16 < 4 ? TILE_P / 16 : 4)
#else
#define IN_FLIGHT 1
#endif
#else
#define PARAM_BYTES 0
#endif

// Input rows (n * H + h flattened) that a block's pixels read, at most: the TILE_P pixels span
// rows_out output rows (n * P + p); each step of a row within an image moves the window stride rows on,
// the step from an image's last output row to the next image's first moves it R - 2 pad - 1
// rows further at most (kernels/dwsep/families.py computes the same).
__device__ __forceinline__ int staged_rows(const DwsepParams& p) {
  const int rows_out = min((TILE_P + p.Q - 2) / p.Q + 1, p.N * p.P);
  return (rows_out - 1) * p.stride + p.R +
         (rows_out - 1 + p.P - 1) / p.P * max(p.R - 2 * p.pad - 1, 0);
}

// The first input row the block reads: its first pixel's window's top row.
__device__ __forceinline__ int first_input_row(const DwsepParams& p, int pix0) {
  const int row = pix0 / p.Q;  // n * P + oh
  return (row / p.P) * p.H + (row % p.P) * p.stride - p.pad;
}

// rows_of, with each row's offset that of its window's top-left tap in the staged input (in
// pixels from input row `first`, column 0).
__device__ __forceinline__ void staged_rows_of(RowTaps* rows, const DwsepParams& p, int pix0,
                                               int first) {
  rows_of(rows, p, pix0);
  __syncthreads();
  for (int row = threadIdx.x; row < TILE_P; row += THREADS) {
    RowTaps t = rows[row];
    t.offset = t.offset / p.C - first * p.W;  // (n * H + h0) * W + w0 - first * W
    rows[row] = t;
  }
}

// Chunk j0's input rows [first, first + count) into `buf` (pixel i of them at STAGED_PIXEL * i;
// for 3x3 and 5x5 filters after the chunk's PARAM_BYTES of taps, scales and shifts), by 16-byte
// cp.async from producer thread t; rows outside x and channels past MC are not copied (the fill
// reads neither).
__device__ __forceinline__ void load_input(unsigned char* buf, const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ w_dw,
                                           const elem_t* __restrict__ scale,
                                           const elem_t* __restrict__ shift,
                                           const DwsepParams& p, int first, int count, int j0,
                                           int t) {
#if TC_FILL
  // the chunk's taps (8 TAPS pieces of 16 bytes: its channels' taps are consecutive), scales
  // and shifts (8 pieces each)
  constexpr int TAP_PIECES = 8 * TAPS;
  for (int q = t; q < PARAM_BYTES / 16; q += PRODUCER_THREADS) {
    const elem_t* src = q < TAP_PIECES ? w_dw + j0 * TAPS + 8 * q
                        : (q < TAP_PIECES + 8 ? scale + j0 + 8 * (q - TAP_PIECES)
                                              : shift + j0 + 8 * (q - TAP_PIECES - 8));
    const bool valid = q < TAP_PIECES ? (j0 * TAPS + 8 * q < p.MC * TAPS)
                                      : (j0 + 8 * ((q - TAP_PIECES) % 8) < p.MC);
    if (valid)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(buf) + 16 * q),
                   "l"(src));
  }
  buf += PARAM_BYTES;
#endif
  const int piece = t & 7, j = j0 + 8 * piece;
  if (j >= p.MC) return;
  const long start = (long)first * p.W, end = (long)p.N * p.H * p.W;
  const u32 dst = smem_u32(buf) + 16 * piece;
  for (int i = t >> 3; i < count * p.W; i += PRODUCER_THREADS / 8) {
    const long pixel = start + i;
    if (pixel >= 0 && pixel < end)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst + i * STAGED_PIXEL),
                   "l"(x + pixel * p.C + j));
  }
}

#if TC_FILL
// mma16816 as a pure function of its operands (not volatile), so that the compiler may
// interleave the steps of two chains.
__device__ __forceinline__ void depthwise_mma(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if FARM_DTYPE == 2
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// fill_chunk for 3x3 and 5x5 filters on the tensor cores, from the staged input: a warp takes a
// 16-byte piece (8 channels) and computes its activated depthwise values for 16 of the block's
// pixels at a time by (TAPS + 1) / 2 mma.sync m16n8k16 over k = (tap, channel): a k16 step
// holds the 8
// channels under two taps, A's rows (one pixel's 8 channels under one tap) are read by
// ldmatrix from the staged pixels (a 16-byte zero row where the tap is out of the input), and
// B holds each channel's two taps on its diagonal, zeros elsewhere. Products of 16-bit values
// are exact in fp32 and the sums fp32: the CUDA-core fill's values up to the order of the
// additions. The accumulators (pixel lane / 4 and + 8, channels 2 (lane % 4) + {0, 1}) take the
// scale, shift and activation and go into the swizzled A tile as 16-bit pairs.
__device__ __forceinline__ void fill_chunk_tc(unsigned char* a, int t, const RowTaps* rows,
                                              const unsigned char* staged, u32 zero_row,
                                              const DwsepParams& p, int j0) {
  constexpr int WARPS_P = PRODUCER_THREADS / 32, GROUPS = TILE_P / 16;
  static_assert(8 % WARPS_P == 0, "the producers' warps share the 8 pieces");
  const int lane = t & 31, half = lane >> 4;          // A: this lane's row address, tap 2 i + half
  const int apix = (lane & 7) + 8 * ((lane >> 3) & 1);  // ... of pixel apix of 16
  const int n = lane >> 2, kq = 2 * (lane & 3);        // B: column n, rows kq, kq + 1 (and + 8)
  constexpr int STEPS = (TAPS + 1) / 2;  // two taps a step
  const u16* params = reinterpret_cast<const u16*>(staged);  // [64][TAPS] taps, [64] scales, shifts
  const u32 base = smem_u32(staged + PARAM_BYTES);
  unsigned char* out = a + 4 * (lane & 3);
  for (int piece = t >> 5; piece < 8; piece += WARPS_P) {
    if (j0 + 8 * piece >= p.MC) {  // MC is a multiple of 8: the piece is whole or absent
#pragma unroll
      for (int g = 0; g < GROUPS; ++g) {
        *reinterpret_cast<u32*>(out + sw128_offset(16 * g + n, piece)) = 0u;
        *reinterpret_cast<u32*>(out + sw128_offset(16 * g + n + 8, piece)) = 0u;
      }
      continue;
    }
    u32 b[STEPS][2];  // channel 8 piece + n's taps on the diagonal (k % 8 == n)
    const bool lo = kq == n, hi = kq + 1 == n;
#pragma unroll
    for (int i = 0; i < STEPS; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const u32 v = (2 * i + h < TAPS && (lo || hi))
                          ? (u32)params[(8 * piece + n) * TAPS + min(2 * i + h, TAPS - 1)]
                          : 0u;
        b[i][h] = hi ? v << 16 : v;
      }
    float sc[2], sh[2];
    unpack_pair(*reinterpret_cast<const u32*>(params + 64 * TAPS + 8 * piece + kq), sc[0],
                sc[1]);
    unpack_pair(*reinterpret_cast<const u32*>(params + 64 * TAPS + 64 + 8 * piece + kq), sh[0],
                sh[1]);
#pragma unroll
    for (int g0 = 0; g0 < GROUPS; g0 += IN_FLIGHT) {
      // IN_FLIGHT groups' A first (ldmatrix keeps its order, and none may pass the stores of
      // the groups before), then their mma as 2 IN_FLIGHT independent chains, then their values
      u32 af[IN_FLIGHT][STEPS][4];
#pragma unroll
      for (int gi = 0; gi < IN_FLIGHT; ++gi) {
        const RowTaps tp = rows[16 * (g0 + gi) + apix];
#pragma unroll
        for (int i = 0; i < STEPS; ++i) {
          const int tap = 2 * i + half, r = tap / FILTER, s = tap % FILTER;
          const bool valid = tap < TAPS && (unsigned)(tp.h0 + r) < (unsigned)p.H &&
                             (unsigned)(tp.w0 + s) < (unsigned)p.W;
          const u32 row = valid ? base + (tp.offset + r * p.W + s) * STAGED_PIXEL + 16 * piece
                                : zero_row;
          asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                       : "=r"(af[gi][i][0]), "=r"(af[gi][i][1]), "=r"(af[gi][i][2]),
                         "=r"(af[gi][i][3])
                       : "r"(row));
        }
      }
      float d[IN_FLIGHT][2][4];
#pragma unroll
      for (int gi = 0; gi < IN_FLIGHT; ++gi)
#pragma unroll
        for (int e = 0; e < 4; ++e) d[gi][0][e] = d[gi][1][e] = 0.0f;
#pragma unroll
      for (int i = 0; i < STEPS; ++i)
#pragma unroll
        for (int gi = 0; gi < IN_FLIGHT; ++gi)
          depthwise_mma(d[gi][i % 2], af[gi][i], b[i][0], b[i][1]);
#pragma unroll
      for (int gi = 0; gi < IN_FLIGHT; ++gi) {
        float v[4];
#pragma unroll
        for (int e = 0; e < 4; ++e)
          v[e] = dwsep_activate((d[gi][0][e] + d[gi][1][e]) * sc[e & 1] + sh[e & 1],
                                p.activation);
        const int g = g0 + gi;
        *reinterpret_cast<u32*>(out + sw128_offset(16 * g + n, piece)) = pack_pair(v[0], v[1]);
        *reinterpret_cast<u32*>(out + sw128_offset(16 * g + n + 8, piece)) =
            pack_pair(v[2], v[3]);
      }
    }
  }
}
#endif

// A chunk's activated depthwise values from its staged input `staged` into the swizzled A tile
// `a`: on the tensor cores for 3x3 and 5x5 filters (fill_chunk_tc), on the CUDA cores for any
// other size (fill_chunk reading the staged rows).
__device__ __forceinline__ void fill_staged(unsigned char* a, int t, const RowTaps* rows,
                                            const elem_t* __restrict__ x,
                                            const elem_t* __restrict__ w_dw,
                                            const elem_t* __restrict__ scale,
                                            const elem_t* __restrict__ shift,
                                            const DwsepParams& p, int j0,
                                            const unsigned char* staged, u32 zero_row) {
#if TC_FILL
  fill_chunk_tc(a, t, rows, staged, zero_row, p, j0);
#else
  fill_chunk<true>(a, t, rows, x, w_dw, scale, shift, p, j0, staged);
#endif
}
