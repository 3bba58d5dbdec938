// conv_direct: direct convolution for depthwise and small-group shapes, channels-last, fp32
// accumulation, all three directions. One source; the instance is chosen by macros:
//   DIRECT_OP  0 forward, 1 backward-data, 2 backward-weight (set by the Python descriptor)
//   BLOCK      threads per block
//   GROUPED    0: depthwise (Cg == Kg == 1); a thread owns VEC consecutive channels (= groups),
//                 loaded as one vector since consecutive groups are adjacent in NHWGC.
//              1: grouped; a thread owns KPT consecutive output channels of one group and sums
//                 over the group's reduction channels VEC at a time (one vector load each).
//   VEC, KPT   as above (KPT is 1 for depthwise)
//   TILE_W     consecutive output columns per thread (register blocking; with an unrolled filter
//              and unit stride the filter row's input window is loaded once, kept as raw words,
//              and reused across the columns)
//   FR         0: R and S at run time; 3/5/7: R == S == FR unrolled (the descriptor checks)
//   SMEM       0: inputs read through L1; TH > 0: the block stages an input tile for TH output
//              rows in shared memory (depthwise only)
//   RB         backward-weight: filter rows per block (0: all FR rows); FR == 0 does one tap
//   OCC        blocks per multiprocessor the registers must allow (halved for fp32); the
//              descriptor launches one persistent wave of that many blocks per multiprocessor
// Filter taps live in shared memory as fp32, laid out so that a thread reads its channels as
// one vector. Every kernel takes ConvParams by value and `cub`, the channel units per block.
// Entries: conv2d_fwd, conv2d_bwd_data (unit stride), conv2d_bwd_data_strided,
// conv2d_bwd_weight + conv2d_bwd_weight_reduce; FR > 0 instances add <op>_generic for strides
// and dilations their unrolled windows do not cover, and conv2d_fwd_s2 and
// conv2d_bwd_weight_s2 for stride 2 along the row. Each entry has its own registers.
#include "../common.cuh"

#ifndef DIRECT_OP
#define DIRECT_OP 0
#endif
#ifndef BLOCK
#define BLOCK 256
#endif
#ifndef GROUPED
#define GROUPED 0
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef KPT
#define KPT 1
#endif
#ifndef TILE_W
#define TILE_W 1
#endif
#ifndef FR
#define FR 0
#endif
#ifndef SMEM
#define SMEM 0
#endif
#ifndef RB
#define RB 0
#endif
#ifndef OCC
#define OCC 1
#endif
// Blocks per multiprocessor the registers must allow (__launch_bounds__): OCC for 16-bit
// elements; fp32 input windows take twice the registers, so half as many blocks (rounded up).
#if FARM_DTYPE == 0
#define MIN_BLOCKS ((OCC + 1) / 2)
#else
#define MIN_BLOCKS OCC
#endif

#if GROUPED
#define UNIT KPT  // output channels a thread owns
#else
#define UNIT VEC
#endif

#if SMEM && GROUPED
#error "shared-memory staging of the input tile is for depthwise instances only"
#endif

constexpr int kEB = (int)sizeof(elem_t);
// Filter rows unrolled in the correlation loops: all rows of a 3x3 filter for small thread
// tiles (their loads issue together), else one row at a time (registers: occupancy matters more).
#ifndef ROW_UNROLL
#define ROW_UNROLL \
  ((FR == 3 && !SMEM && OCC <= 2 && VEC <= 4 && VEC * TILE_W * (GROUPED ? KPT : 1) <= 16) ? 3 : 1)
#endif

// ---------------------------------------------------------------------------------------------
// Vector loads and stores of N consecutive elements (aligned to N elements), through fp32.
struct alignas(16) Raw16 { u32 w[4]; };
struct alignas(8) Raw8 { u32 w[2]; };

template <int M>
__device__ __forceinline__ void unpack_words(const u32* words, float* out) {
#if FARM_DTYPE == 0
#pragma unroll
  for (int i = 0; i < M; ++i) out[i] = __uint_as_float(words[i]);
#else
#pragma unroll
  for (int i = 0; i < M / 2; ++i) {
#if FARM_DTYPE == 2
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
#else
    out[2 * i] = half_to_float((u16)(words[i] & 0xffffu));
    out[2 * i + 1] = half_to_float((u16)(words[i] >> 16));
#endif
  }
#endif
}

template <int M>
__device__ __forceinline__ void pack_words(const float* in, u32* words) {
#if FARM_DTYPE == 0
#pragma unroll
  for (int i = 0; i < M; ++i) words[i] = __float_as_uint(in[i]);
#else
#pragma unroll
  for (int i = 0; i < M / 2; ++i)
    words[i] = (u32)from_float(in[2 * i]) | ((u32)from_float(in[2 * i + 1]) << 16);
#endif
}

template <int N>
__device__ __forceinline__ void load_vec(const elem_t* p, float* out) {
  constexpr int BYTES = N * kEB;
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      Raw16 r = reinterpret_cast<const Raw16*>(p)[i];
      unpack_words<16 / kEB>(r.w, out + i * (16 / kEB));
    }
  } else if constexpr (BYTES == 8) {
    Raw8 r = *reinterpret_cast<const Raw8*>(p);
    unpack_words<8 / kEB>(r.w, out);
  } else if constexpr (BYTES == 4) {
    u32 r = *reinterpret_cast<const u32*>(p);
    unpack_words<4 / kEB>(&r, out);
  } else {
    out[0] = to_float(p[0]);
  }
}

template <int N>
__device__ __forceinline__ void store_vec(elem_t* p, const float* in) {
  constexpr int BYTES = N * kEB;
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      Raw16 r;
      pack_words<16 / kEB>(in + i * (16 / kEB), r.w);
      reinterpret_cast<Raw16*>(p)[i] = r;
    }
  } else if constexpr (BYTES == 8) {
    Raw8 r;
    pack_words<8 / kEB>(in, r.w);
    *reinterpret_cast<Raw8*>(p) = r;
  } else if constexpr (BYTES == 4) {
    u32 r;
    pack_words<4 / kEB>(in, &r);
    *reinterpret_cast<u32*>(p) = r;
  } else {
    p[0] = from_float(in[0]);
  }
}

// Raw copy of N elements (global to shared), no conversion; zeros where `valid` is false.
template <int N>
__device__ __forceinline__ void copy_vec(elem_t* dst, const elem_t* src, bool valid) {
  constexpr int BYTES = N * kEB;
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      Raw16 r = {{0u, 0u, 0u, 0u}};
      if (valid) r = reinterpret_cast<const Raw16*>(src)[i];
      reinterpret_cast<Raw16*>(dst)[i] = r;
    }
  } else if constexpr (BYTES == 8) {
    Raw8 r = {{0u, 0u}};
    if (valid) r = *reinterpret_cast<const Raw8*>(src);
    *reinterpret_cast<Raw8*>(dst) = r;
  } else if constexpr (BYTES == 4) {
    u32 r = 0u;
    if (valid) r = *reinterpret_cast<const u32*>(src);
    *reinterpret_cast<u32*>(dst) = r;
  } else {
    dst[0] = valid ? src[0] : (elem_t)0;
  }
}

// Raw storage of N elements in 32-bit words, converted where used: an input window held in
// registers costs half the registers of its fp32 values (16-bit types), so more of it can be in
// flight per thread.
template <int N>
struct RawWords {
  static constexpr int W = (N * kEB + 3) / 4;
  u32 w[W];
};

template <int N>
__device__ __forceinline__ void load_raw(const elem_t* p, RawWords<N>& r) {
  constexpr int BYTES = N * kEB;
  if constexpr (BYTES >= 16) {
#pragma unroll
    for (int i = 0; i < BYTES / 16; ++i) {
      Raw16 v = reinterpret_cast<const Raw16*>(p)[i];
#pragma unroll
      for (int k = 0; k < 4; ++k) r.w[4 * i + k] = v.w[k];
    }
  } else if constexpr (BYTES == 8) {
    Raw8 v = *reinterpret_cast<const Raw8*>(p);
    r.w[0] = v.w[0];
    r.w[1] = v.w[1];
  } else if constexpr (BYTES == 4) {
    r.w[0] = *reinterpret_cast<const u32*>(p);
  } else {
    r.w[0] = (u32) * reinterpret_cast<const u16*>(p);
  }
}

template <int N>
__device__ __forceinline__ void zero_raw(RawWords<N>& r) {
#pragma unroll
  for (int i = 0; i < RawWords<N>::W; ++i) r.w[i] = 0u;
}

// Element v (a compile-time constant after unrolling) of a raw vector, as fp32.
template <int N>
__device__ __forceinline__ float raw_elem(const RawWords<N>& r, int v) {
#if FARM_DTYPE == 0
  return __uint_as_float(r.w[v]);
#elif FARM_DTYPE == 2
  return __uint_as_float((v & 1) ? (r.w[v >> 1] & 0xffff0000u) : (r.w[v >> 1] << 16));
#else
  return half_to_float((u16)((v & 1) ? (r.w[v >> 1] >> 16) : (r.w[v >> 1] & 0xffffu)));
#endif
}

// N consecutive fp32 values from shared memory (16-byte reads where the alignment allows).
template <int N>
__device__ __forceinline__ void load_f32(const float* p, float* out) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      float4 v = reinterpret_cast<const float4*>(p)[i];
      out[4 * i] = v.x; out[4 * i + 1] = v.y; out[4 * i + 2] = v.z; out[4 * i + 3] = v.w;
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      float2 v = reinterpret_cast<const float2*>(p)[i];
      out[2 * i] = v.x; out[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = p[i];
  }
}

// ---------------------------------------------------------------------------------------------
// A correlation: out[n, oh, ow, oc] = sum_{r,s,ic} in[n, oh*sh - ph + r*dh, ow*sw - pw + s*dw,
// (oc / Cog) * Cig + ic] * tap(oc, r, s, ic). Forward is one directly; backward-data with unit
// stride is one over dy with the filter reversed and the padding mirrored.
struct Corr {
  int N, Hi, Wi, Ho, Wo, Ci, Co, Cig, Cog, R, S, sh, sw, ph, pw, dh, dw;
};

__device__ __forceinline__ Corr forward_corr(const ConvParams& p) {
  return Corr{p.N, p.H, p.W, p.P, p.Q, p.C, p.K, p.Cg, p.Kg, p.R, p.S, p.stride_h, p.stride_w,
              p.pad_h, p.pad_w, p.dil_h, p.dil_w};
}

// dx[h, w] = sum dy[h + ph - r*dh, w + pw - s*dw] w[r, s] = sum dy[h - ph' + r'*dh, ...] w[R-1-r']
// with ph' = (R-1)*dh - ph: valid for stride 1 only.
__device__ __forceinline__ Corr backward_data_corr(const ConvParams& p) {
  return Corr{p.N, p.P, p.Q, p.H, p.W, p.K, p.C, p.Kg, p.Cg, p.R, p.S, 1, 1,
              (p.R - 1) * p.dil_h - p.pad_h, (p.S - 1) * p.dil_w - p.pad_w, p.dil_h, p.dil_w};
}

// Stage the taps of this block's output channels [blockIdx.y * WL, +WL) in shared memory:
// ws[(tap * Cig + ic) * WL + ol]. For backward-data (`reversed`) the output channels are input
// channels c of the convolution, ic runs over k, and tap t holds the filter's tap RS - 1 - t.
template <bool reversed>
__device__ __forceinline__ void stage_taps(const elem_t* __restrict__ w, const ConvParams& p,
                                           float* ws, int cub) {
  constexpr int BATCH = 8;  // loads in flight per thread: staging costs one round trip or two
  const int WL = cub * UNIT, base = blockIdx.y * WL, RS = p.R * p.S;
  const int inner = RS * (reversed ? p.Kg : p.Cg);
  const int total = WL * inner;
  for (int i0 = threadIdx.x; i0 < total; i0 += BLOCK * BATCH) {
    float v[BATCH];
    int dst[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int i = i0 + b * BLOCK;
      v[b] = 0.0f;
      dst[b] = -1;
      if (i >= total) continue;
      if (!reversed) {  // one output channel's taps are contiguous: w[oc][tap][c]
        const int ol = i / inner, rem = i - ol * inner;
        dst[b] = rem * WL + ol;
        if (base + ol < p.K) v[b] = to_float(w[(long)base * inner + i]);
      } else {
        const int ol = i % WL, rem = i / WL;  // rem = tap' * Kg + k
        const int tap = rem / p.Kg, k = rem - tap * p.Kg;
        const int cc = base + ol;
        dst[b] = i;
        if (cc < p.C) {
          const int g = cc / p.Cg, c = cc - g * p.Cg;
          v[b] = to_float(w[((long)(g * p.Kg + k) * RS + (RS - 1 - tap)) * p.Cg + c]);
        }
      }
    }
#pragma unroll
    for (int b = 0; b < BATCH; ++b)
      if (dst[b] >= 0) ws[dst[b]] = v[b];
  }
}

// acc[t][u] += in[t][.] * taps for one filter tap: depthwise elementwise, grouped a dot product
// over VEC reduction channels for each of KPT outputs.
// Register-blocked output tile of one thread: TILE_W columns x UNIT channels.
struct Acc {
  float v[TILE_W][UNIT];
};

// One filter row of a thread's tile. `row` points at input row h, channel in_c0; columns are
// (q0 + t) * sw - pw + s * dw. SWC > 0: stride SWC and dilation 1 known here, so the row's input
// window is loaded once into registers; SWC == 0: each (s, t) reads its column (L1 reuse).
template <int SWC>
__device__ __forceinline__ void corr_row(Acc& acc, const elem_t* row, bool hv, int rowlen_cols,
                                         int col_stride, const float* wrow, int WL, int ol0,
                                         int Cig, int S, int sw, int pw, int dw, int q0,
                                         int qmax) {
  // wrow: taps of this filter row, wrow[(s * Cig + ic) * WL + ol0 + u]
  if constexpr (SWC > 0) {
    constexpr int SS = FR;
    constexpr int WIN = (TILE_W - 1) * SWC + SS;
    const int col0 = q0 * SWC - pw;
#if GROUPED
    for (int ic0 = 0; ic0 < Cig; ic0 += VEC) {
      RawWords<VEC> xin[WIN];
#pragma unroll
      for (int j = 0; j < WIN; ++j) {
        int col = col0 + j;
        if (hv && col >= 0 && col < rowlen_cols)
          load_raw<VEC>(row + (long)col * col_stride + ic0, xin[j]);
        else
          zero_raw<VEC>(xin[j]);
      }
#pragma unroll
      for (int s = 0; s < SS; ++s) {
#pragma unroll
        for (int v = 0; v < VEC; ++v) {
          float wk[KPT];
          load_f32<KPT>(wrow + (s * Cig + ic0 + v) * WL + ol0, wk);
#pragma unroll
          for (int t = 0; t < TILE_W; ++t)
#pragma unroll
            for (int k = 0; k < KPT; ++k) acc.v[t][k] += raw_elem<VEC>(xin[t * SWC + s], v) * wk[k];
        }
      }
    }
#else
    RawWords<VEC> xin[WIN];
#pragma unroll
    for (int j = 0; j < WIN; ++j) {
      int col = col0 + j;
      if (hv && col >= 0 && col < rowlen_cols) load_raw<VEC>(row + (long)col * col_stride, xin[j]);
      else zero_raw<VEC>(xin[j]);
    }
#pragma unroll
    for (int s = 0; s < SS; ++s) {
      float wk[VEC];
      load_f32<VEC>(wrow + s * WL + ol0, wk);
#pragma unroll
      for (int t = 0; t < TILE_W; ++t)
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc.v[t][v] += raw_elem<VEC>(xin[t * SWC + s], v) * wk[v];
    }
#endif
  } else {
    // Generic stride or dilation: a loop over the filter columns (FR > 0 instances reach here
    // only for shapes their unrolled windows do not cover).
    const int SS = FR ? FR : S;
#pragma unroll 1
    for (int s = 0; s < SS; ++s) {
#pragma unroll
      for (int t = 0; t < TILE_W; ++t) {
        int col = (q0 + t) * sw - pw + s * dw;
        if (!hv || q0 + t >= qmax || col < 0 || col >= rowlen_cols) continue;
        const elem_t* src = row + (long)col * col_stride;
#if GROUPED
        for (int ic0 = 0; ic0 < Cig; ic0 += VEC) {
          float xv[VEC];
          load_vec<VEC>(src + ic0, xv);
#pragma unroll
          for (int v = 0; v < VEC; ++v) {
            float wk[KPT];
            load_f32<KPT>(wrow + (s * Cig + ic0 + v) * WL + ol0, wk);
#pragma unroll
            for (int k = 0; k < KPT; ++k) acc.v[t][k] += xv[v] * wk[k];
          }
        }
#else
        float xv[VEC], wk[VEC];
        load_vec<VEC>(src, xv);
        load_f32<VEC>(wrow + s * WL + ol0, wk);
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc.v[t][v] += xv[v] * wk[v];
#endif
      }
    }
  }
}

__device__ __forceinline__ void zero(Acc& acc) {
#pragma unroll
  for (int t = 0; t < TILE_W; ++t)
#pragma unroll
    for (int u = 0; u < UNIT; ++u) acc.v[t][u] = 0.0f;
}

__device__ __forceinline__ void store_tile(elem_t* __restrict__ out, const Acc& acc, long pix0,
                                           int Co, int oc0, int valid_cols) {
#pragma unroll
  for (int t = 0; t < TILE_W; ++t)
    if (t < valid_cols) store_vec<UNIT>(out + (pix0 + t) * Co + oc0, acc.v[t]);
}

// Register path: thread = (channel unit, pixel tile of TILE_W output columns), grid-stride over
// pixel tiles; inputs through L1.
template <int SWC>
__device__ __forceinline__ void corr_registers(const Corr& c, const elem_t* __restrict__ in,
                                               const float* ws, elem_t* __restrict__ out,
                                               int cub) {
  const int NU = c.Co / UNIT;
  const int cu_l = threadIdx.x % cub, pl = threadIdx.x / cub, ppb = BLOCK / cub;
  const int cu = blockIdx.y * cub + cu_l;
  if (pl >= ppb || cu >= NU) return;
  const int WL = cub * UNIT, ol0 = cu_l * UNIT, oc0 = cu * UNIT;
  const int in_c0 = GROUPED ? (oc0 / c.Cog) * c.Cig : oc0;
  const int QT = (c.Wo + TILE_W - 1) / TILE_W;
  const unsigned PT = (unsigned)(c.N * c.Ho) * (unsigned)QT;
  const int RR = FR ? FR : c.R;
  const int tapstride = (FR ? FR : c.S) * c.Cig * WL;  // floats per filter row in ws
  for (unsigned pt = blockIdx.x * (unsigned)ppb + pl; pt < PT; pt += gridDim.x * (unsigned)ppb) {
    const int qt = pt % QT;
    const unsigned rest = pt / QT;
    const int oh = rest % c.Ho, n = rest / c.Ho;
    const int q0 = qt * TILE_W;
    Acc acc;
    zero(acc);
#pragma unroll ROW_UNROLL
    for (int r = 0; r < RR; ++r) {
      const int h = oh * c.sh - c.ph + r * c.dh;
      const bool hv = h >= 0 && h < c.Hi;  // predicated, not branched: loads of all rows issue
      const elem_t* row = in + (long)(n * c.Hi + (hv ? h : 0)) * c.Wi * c.Ci + in_c0;
      corr_row<SWC>(acc, row, hv, c.Wi, c.Ci, ws + r * tapstride, WL, ol0, c.Cig, c.S, c.sw, c.pw,
                    c.dw, q0, c.Wo);
    }
    store_tile(out, acc, (long)(n * c.Ho + oh) * c.Wo + q0, c.Co, oc0, c.Wo - q0);
  }
}

#if SMEM
// Shared-memory path (depthwise): the block owns `cub` channel units and a tile of SMEM output
// rows x (twb * TILE_W) output columns; it stages the input tile ih x iw x (cub * VEC) once per
// tile, then each thread computes TILE_W columns of one row from shared memory.
template <int SWC>
__device__ __forceinline__ void corr_shared(const Corr& c, const elem_t* __restrict__ in,
                                            const float* ws, elem_t* tile,
                                            elem_t* __restrict__ out, int cub) {
  constexpr int TH = SMEM;
  const int NU = c.Co / VEC;
  const int cu_l = threadIdx.x % cub, rest_l = threadIdx.x / cub;
  const int twb = (BLOCK / cub) / TH;  // column tiles per block tile
  const int row_l = rest_l % TH, ct = rest_l / TH;
  const bool active = ct < twb;
  const int cu = blockIdx.y * cub + cu_l;
  const int WL = cub * VEC, ol0 = cu_l * VEC, oc0 = cu * VEC;
  const int ow_tile = twb * TILE_W;
  const int ih_n = (TH - 1) * c.sh + (c.R - 1) * c.dh + 1;
  const int iw_n = (ow_tile - 1) * c.sw + (c.S - 1) * c.dw + 1;
  const int BH = (c.Ho + TH - 1) / TH, BW = (c.Wo + ow_tile - 1) / ow_tile;
  const unsigned BT = (unsigned)(c.N * BH) * (unsigned)BW;
  const int RR = FR ? FR : c.R;
  const int tapstride = (FR ? FR : c.S) * WL;
  const int rowlen = iw_n * cub * VEC;  // elements per staged row
  const int vecs = ih_n * iw_n * cub;
  const int cbase = blockIdx.y * cub;
  for (unsigned bt = blockIdx.x; bt < BT; bt += gridDim.x) {
    const int bw = bt % BW;
    const unsigned rest = bt / BW;
    const int bh = rest % BH, n = rest / BH;
    const int oh0 = bh * TH, ow0 = bw * ow_tile;
    const int h0 = oh0 * c.sh - c.ph, w0 = ow0 * c.sw - c.pw;
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < vecs; i += BLOCK) {
      const int u = i % cub, pix = i / cub;
      const int iw = pix % iw_n, ih = pix / iw_n;
      const int h = h0 + ih, wc = w0 + iw;
      const bool ok = h >= 0 && h < c.Hi && wc >= 0 && wc < c.Wi && cbase + u < NU;
      const elem_t* src = in + ((long)(n * c.Hi + h) * c.Wi + wc) * c.Ci + (cbase + u) * VEC;
      copy_vec<VEC>(tile + (long)i * VEC, ok ? src : in, ok);
    }
    __syncthreads();
    const int oh = oh0 + row_l, q0l = ct * TILE_W, q0 = ow0 + q0l;
    if (!active || cu >= NU || oh >= c.Ho || q0 >= c.Wo) continue;
    Acc acc;
    zero(acc);
#pragma unroll 1
    for (int r = 0; r < RR; ++r) {
      const elem_t* row = tile + (row_l * c.sh + r * c.dh) * rowlen + ol0;
      // In tile coordinates: column (q0l + t) * sw + s * dw, no padding, all in range.
      corr_row<SWC>(acc, row, true, iw_n, WL, ws + r * tapstride, WL, ol0, 1, c.S, c.sw, 0,
                    c.dw, q0l, c.Wo - ow0);
    }
    store_tile(out, acc, (long)(n * c.Ho + oh) * c.Wo + q0, c.Co, oc0, c.Wo - q0);
  }
}
#endif

// The correlation: shared-memory or register path. FR > 0 instances have two entries each with
// its own registers: the main one unrolls the filter row's input window for unit stride and
// dilation along the row (and leaves other shapes unwritten), the _generic one serves any
// stride and dilation with the filter loops unrolled. FR == 0 instances are generic in their
// main entry; forward and backward-weight have a third, <op>_s2, for stride 2 along the row.
constexpr bool kWindowed = FR > 0;

template <bool generic>
__device__ __forceinline__ void run_corr(const Corr& c, const elem_t* __restrict__ in,
                                         float* ws, elem_t* __restrict__ out, int cub,
                                         elem_t* tile) {
  if constexpr (kWindowed && !generic) {
#if SMEM
    if (c.sw == 1 && c.dw == 1) corr_shared<1>(c, in, ws, tile, out, cub);
#else
    if (c.sw == 1 && c.dw == 1) corr_registers<1>(c, in, ws, out, cub);
#endif
  } else {
#if SMEM
    corr_shared<0>(c, in, ws, tile, out, cub);
#else
    corr_registers<0>(c, in, ws, out, cub);
#endif
  }
}

__device__ __forceinline__ int align16(int bytes) { return (bytes + 15) & ~15; }

extern __shared__ float4 direct_smem[];

#if DIRECT_OP == 0
// y = conv(x, w). Grid: (pixel tiles or block tiles, channel slices of cub units).
template <bool generic>
__device__ __forceinline__ void forward(const elem_t* __restrict__ x,
                                        const elem_t* __restrict__ w, elem_t* __restrict__ y,
                                        const ConvParams& p, int cub) {
  float* ws = reinterpret_cast<float*>(direct_smem);
  stage_taps<false>(w, p, ws, cub);
  __syncthreads();
  elem_t* tile = reinterpret_cast<elem_t*>(reinterpret_cast<char*>(direct_smem) +
                                           align16(p.R * p.S * p.Cg * cub * UNIT * 4));
  run_corr<generic>(forward_corr(p), x, ws, y, cub, tile);
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p, int cub) {
  forward<false>(x, w, y, p, cub);
}

#if FR > 0
extern "C" __global__ void __launch_bounds__(BLOCK, 1)  // rare shapes: no occupancy demand
conv2d_fwd_generic(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                   elem_t* __restrict__ y, ConvParams p, int cub) {
  forward<true>(x, w, y, p, cub);
}

// Stride 2 along the row, dilation 1 (every network's downsampling depthwise layers): the
// filter row's input window of (TILE_W - 1) * 2 + FR columns loaded once into registers and
// reused across the thread's columns, as the main entry does for unit stride; an entry of its
// own, for its own registers. Other shapes are left unwritten.
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
conv2d_fwd_s2(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
              ConvParams p, int cub) {
  float* ws = reinterpret_cast<float*>(direct_smem);
  stage_taps<false>(w, p, ws, cub);
  __syncthreads();
  const Corr c = forward_corr(p);
  if (c.sw != 2 || c.dw != 1) return;
#if SMEM
  elem_t* tile = reinterpret_cast<elem_t*>(reinterpret_cast<char*>(direct_smem) +
                                           align16(p.R * p.S * p.Cg * cub * UNIT * 4));
  corr_shared<2>(c, x, ws, tile, y, cub);
#else
  corr_registers<2>(c, x, ws, y, cub);
#endif
}
#endif
#endif

#if DIRECT_OP == 1
// Backward-data with a stride: dx[n, h, wc, cc] over tiles of TILE_W columns of one phase
// (wc = (jt * TILE_W + t) * sw + phase), so that the filter columns that reach a tile are the
// same for all of it: (phase + pw - s * dw) divisible by sw.
__device__ __forceinline__ void bwd_data_strided(const ConvParams& p,
                                                 const elem_t* __restrict__ dy, const float* ws,
                                                 elem_t* __restrict__ dx, int cub) {
  const int NU = p.C / UNIT;
  const int cu_l = threadIdx.x % cub, pl = threadIdx.x / cub, ppb = BLOCK / cub;
  const int cu = blockIdx.y * cub + cu_l;
  if (pl >= ppb || cu >= NU) return;
  const int WL = cub * UNIT, ol0 = cu_l * UNIT, cc0 = cu * UNIT;
  const int g = cc0 / p.Cg;
  const int dy_c0 = GROUPED ? g * p.Kg : cc0;  // depthwise: channel cc0 of dy is group cc0
  const int sw = p.stride_w, sh = p.stride_h;
  const int WP = (p.W + sw - 1) / sw;  // columns of the widest phase
  const int JT = (WP + TILE_W - 1) / TILE_W;
  const unsigned PT = (unsigned)(p.N * p.H) * (unsigned)(sw * JT);
  const int RS = p.R * p.S;
  const int RR = FR ? FR : p.R, SS = FR ? FR : p.S;
  for (unsigned pt = blockIdx.x * (unsigned)ppb + pl; pt < PT; pt += gridDim.x * (unsigned)ppb) {
    const int jt = pt % JT;
    unsigned rest = pt / JT;
    const int phase = rest % sw;
    rest /= sw;
    const int h = rest % p.H, n = rest / p.H;
    const int j0 = jt * TILE_W;
    const int wc0 = j0 * sw + phase;
    if (wc0 >= p.W) continue;
    const int cols = min(TILE_W, (p.W - phase + sw - 1) / sw - j0);  // valid t
    Acc acc;
    zero(acc);
    // Rows and filter columns stay loops here (only about 1/stride^2 of the taps reach a
    // pixel): the unrolled code would cost registers and compile time for little.
#pragma unroll 1
    for (int r = 0; r < RR; ++r) {
      const int ph_ = h + p.pad_h - r * p.dil_h;
      if (ph_ < 0 || ph_ % sh) continue;
      const int oh = ph_ / sh;
      if (oh >= p.P) continue;
      const elem_t* row = dy + (long)(n * p.P + oh) * p.Q * p.K + dy_c0;
#pragma unroll 1
      for (int s = 0; s < SS; ++s) {
        const int pw_ = phase + p.pad_w - s * p.dil_w;
        if (pw_ % sw) continue;  // also right for negative pw_ (C++ remainder keeps the sign)
        const int off = pw_ / sw;  // exact
        const float* wtap = ws + ((RS - 1) - (r * p.S + s)) * p.Kg * WL + ol0;
#pragma unroll
        for (int t = 0; t < TILE_W; ++t) {
          const int q = j0 + t + off;
          if (t >= cols || q < 0 || q >= p.Q) continue;
          const elem_t* src = row + (long)q * p.K;
#if GROUPED
          for (int k0 = 0; k0 < p.Kg; k0 += VEC) {
            float dv[VEC];
            load_vec<VEC>(src + k0, dv);
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
              float wk[KPT];
              load_f32<KPT>(wtap + (k0 + v) * WL, wk);
#pragma unroll
              for (int u = 0; u < KPT; ++u) acc.v[t][u] += dv[v] * wk[u];
            }
          }
#else
          float dv[VEC], wk[VEC];
          load_vec<VEC>(src, dv);
          load_f32<VEC>(wtap, wk);
#pragma unroll
          for (int v = 0; v < VEC; ++v) acc.v[t][v] += dv[v] * wk[v];
#endif
        }
      }
    }
    const long pix0 = (long)(n * p.H + h) * p.W + wc0;
#pragma unroll
    for (int t = 0; t < TILE_W; ++t)
      if (t < cols) store_vec<UNIT>(dx + (pix0 + (long)t * sw) * p.C + cc0, acc.v[t]);
  }
}

// dx = transposed conv of dy with w, unit stride: a correlation of dy with the reversed filter.
// Strided shapes go to conv2d_bwd_data_strided (its own entry, so its own registers); here they
// leave dx unwritten, which verification reports.
template <bool generic>
__device__ __forceinline__ void backward_data(const elem_t* __restrict__ dy,
                                              const elem_t* __restrict__ w,
                                              elem_t* __restrict__ dx, const ConvParams& p,
                                              int cub) {
  if (p.stride_h != 1 || p.stride_w != 1) return;
  float* ws = reinterpret_cast<float*>(direct_smem);
  stage_taps<true>(w, p, ws, cub);
  __syncthreads();
  elem_t* tile = reinterpret_cast<elem_t*>(reinterpret_cast<char*>(direct_smem) +
                                           align16(p.R * p.S * p.Kg * cub * UNIT * 4));
  run_corr<generic>(backward_data_corr(p), dy, ws, dx, cub, tile);
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p, int cub) {
  backward_data<false>(dy, w, dx, p, cub);
}

#if FR > 0
extern "C" __global__ void __launch_bounds__(BLOCK, 1)  // rare shapes: no occupancy demand
conv2d_bwd_data_generic(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                        elem_t* __restrict__ dx, ConvParams p, int cub) {
  backward_data<true>(dy, w, dx, p, cub);
}
#endif

// dx for strides above 1: the phase-tiled gather above (any stride, dilation and padding).
extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
conv2d_bwd_data_strided(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                        elem_t* __restrict__ dx, ConvParams p, int cub) {
  float* ws = reinterpret_cast<float*>(direct_smem);
  stage_taps<true>(w, p, ws, cub);
  __syncthreads();
  bwd_data_strided(p, dy, ws, dx, cub);
}
#endif

#if DIRECT_OP == 2
// Backward-weight, stage 1: dw[g,k,r,s,c] partial sums over a slice of the N*P*Q output pixels.
// Block (split b, channel slice, filter-row slice z); every thread owns one channel unit and sums
// over pixel tiles b*ppb + pl, stepping gridDim.x*ppb; the block then reduces its lanes and
// writes ws[b * total + i] for each dw element i it owns (each written by exactly one block of
// every split, so the workspace needs no zeroing).
//   depthwise unit: VEC groups; grouped unit: KPT output channels x VEC input channels.
#if GROUPED
#define DYV KPT
#define EPT (KPT * VEC)
#else
#define DYV VEC
#define EPT VEC
#endif
#if FR > 0
#define TROWS (RB ? RB : FR)
#define TCOLS FR
#else
#define TROWS 1
#define TCOLS 1
#endif

template <int SWC>
__device__ __forceinline__ void bwd_weight_partial(const ConvParams& p,
                                                   const elem_t* __restrict__ x,
                                                   const elem_t* __restrict__ dy,
                                                   float* __restrict__ wsp, int cub,
                                                   float* red) {
  const int CCH = GROUPED ? p.Cg / VEC : 1;
  const int NU = GROUPED ? (p.K / KPT) * CCH : p.K / VEC;
  const int cu_l = threadIdx.x % cub, pl = threadIdx.x / cub, ppb = BLOCK / cub;
  const int cu = blockIdx.y * cub + cu_l;
  const bool active = pl < ppb && cu < NU;
  int kk0, c_in0;  // first dy channel, first x channel of this unit
  if (GROUPED) {
    const int kc = cu / CCH, cch = cu - kc * CCH;
    kk0 = kc * KPT;
    c_in0 = (kk0 / p.Kg) * p.Cg + cch * VEC;
  } else {
    kk0 = cu * VEC;
    c_in0 = kk0;
  }
  // Filter taps of this block: rows [r0, r0 + TROWS) x all columns (FR > 0), or one tap.
  int r0, s0;
  if (FR > 0) { r0 = blockIdx.z * TROWS; s0 = 0; }
  else { r0 = blockIdx.z / p.S; s0 = blockIdx.z - r0 * p.S; }

  float acc[TROWS][TCOLS][EPT];
#pragma unroll
  for (int a = 0; a < TROWS; ++a)
#pragma unroll
    for (int b = 0; b < TCOLS; ++b)
#pragma unroll
      for (int e = 0; e < EPT; ++e) acc[a][b][e] = 0.0f;

  if (active) {
    const int QT = (p.Q + TILE_W - 1) / TILE_W;
    const unsigned PT = (unsigned)(p.N * p.P) * (unsigned)QT;
    for (unsigned pt = blockIdx.x * (unsigned)ppb + pl; pt < PT;
         pt += gridDim.x * (unsigned)ppb) {
      const int qt = pt % QT;
      const unsigned rest = pt / QT;
      const int oh = rest % p.P, n = rest / p.P;
      const int q0 = qt * TILE_W;
      float dv[TILE_W][DYV];
      const elem_t* dyp = dy + ((long)(n * p.P + oh) * p.Q + q0) * p.K + kk0;
#pragma unroll
      for (int t = 0; t < TILE_W; ++t) {
        if (q0 + t < p.Q) load_vec<DYV>(dyp + (long)t * p.K, dv[t]);
        else {
#pragma unroll
          for (int u = 0; u < DYV; ++u) dv[t][u] = 0.0f;
        }
      }
#pragma unroll
      for (int a = 0; a < TROWS; ++a) {
        const int r = r0 + a;
        const int h = oh * p.stride_h - p.pad_h + r * p.dil_h;
        const bool hv = r < p.R && h >= 0 && h < p.H;  // predicated: every row's loads issue
        const elem_t* row = x + (long)(n * p.H + (hv ? h : 0)) * p.W * p.C + c_in0;
        if constexpr (SWC > 0) {
          constexpr int WIN = (TILE_W - 1) * SWC + FR;
          const int col0 = q0 * SWC - p.pad_w;
          RawWords<VEC> xin[WIN];
#pragma unroll
          for (int j = 0; j < WIN; ++j) {
            const int col = col0 + j;
            if (hv && col >= 0 && col < p.W) load_raw<VEC>(row + (long)col * p.C, xin[j]);
            else zero_raw<VEC>(xin[j]);
          }
#pragma unroll
          for (int s = 0; s < TCOLS; ++s)
#pragma unroll
            for (int t = 0; t < TILE_W; ++t)
#pragma unroll
              for (int u = 0; u < DYV; ++u)
#pragma unroll
                for (int v = 0; v < (GROUPED ? VEC : 1); ++v) {
                  const int e = GROUPED ? u * VEC + v : u;
                  acc[a][s][e] += dv[t][u] * raw_elem<VEC>(xin[t * SWC + s], GROUPED ? v : u);
                }
        } else {
#pragma unroll
          for (int b = 0; b < TCOLS; ++b) {
            const int s = s0 + b;
#pragma unroll
            for (int t = 0; t < TILE_W; ++t) {
              const int col = (q0 + t) * p.stride_w - p.pad_w + s * p.dil_w;
              if (!hv || q0 + t >= p.Q || col < 0 || col >= p.W) continue;
              float xv[VEC];
              load_vec<VEC>(row + (long)col * p.C, xv);
#pragma unroll
              for (int u = 0; u < DYV; ++u)
#pragma unroll
                for (int v = 0; v < (GROUPED ? VEC : 1); ++v) {
                  const int e = GROUPED ? u * VEC + v : u;
                  acc[a][b][e] += dv[t][u] * xv[GROUPED ? v : u];
                }
            }
          }
        }
      }
    }
  }

  // Reduce the ppb lanes of each channel unit, one tap at a time, into this split's slice.
  const int total = p.K * p.R * p.S * p.Cg;
  const int RS = p.R * p.S;
  float* mine = wsp + (long)blockIdx.x * total;
#pragma unroll
  for (int a = 0; a < TROWS; ++a) {
#pragma unroll
    for (int b = 0; b < TCOLS; ++b) {
      const int r = r0 + a, s = s0 + b;
      if (r >= p.R) break;  // uniform across the block
      __syncthreads();
      if (pl < ppb) {
#pragma unroll
        for (int e = 0; e < EPT; ++e) red[threadIdx.x * EPT + e] = acc[a][b][e];
      }
      __syncthreads();
      for (int i = threadIdx.x; i < cub * EPT; i += BLOCK) {
        const int ul = i / EPT, e = i - ul * EPT;
        const int u = blockIdx.y * cub + ul;
        if (u >= NU) continue;
        float sum = 0.0f;
        for (int l = 0; l < ppb; ++l) sum += red[(l * cub + ul) * EPT + e];
        int idx;
        if (GROUPED) {
          const int kc = u / CCH, cch = u - kc * CCH;
          const int k = e / VEC, v = e - k * VEC;
          idx = ((kc * KPT + k) * RS + r * p.S + s) * p.Cg + cch * VEC + v;
        } else {
          idx = (u * VEC + e) * RS + r * p.S + s;
        }
        mine[idx] = sum;
      }
    }
  }
}

extern "C" __global__ void __launch_bounds__(BLOCK, MIN_BLOCKS)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  float* __restrict__ workspace, ConvParams p, int cub) {
  float* red = reinterpret_cast<float*>(direct_smem);
#if FR > 0
  if (p.stride_w == 1 && p.dil_w == 1) bwd_weight_partial<1>(p, x, dy, workspace, cub, red);
#else
  bwd_weight_partial<0>(p, x, dy, workspace, cub, red);
#endif
}

#if FR > 0
// Any stride and dilation, for FR > 0 instances (the main entry unrolls unit stride only).
extern "C" __global__ void __launch_bounds__(BLOCK, 1)  // rare shapes: no occupancy demand
conv2d_bwd_weight_generic(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                          float* __restrict__ workspace, ConvParams p, int cub) {
  bwd_weight_partial<0>(p, x, dy, workspace, cub, reinterpret_cast<float*>(direct_smem));
}

// Stride 2 along the row, dilation 1: the input window unrolled as the main entry does for
// unit stride, in an entry of its own (its own registers). Other shapes are left unwritten.
// With every filter row in one block (RB 0) the wider window needs half the occupancy.
#define S2_MIN_BLOCKS (RB ? MIN_BLOCKS : (MIN_BLOCKS + 1) / 2)
extern "C" __global__ void __launch_bounds__(BLOCK, S2_MIN_BLOCKS)
conv2d_bwd_weight_s2(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                     float* __restrict__ workspace, ConvParams p, int cub) {
  if (p.stride_w == 2 && p.dil_w == 1)
    bwd_weight_partial<2>(p, x, dy, workspace, cub, reinterpret_cast<float*>(direct_smem));
}
#endif

// Stage 2: dw[i] = sum over the splits of the partial sums, in the element type. A block sums
// 16 consecutive entries; its 16 rows of threads take every 16th split, then add up in shared.
extern "C" __global__ void __launch_bounds__(256)
conv2d_bwd_weight_reduce(const float* __restrict__ workspace, elem_t* __restrict__ dw,
                         int total, int splits) {
  __shared__ float part[16][17];
  const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
  const int i = blockIdx.x * 16 + tx;
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  if (i < total) {
    int b = ty;
    for (; b + 48 < splits; b += 64) {
      s0 += workspace[(long)b * total + i];
      s1 += workspace[(long)(b + 16) * total + i];
      s2 += workspace[(long)(b + 32) * total + i];
      s3 += workspace[(long)(b + 48) * total + i];
    }
    for (; b < splits; b += 16) s0 += workspace[(long)b * total + i];
  }
  part[ty][tx] = (s0 + s1) + (s2 + s3);
  __syncthreads();
  if (ty == 0 && i < total) {
    float sum = 0.0f;
#pragma unroll
    for (int y = 0; y < 16; ++y) sum += part[y][tx];
    dw[i] = from_float(sum);
  }
}
#endif
