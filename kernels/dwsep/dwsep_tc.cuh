// The parts the tensor-core dwsep_fwd families share (resident.cu, stream.cu):
//  - the depthwise stage on CUDA cores: activated depthwise values of a block's pixels for a
//    span of channels, two channels per thread (32-bit loads along channels, coalesced in
//    channels-last memory), written as 16-bit pairs into a shared-memory A tile [pixel][channel];
//    3x3 and 5x5 filters are held in registers, other sizes are read from the cache;
//  - the pointwise weight's chunks, copied into shared memory by cp.async (16 bytes, zero-fill);
//  - a warp's MI x NJ mma.sync m16n8k16 tiles over one chunk, fragments read by ldmatrix;
//  - the epilogue: bias added, y written in the element type.
// NVIDIA only; 16-bit element types. The including source defines TILE_P, TILE_N, WARPS_M,
// WARPS_N, KC (a multiple of 16) and OCC (the blocks per multiprocessor its registers are held
// to, in DWSEP_BOUNDS).
#pragma once
#include "dwsep_common.cuh"
#ifdef FARM_HIP
#error "the dwsep tensor-core families use NVIDIA's mma.sync, ldmatrix and cp.async"
#endif

#define WARPS (WARPS_M * WARPS_N)
#ifndef THREADS  // a source with warps beyond the MMA layout (wgmma.cu) defines its own
#define THREADS (32 * WARPS)
#endif
#define WM (TILE_P / WARPS_M)  // a warp's rows (pixels)
#define WN (TILE_N / WARPS_N)  // a warp's columns (output channels)
#define MI (WM / 16)
#define NJ (WN / 8)
#define B_STRIDE (KC + 8)  // u16 per row of a B stage: ldmatrix rows in distinct banks
#define DWSEP_BOUNDS __launch_bounds__(THREADS, OCC)

#include "../mma_sync.cuh"

__device__ __forceinline__ void unpack_pair(u32 v, float& lo, float& hi) {
  lo = to_float((u16)(v & 0xffffu));
  hi = to_float((u16)(v >> 16));
}

// A block row's output pixel, found once per block (rows_of): the element offset in x of
// its filter window's top-left tap (n, oh * stride - pad, ow * stride - pad, channel 0),
// which may lie outside x and is only read inside it, and that tap's input row and column;
// row = INT_MIN / 2 past the output (every tap out of range). 32-bit: the families refuse
// tensors of 2^31 elements or more.
struct RowTaps {
  int offset, h0, w0;
};

__device__ __forceinline__ void rows_of(RowTaps* rows, const DwsepParams& p, int pix0) {
  const int pixels = p.N * p.P * p.Q;
  for (int row = threadIdx.x; row < TILE_P; row += THREADS) {
    const int pix = pix0 + row;
    RowTaps t = {0, -0x40000000, 0};
    if (pix < pixels) {
      const int ow = pix % p.Q, rest = pix / p.Q;
      const int oh = rest % p.P, n = rest / p.P;
      t.h0 = oh * p.stride - p.pad;
      t.w0 = ow * p.stride - p.pad;
      t.offset = ((n * p.H + t.h0) * p.W + t.w0) * p.C;
    }
    rows[row] = t;
  }
}

// How a thread reads the two input channels of depthwise channels (j, j + 1), the same for
// the whole problem: one 32-bit load when M = 1 and C is even, one 16-bit load shared by both
// when M = 2, two 16-bit loads otherwise.
enum PairRead { PAIR_U32 = 0, PAIR_SHARED = 1, PAIR_TWO = 2 };

template <int MODE>
__device__ __forceinline__ void load_pair(const elem_t* __restrict__ px, int c1, float& v0,
                                          float& v1) {
  if (MODE == PAIR_U32) {
    unpack_pair(__ldg(reinterpret_cast<const unsigned int*>(px)), v0, v1);
  } else if (MODE == PAIR_SHARED) {
    v0 = v1 = to_float(__ldg(px));
  } else {
    v0 = to_float(__ldg(px));
    v1 = c1 >= 0 ? to_float(__ldg(px + c1)) : 0.0f;  // c1: the second channel's distance
  }
}

// Depthwise sums of channels (j, j + 1) over the window of `t`, x0 = x + the first channel
// read. RR x SS taps known at compile time with the filters f0, f1 in registers, or RR = 0:
// p.R x p.S taps read from w_dw (g0: channel j's filter).
template <int RR, int SS, int MODE>
__device__ __forceinline__ void depthwise_pair(const elem_t* __restrict__ x0,
                                               const elem_t* __restrict__ g0,
                                               const DwsepParams& p, const RowTaps& t, int c1,
                                               const float* f0, const float* f1, float& d0,
                                               float& d1) {
  d0 = d1 = 0.0f;
  const int wc = p.W * p.C;
  if (RR > 0) {
#pragma unroll
    for (int r = 0; r < RR; ++r) {
      const bool row_in = (unsigned)(t.h0 + r) < (unsigned)p.H;
#pragma unroll
      for (int s = 0; s < SS; ++s) {
        if (!row_in || (unsigned)(t.w0 + s) >= (unsigned)p.W) continue;
        float v0, v1;
        load_pair<MODE>(x0 + t.offset + r * wc + s * p.C, c1, v0, v1);
        d0 = fmaf(v0, f0[r * SS + s], d0);
        d1 = fmaf(v1, f1[r * SS + s], d1);
      }
    }
  } else {
    const int rs = p.R * p.S;
    for (int r = 0; r < p.R; ++r) {
      if ((unsigned)(t.h0 + r) >= (unsigned)p.H) continue;
      for (int s = 0; s < p.S; ++s) {
        if ((unsigned)(t.w0 + s) >= (unsigned)p.W) continue;
        float v0, v1;
        load_pair<MODE>(x0 + t.offset + r * wc + s * p.C, c1, v0, v1);
        const int tap = r * p.S + s;
        d0 = fmaf(v0, to_float(__ldg(g0 + tap)), d0);
        d1 = fmaf(v1, c1 >= 0 ? to_float(__ldg(g0 + rs + tap)) : 0.0f, d1);
      }
    }
  }
}

// Depthwise channels (j, j + 1) as a thread computes them: whether each exists (j < MC),
// channel j's filter g0 (channel j + 1's follows it), both filters in registers when their
// RR x SS taps are known at compile time (RR > 0), and the affine between the stages.
template <int RR, int SS>
struct ChannelPair {
  static constexpr int TAPS = RR > 0 ? RR * SS : 1;
  bool live0, live1;
  const elem_t* g0;
  float f0[TAPS], f1[TAPS];
  float sc0, sh0, sc1, sh1;

  __device__ __forceinline__ ChannelPair(int j, const elem_t* __restrict__ w_dw,
                                         const elem_t* __restrict__ scale,
                                         const elem_t* __restrict__ shift,
                                         const DwsepParams& p)
      : live0(j < p.MC), live1(j + 1 < p.MC), g0(w_dw + j * p.R * p.S) {
    if (RR > 0) {
#pragma unroll
      for (int t = 0; t < TAPS; ++t) {
        f0[t] = live0 ? to_float(__ldg(g0 + t)) : 0.0f;
        f1[t] = live1 ? to_float(__ldg(g0 + TAPS + t)) : 0.0f;
      }
    }
    sc0 = live0 ? to_float(scale[j]) : 0.0f;
    sh0 = live0 ? to_float(shift[j]) : 0.0f;
    sc1 = live1 ? to_float(scale[j + 1]) : 0.0f;
    sh1 = live1 ? to_float(shift[j + 1]) : 0.0f;
  }

  // Tap t of the filters read from the cache (the RR = 0 path).
  __device__ __forceinline__ float tap0(int t) const {
    return live0 ? to_float(__ldg(g0 + t)) : 0.0f;
  }
  __device__ __forceinline__ float tap1(int t, int rs) const {
    return live1 ? to_float(__ldg(g0 + rs + t)) : 0.0f;
  }

  // The sums d0, d1 through the affine and the activation, as the 16-bit pair A holds; zeros
  // for a channel past MC or a row that is not `live`.
  __device__ __forceinline__ u32 activated(float d0, float d1, int activation,
                                           bool live) const {
    const float a0 = dwsep_activate(d0 * sc0 + sh0, activation);
    const float a1 = dwsep_activate(d1 * sc1 + sh1, activation);
    return live && live0 ? pack_pair(a0, live1 ? a1 : 0.0f) : 0u;
  }
};

// Activated depthwise values of the block's TILE_P rows (rows: rows_of) for channels
// [j0, j0 + span), into as[row * as_stride + j - j0] as 16-bit pairs; zeros past MC or the
// output. span is even; a warp covers 2 * CP channels of 32 / CP rows per step.
template <int RR, int SS, int MODE, int CP>
__device__ __forceinline__ void fill_depthwise_taps(u16* as, int as_stride, int j0, int span,
                                                    const RowTaps* rows,
                                                    const elem_t* __restrict__ x,
                                                    const elem_t* __restrict__ w_dw,
                                                    const elem_t* __restrict__ scale,
                                                    const elem_t* __restrict__ shift,
                                                    const DwsepParams& p) {
  constexpr int PL = 32 / CP;  // rows a warp covers per step
  constexpr int ROWS = (TILE_P + WARPS * PL - 1) / (WARPS * PL);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cpl = lane % CP, pl = lane / CP;
  for (int jj = 2 * cpl; jj < span; jj += 2 * CP) {
    const int j = j0 + jj;
    const ChannelPair<RR, SS> ch(j, w_dw, scale, shift, p);
    const int c0 = ch.live0 ? j / p.M : 0;
    const int c1 = ch.live1 ? (j + 1) / p.M - c0 : -1;
    // Rows unrolled by four (3x3) or two (5x5, generic): their loads are in flight together.
#pragma unroll(RR == 3 ? 4 : 2)
    for (int i = 0; i < ROWS; ++i) {
      const int row = warp * PL + pl + i * WARPS * PL;
      if (TILE_P % (WARPS * PL) != 0 && row >= TILE_P) break;
      const RowTaps t = rows[row];
      float d0, d1;
      depthwise_pair<RR, SS, MODE>(x + c0, ch.g0, p, t, c1, ch.f0, ch.f1, d0, d1);
      *reinterpret_cast<u32*>(as + row * as_stride + jj) =
          ch.activated(d0, d1, p.activation, t.h0 > -0x20000000);
    }
  }
}

template <int MODE, int CP>
__device__ __forceinline__ void fill_depthwise_mode(u16* as, int as_stride, int j0, int span,
                                                    const RowTaps* rows,
                                                    const elem_t* __restrict__ x,
                                                    const elem_t* __restrict__ w_dw,
                                                    const elem_t* __restrict__ scale,
                                                    const elem_t* __restrict__ shift,
                                                    const DwsepParams& p) {
  if (p.R == 3 && p.S == 3)
    fill_depthwise_taps<3, 3, MODE, CP>(as, as_stride, j0, span, rows, x, w_dw, scale, shift, p);
  else if (p.R == 5 && p.S == 5)
    fill_depthwise_taps<5, 5, MODE, CP>(as, as_stride, j0, span, rows, x, w_dw, scale, shift, p);
  else
    fill_depthwise_taps<0, 0, MODE, CP>(as, as_stride, j0, span, rows, x, w_dw, scale, shift, p);
}

// fill_depthwise_taps for the problem's filter size and pair read.
template <int CP>
__device__ __forceinline__ void fill_depthwise(u16* as, int as_stride, int j0, int span,
                                               const RowTaps* rows,
                                               const elem_t* __restrict__ x,
                                               const elem_t* __restrict__ w_dw,
                                               const elem_t* __restrict__ scale,
                                               const elem_t* __restrict__ shift,
                                               const DwsepParams& p) {
  if (p.M == 1 && p.C % 2 == 0)
    fill_depthwise_mode<PAIR_U32, CP>(as, as_stride, j0, span, rows, x, w_dw, scale, shift, p);
  else if (p.M == 2)  // the rarer reads take the generic filter path
    fill_depthwise_taps<0, 0, PAIR_SHARED, CP>(as, as_stride, j0, span, rows, x, w_dw, scale,
                                               shift, p);
  else
    fill_depthwise_taps<0, 0, PAIR_TWO, CP>(as, as_stride, j0, span, rows, x, w_dw, scale,
                                            shift, p);
}

// Staged taps (dwsep_stream when M = 1 and C is a multiple of 8): the inputs of a chunk's
// KC channels under every tap of every row, copied by cp.async into ts [tap][row][KC] (zeros
// outside the input) a few chunks ahead, so the depthwise stage reads shared memory only.
__device__ __forceinline__ void load_taps(u16* ts, int pix0, const elem_t* __restrict__ x,
                                          const DwsepParams& p, int j0) {
  constexpr int SEGS = KC / 8;  // 16-byte segments of a row's chunk
  const int seg = threadIdx.x % SEGS, c = j0 + seg * 8;
  const int pixels = p.N * p.P * p.Q, wc = p.W * p.C;
  for (int row = threadIdx.x / SEGS; row < TILE_P; row += THREADS / SEGS) {
    const int pix = pix0 + row;
    int h0 = -0x40000000, w0 = 0, offset = 0;
    if (pix < pixels && c < p.C) {
      const int ow = pix % p.Q, rest = pix / p.Q;
      const int oh = rest % p.P, n = rest / p.P;
      h0 = oh * p.stride - p.pad;
      w0 = ow * p.stride - p.pad;
      offset = ((n * p.H + h0) * p.W + w0) * p.C + c;
    }
    u16* dst = ts + row * KC + seg * 8;
    for (int r = 0; r < p.R; ++r) {
      const bool r_in = (unsigned)(h0 + r) < (unsigned)p.H;
      for (int s = 0; s < p.S; ++s) {
        const bool in = r_in && (unsigned)(w0 + s) < (unsigned)p.W;
        cp_async16_l1(dst + (r * p.S + s) * TILE_P * KC, in ? x + offset + r * wc + s * p.C : x,
                      in);
      }
    }
  }
}

template <int RR, int SS, int CP>
__device__ __forceinline__ void fill_from_taps_rs(u16* as, const u16* ts, int valid_rows,
                                                  int j0, const elem_t* __restrict__ w_dw,
                                                  const elem_t* __restrict__ scale,
                                                  const elem_t* __restrict__ shift,
                                                  const DwsepParams& p) {
  constexpr int PL = 32 / CP;
  constexpr int ROWS = (TILE_P + WARPS * PL - 1) / (WARPS * PL);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cpl = lane % CP, pl = lane / CP;
  const int rs = p.R * p.S;
  for (int jj = 2 * cpl; jj < KC; jj += 2 * CP) {
    const ChannelPair<RR, SS> ch(j0 + jj, w_dw, scale, shift, p);
#pragma unroll(RR == 3 ? 4 : 2)
    for (int i = 0; i < ROWS; ++i) {
      const int row = warp * PL + pl + i * WARPS * PL;
      if (TILE_P % (WARPS * PL) != 0 && row >= TILE_P) break;
      const u16* tap0 = ts + row * KC + jj;
      float d0 = 0.0f, d1 = 0.0f;
      if (RR > 0) {
#pragma unroll
        for (int t = 0; t < ch.TAPS; ++t) {
          float v0, v1;
          unpack_pair(*reinterpret_cast<const u32*>(tap0 + t * TILE_P * KC), v0, v1);
          d0 = fmaf(v0, ch.f0[t], d0);
          d1 = fmaf(v1, ch.f1[t], d1);
        }
      } else {
        for (int t = 0; t < rs; ++t) {
          float v0, v1;
          unpack_pair(*reinterpret_cast<const u32*>(tap0 + t * TILE_P * KC), v0, v1);
          d0 = fmaf(v0, ch.tap0(t), d0);
          d1 = fmaf(v1, ch.tap1(t, rs), d1);
        }
      }
      *reinterpret_cast<u32*>(as + row * B_STRIDE + jj) =
          ch.activated(d0, d1, p.activation, row < valid_rows);
    }
  }
}

// The activated depthwise values of chunk [j0, j0 + KC) from staged taps ts into A (as,
// B_STRIDE u16 per row); rows from valid_rows on lie past the output (zeros).
template <int CP>
__device__ __forceinline__ void fill_from_taps(u16* as, const u16* ts, int valid_rows, int j0,
                                               const elem_t* __restrict__ w_dw,
                                               const elem_t* __restrict__ scale,
                                               const elem_t* __restrict__ shift,
                                               const DwsepParams& p) {
  if (p.R == 3 && p.S == 3)
    fill_from_taps_rs<3, 3, CP>(as, ts, valid_rows, j0, w_dw, scale, shift, p);
  else if (p.R == 5 && p.S == 5)
    fill_from_taps_rs<5, 5, CP>(as, ts, valid_rows, j0, w_dw, scale, shift, p);
  else
    fill_from_taps_rs<0, 0, CP>(as, ts, valid_rows, j0, w_dw, scale, shift, p);
}

// The pointwise weight's rows [k0, k0 + TILE_N), channels [j0, j0 + KC) into a B stage
// [row][channel]: 16-byte cp.async when MC is a multiple of 8, plain loads otherwise; zeros
// past K and MC.
__device__ __forceinline__ void load_pointwise(u16* bs, const elem_t* __restrict__ w_pw,
                                               const DwsepParams& p, int k0, int j0) {
  if (p.MC % 8 == 0) {
    for (int e = threadIdx.x; e < TILE_N * (KC / 8); e += THREADS) {
      const int row = e / (KC / 8), seg = e % (KC / 8);
      const int k = k0 + row, j = j0 + seg * 8;
      const bool valid = k < p.K && j < p.MC;
      cp_async16(bs + row * B_STRIDE + seg * 8, valid ? w_pw + (long)k * p.MC + j : w_pw, valid);
    }
  } else {
    for (int e = threadIdx.x; e < TILE_N * KC; e += THREADS) {
      const int row = e / KC, jj = e % KC;
      const int k = k0 + row, j = j0 + jj;
      bs[row * B_STRIDE + jj] = (k < p.K && j < p.MC) ? w_pw[(long)k * p.MC + j] : (u16)0;
    }
  }
}

// A warp's accumulators: MI x NJ tiles of m16n8.
struct WarpAcc {
  float c[MI][NJ][4];
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
      for (int j = 0; j < NJ; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[i][j][e] = 0.0f;
  }
};

// The warp's (wm, wn) outputs over KC channels: A rows at as (as_stride u16 apart, the chunk's
// first channel at column 0), B stage bs.
__device__ __forceinline__ void warp_chunk(WarpAcc& acc, const u16* as, int as_stride,
                                           const u16* bs, int wm, int wn) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int ks = 0; ks < KC; ks += 16) {
    u32 a[MI][4];
#pragma unroll
    for (int i = 0; i < MI; ++i)
      ldmatrix_x4(a[i], as + (wm * WM + i * 16 + (lane & 15)) * as_stride + ks + (lane >> 4) * 8);
#pragma unroll
    for (int j = 0; j < NJ; j += 2) {
      u32 b[4];
      ldmatrix_x4(b, bs + (wn * WN + j * 8 + (lane & 7) + ((lane >> 4) << 3)) * B_STRIDE + ks +
                         ((lane >> 3) & 1) * 8);
#pragma unroll
      for (int i = 0; i < MI; ++i) {
        mma16816(acc.c[i][j], a[i], b[0], b[1]);
        mma16816(acc.c[i][j + 1], a[i], b[2], b[3]);
      }
    }
  }
}

// y for the warp's outputs of output channels from k0, bias added; pixel_of(row) gives the
// output pixel (n, p, q flattened) or -1 past the output.
template <typename PixelOf>
__device__ __forceinline__ void store_outputs(const WarpAcc& acc, elem_t* __restrict__ y,
                                              const elem_t* __restrict__ b_pw,
                                              const DwsepParams& p, int k0, int wm, int wn,
                                              PixelOf pixel_of) {
  const int lane = threadIdx.x & 31, group = lane >> 2, tig = lane & 3;
  const bool pairs = p.K % 2 == 0;
  float bias[NJ][2];
#pragma unroll
  for (int j = 0; j < NJ; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int k = k0 + wn * WN + j * 8 + 2 * tig + e;
      bias[j][e] = (p.pw_bias && k < p.K) ? to_float(b_pw[k]) : 0.0f;
    }
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long pix = pixel_of(wm * WM + i * 16 + group + 8 * half);
      if (pix < 0) continue;
      elem_t* row = y + pix * p.K;
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int k = k0 + wn * WN + j * 8 + 2 * tig;
        const float v0 = acc.c[i][j][2 * half] + bias[j][0];
        const float v1 = acc.c[i][j][2 * half + 1] + bias[j][1];
        if (pairs && k + 1 < p.K) {
          *reinterpret_cast<u32*>(row + k) = pack_pair(v0, v1);
        } else {
          if (k < p.K) row[k] = from_float(v0);
          if (k + 1 < p.K) row[k + 1] = from_float(v1);
        }
      }
    }
}

// Thread-block clusters (sm_90): this block's rank, a barrier over the cluster's blocks (its
// release/acquire orders shared-memory writes before the other blocks' reads) and a read of
// four floats from the shared memory of the cluster's block `rank`.
__device__ __forceinline__ u32 cluster_rank() {
  u32 r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n"
               ::: "memory");
}

__device__ __forceinline__ float4 cluster_load4(const float* local, u32 rank) {
  u32 remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote)
               : "r"(smem_u32(local)), "r"(rank));
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0,%1,%2,%3}, [%4];\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(remote) : "memory");
  return v;
}

// The partial sums of the SPLIT blocks of a cluster (each over its share of the channels)
// added up: each block puts its accumulators in red [TILE_P][TILE_N + 4] floats of its own
// shared memory, then block `rank` adds up rows rank, rank + SPLIT, ... over the cluster and
// writes them to y (pixel_of as in store_outputs), bias added.
template <int SPLIT, typename PixelOf>
__device__ __forceinline__ void cluster_reduce_store(const WarpAcc& acc, float* red,
                                                     elem_t* __restrict__ y,
                                                     const elem_t* __restrict__ b_pw,
                                                     const DwsepParams& p, int k0, int wm,
                                                     int wn, PixelOf pixel_of) {
  constexpr int RS = TILE_N + 4;
  const int lane = threadIdx.x & 31, group = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int i = 0; i < MI; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half)
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        const int row = wm * WM + i * 16 + group + 8 * half, col = wn * WN + j * 8 + 2 * tig;
        *reinterpret_cast<float2*>(red + row * RS + col) =
            make_float2(acc.c[i][j][2 * half], acc.c[i][j][2 * half + 1]);
      }
  cluster_sync();
  const u32 rank = cluster_rank();
  const bool quads = p.K % 4 == 0;
  for (int e = threadIdx.x; e < (TILE_P / SPLIT) * (TILE_N / 4); e += THREADS) {
    const int row = (e / (TILE_N / 4)) * SPLIT + (int)rank, col = (e % (TILE_N / 4)) * 4;
    float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int r = 0; r < SPLIT; ++r) {
      const float4 v = cluster_load4(red + row * RS + col, (u32)r);
      sum.x += v.x; sum.y += v.y; sum.z += v.z; sum.w += v.w;
    }
    const long pix = pixel_of(row);
    const int k = k0 + col;
    if (pix < 0 || k >= p.K) continue;
    float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
    for (int t = 0; t < 4; ++t)
      if (p.pw_bias && k + t < p.K) v[t] += to_float(b_pw[k + t]);
    elem_t* out = y + pix * p.K + k;
    if (quads) {
      *reinterpret_cast<uint2*>(out) = make_uint2(pack_pair(v[0], v[1]), pack_pair(v[2], v[3]));
    } else {
#pragma unroll
      for (int t = 0; t < 4; ++t)
        if (k + t < p.K) out[t] = from_float(v[t]);
    }
  }
  cluster_sync();  // the other blocks have read this block's partial sums
}
