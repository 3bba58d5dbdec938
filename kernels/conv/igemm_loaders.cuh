// What conv_igemm (igemm.cu) and conv_wgmma (wgmma.cu) share: element vectors, division by a
// launch constant, cp.async with zero-fill, and each direction's tile loaders, which walk the
// implicit GEMM's A and B tiles and hand every V-element piece (shared-memory offset, source,
// validity) to a callback. Included inside namespace ig after the including file defines BM,
// BN, BK, V, NT (the threads that load), BAD, IGEMM_OP and
// tile_offset<ROWS, COLS>(row, col): the element offset of (row, col) in its tile layout.
#pragma once

// V elements moved as one unit.
template <int N> struct Vec;
template <> struct alignas(16) Vec<8> { u32 w[4]; };
template <> struct alignas(8) Vec<4> { u32 w[2]; };
template <> struct alignas(4) Vec<2> { u32 w[1]; };
template <> struct alignas(2) Vec<1> { u16 h; };
typedef Vec<V> VecT;

__device__ __forceinline__ VecT vzero() { return VecT{}; }

// Division of non-negative ints below 2^31 by a divisor fixed per launch: a multiply-high and a
// shift (Granlund-Montgomery, as CUTLASS's FastDivmod). No integer division in the main loop.
struct FastDiv {
  int d;
  u32 mul, shr;
  __device__ __forceinline__ void init(int divisor) {
    d = divisor;
    if (divisor <= 1) {
      mul = 0; shr = 0;
    } else {
      const u32 l = 32 - __clz(divisor - 1);  // ceil(log2(divisor))
      mul = (u32)(((1ull << (31 + l)) + divisor - 1) / (u64)divisor);
      shr = l - 1;
    }
  }
  __device__ __forceinline__ int div(int n) const {
    return d == 1 ? n : (int)(__umulhi((u32)n, mul) >> shr);
  }
};

#ifndef FARM_HIP
__device__ __forceinline__ u32 smem_u32(const void* p) {
  return (u32)__cvta_generic_to_shared(p);
}
// Copy V elements global -> shared; an invalid copy writes zeros and reads nothing.
__device__ __forceinline__ void copy_vec(u16* dst, const elem_t* src, bool valid) {
  if constexpr (V == 8) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(valid ? 16 : 0));
  } else if constexpr (V == 4) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(valid ? 8 : 0));
  } else if constexpr (V == 2) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(valid ? 4 : 0));
  } else {
    *dst = valid ? *src : (u16)0;  // 2 bytes: below cp.async's smallest size
  }
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
#endif

// ---------------------------------------------------------------------------------------------
// Tile loaders. Each thread moves PASSES vectors of its tile per stage: tile rows row0 +
// i*RPP, one fixed tile column `col`. visit(kt, f) calls f(i, smem_offset, src, valid).
// ---------------------------------------------------------------------------------------------
template <int ROWS, int COLS>
struct Lanes {
  static constexpr int TPR = COLS / V;  // threads along a row
  static_assert(NT % TPR == 0, "a row's vectors fit in the block");
  static constexpr int RPP = NT / TPR;  // rows per pass
  static_assert(ROWS % RPP == 0, "the block covers the tile in whole passes");
  static constexpr int PASSES = ROWS / RPP;
  int row0, col;
  __device__ __forceinline__ void lanes_init(int tid) {
    row0 = tid / TPR;
    col = (tid % TPR) * V;
  }
  __device__ __forceinline__ int row(int i) const { return row0 + i * RPP; }
  __device__ __forceinline__ int offset(int i) const { return tile_offset<ROWS, COLS>(row(i), col); }
};

#if IGEMM_OP == 0
// fwd A: [BM][BK], rows m = (n, p, q), columns kk = (r, s, c); x is NHWGC.
struct LoaderA : Lanes<BM, BK> {
  const elem_t* x;
  int base[PASSES], hb[PASSES], wb[PASSES];
  int H, W, C, Cg, S, CRS, dil_h, dil_w;
  FastDiv by_cg, by_s;
  __device__ __forceinline__ void init(const elem_t* x_, const ConvParams& p, int g, int m0,
                                       int tid) {
    lanes_init(tid);
    x = x_;
    H = p.H; W = p.W; C = p.C; Cg = p.Cg; S = p.S; CRS = p.Cg * p.R * p.S;
    dil_h = p.dil_h; dil_w = p.dil_w;
    by_cg.init(p.Cg);
    by_s.init(p.S);
    const int PQ = p.P * p.Q, M = p.N * PQ;
    FastDiv by_pq, by_q;
    by_pq.init(PQ);
    by_q.init(p.Q);
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      int m = m0 + row(i);
      if (m < M) {
        int n = by_pq.div(m), pq = m - n * PQ, oh = by_q.div(pq), ow = pq - oh * p.Q;
        base[i] = n * p.H * p.W * p.C + g * p.Cg;
        hb[i] = oh * p.stride_h - p.pad_h;
        wb[i] = ow * p.stride_w - p.pad_w;
      } else {
        base[i] = 0; hb[i] = BAD; wb[i] = BAD;
      }
    }
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
    const int kk = kt * BK + col;
    const bool kval = kk < CRS;
    const int rs = by_cg.div(kk), c = kk - rs * Cg, r = by_s.div(rs), s = rs - r * S;
    const int dh = kval ? r * dil_h : BAD, dw = s * dil_w;
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const int h = hb[i] + dh, w = wb[i] + dw;
      const bool valid = (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
      const int off = valid ? base[i] + (h * W + w) * C + c : 0;
      f(i, offset(i), x + off, valid);
    }
  }
};

// fwd B: [BN][BK], rows j = output channel k of the group, columns kk = (r, s, c); w is GKYXC,
// so the group's weights are a dense [Kg][CRS] matrix.
struct LoaderB : Lanes<BN, BK> {
  const elem_t* wg;
  int rowoff[PASSES];
  int CRS;
  __device__ __forceinline__ void init(const elem_t* w, const ConvParams& p, int g, int n0,
                                       int tid) {
    lanes_init(tid);
    CRS = p.Cg * p.R * p.S;
    wg = w + (long)g * p.Kg * CRS;
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      int j = n0 + row(i);
      rowoff[i] = j < p.Kg ? j * CRS : -1;
    }
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
    const int kk = kt * BK + col;
    const bool kval = kk < CRS;
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const bool valid = kval && rowoff[i] >= 0;
      f(i, offset(i), valid ? wg + rowoff[i] + kk : wg, valid);
    }
  }
};

#elif IGEMM_OP == 1
// The taps of one (h % sh, w % sw) residue class: r = r0 + j*step for j < count hit an output
// row exactly, p = h / sh + shift0 - j * dshift (step*dil is a multiple of the stride).
struct Taps {
  int r0, step, count, shift0, dshift;
  __device__ __forceinline__ void init(int rh, int pad, int dil, int stride, int R) {
    int a = stride, b = dil;  // step = stride / gcd(stride, dil)
    while (b) { int t = a % b; a = b; b = t; }
    step = stride / a;
    dshift = dil / a;
    r0 = R;
    for (int r = 0; r < R && r < step; ++r) {
      int v = (rh + pad - r * dil) % stride;
      if (v == 0) { r0 = r; break; }
    }
    count = r0 < R ? (R - 1 - r0) / step + 1 : 0;
    shift0 = count ? (rh + pad - r0 * dil) / stride : 0;  // exact
  }
};

struct Residue {
  int g, rh, rw, Hr, Wr, M;
  Taps th, tw;
  __device__ __forceinline__ void init(const ConvParams& p, int z) {
    const int nres = p.stride_h * p.stride_w;
    g = z / nres;
    const int res = z - g * nres;
    rh = res / p.stride_w;
    rw = res - rh * p.stride_w;
    Hr = rh < p.H ? (p.H - rh + p.stride_h - 1) / p.stride_h : 0;
    Wr = rw < p.W ? (p.W - rw + p.stride_w - 1) / p.stride_w : 0;
    M = p.N * Hr * Wr;
    th.init(rh, p.pad_h, p.dil_h, p.stride_h, p.R);
    tw.init(rw, p.pad_w, p.dil_w, p.stride_w, p.S);
  }
  __device__ __forceinline__ int ktotal(const ConvParams& p) const {
    return th.count * tw.count * p.Kg;
  }
};

// bwd_data A: [BM][BK], rows m = (n, hi, wi) of the residue, columns kk = (jr, js, k); dy NHWGK.
struct LoaderA : Lanes<BM, BK> {
  const elem_t* dy;
  int base[PASSES], hi[PASSES], wi[PASSES];
  int P, Q, K, Kg, Ktot, Sv, sh0, dsh, sw0, dsw;
  FastDiv by_kg, by_sv;
  __device__ __forceinline__ void init(const elem_t* dy_, const ConvParams& p, const Residue& rz,
                                       int m0, int tid) {
    lanes_init(tid);
    dy = dy_;
    P = p.P; Q = p.Q; K = p.K; Kg = p.Kg; Ktot = rz.ktotal(p); Sv = rz.tw.count;
    sh0 = rz.th.shift0; dsh = rz.th.dshift; sw0 = rz.tw.shift0; dsw = rz.tw.dshift;
    by_kg.init(p.Kg);
    by_sv.init(Sv);
    const int HW = rz.Hr * rz.Wr;
    FastDiv by_hw, by_wr;
    by_hw.init(HW);
    by_wr.init(rz.Wr);
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      int m = m0 + row(i);
      if (m < rz.M) {
        int n = by_hw.div(m), t = m - n * HW, a = by_wr.div(t);
        base[i] = n * p.P * p.Q * p.K + rz.g * p.Kg;
        hi[i] = a;
        wi[i] = t - a * rz.Wr;
      } else {
        base[i] = 0; hi[i] = BAD; wi[i] = BAD;
      }
    }
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
    const int kk = kt * BK + col;
    const bool kval = kk < Ktot;
    const int j = by_kg.div(kk), k = kk - j * Kg, jr = by_sv.div(j), js = j - jr * Sv;
    const int dp = kval ? sh0 - jr * dsh : BAD;
    const int dq = sw0 - js * dsw;
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const int oh = hi[i] + dp, ow = wi[i] + dq;
      const bool valid = (unsigned)oh < (unsigned)P && (unsigned)ow < (unsigned)Q;
      const int off = valid ? base[i] + (oh * Q + ow) * K + k : 0;
      f(i, offset(i), dy + off, valid);
    }
  }
};

// bwd_data B: [BK][BN], rows kk = (jr, js, k), columns j = input channel c of the group.
struct LoaderB : Lanes<BK, BN> {
  const elem_t* wg;
  const elem_t* w0;
  int Kg, Ktot, Sv, r0h, sth, r0w, stw, RS, S, Cg;
  FastDiv by_kg, by_sv;
  bool cval;
  __device__ __forceinline__ void init(const elem_t* w, const ConvParams& p, const Residue& rz,
                                       int n0, int tid) {
    lanes_init(tid);
    Kg = p.Kg; Ktot = rz.ktotal(p); Sv = rz.tw.count;
    r0h = rz.th.r0; sth = rz.th.step; r0w = rz.tw.r0; stw = rz.tw.step;
    RS = p.R * p.S; S = p.S; Cg = p.Cg;
    by_kg.init(p.Kg);
    by_sv.init(Sv);
    cval = n0 + col < p.Cg;
    w0 = w;
    wg = w + (long)rz.g * p.Kg * RS * p.Cg + n0 + col;
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const int kk = kt * BK + row(i);
      const bool valid = cval && kk < Ktot;
      const int j = by_kg.div(kk), k = kk - j * Kg, jr = by_sv.div(j), js = j - jr * Sv;
      const int r = r0h + jr * sth, s = r0w + js * stw;
      f(i, offset(i), valid ? wg + ((k * RS) + r * S + s) * Cg : w0, valid);
    }
  }
};

#else
// bwd_weight A: [BK][BM], rows kk = (n, p, q), columns m = output channel k; dy is NPQ x K.
struct LoaderA : Lanes<BK, BM> {
  const elem_t* dyg;
  const elem_t* dy0;
  int K, NPQ;
  bool mval;
  __device__ __forceinline__ void init(const elem_t* dy, const ConvParams& p, int g, int m0,
                                       int tid) {
    lanes_init(tid);
    K = p.K; NPQ = p.N * p.P * p.Q;
    mval = m0 + col < p.Kg;
    dy0 = dy;
    dyg = dy + g * p.Kg + m0 + col;
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const int kk = kt * BK + row(i);
      const bool valid = mval && kk < NPQ;
      f(i, offset(i), valid ? dyg + kk * K : dy0, valid);
    }
  }
};

// bwd_weight B: [BK][BN], rows kk = (n, p, q), columns j = (r, s, c); x is NHWGC.
struct LoaderB : Lanes<BK, BN> {
  const elem_t* xg;
  const elem_t* x0;
  int hoff, woff, NPQ, PQ, Q, H, W, C, sh, sw;
  FastDiv by_pq, by_q;
  __device__ __forceinline__ void init(const elem_t* x, const ConvParams& p, int g, int n0,
                                       int tid) {
    lanes_init(tid);
    const int j = n0 + col, CRS = p.Cg * p.R * p.S;
    const int c = j % p.Cg, rs = j / p.Cg, r = rs / p.S, s = rs - r * p.S;
    hoff = j < CRS ? r * p.dil_h - p.pad_h : BAD;
    woff = s * p.dil_w - p.pad_w;
    NPQ = p.N * p.P * p.Q; PQ = p.P * p.Q; Q = p.Q; H = p.H; W = p.W; C = p.C;
    sh = p.stride_h; sw = p.stride_w;
    by_pq.init(PQ);
    by_q.init(p.Q);
    x0 = x;
    xg = x + g * p.Cg + (j < CRS ? c : 0);
  }
  template <class F>
  __device__ __forceinline__ void visit(int kt, F&& f) const {
#pragma unroll
    for (int i = 0; i < PASSES; ++i) {
      const int kk = kt * BK + row(i);
      const int n = by_pq.div(kk), t = kk - n * PQ, oh = by_q.div(t), ow = t - oh * Q;
      const int h = oh * sh + hoff, w = ow * sw + woff;
      const bool valid = kk < NPQ && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
      f(i, offset(i), valid ? xg + ((n * H + h) * W + w) * C : x0, valid);
    }
  }
};
#endif
