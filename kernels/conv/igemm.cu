// conv_igemm: implicit-GEMM grouped convolution on the matrix units, all three directions.
//
// One source, compiled per instance. The direction is IGEMM_OP (0 fwd, 1 bwd_data,
// 2 bwd_weight, set by kernels/conv/igemm.py); the tile is BLOCK_M x BLOCK_N x BLOCK_K with
// WARPS_M x WARPS_N warps of 32 threads, STAGES shared-memory stages and VEC-element (VEC*2
// bytes) global loads. Per group g (grid z), the GEMM view (farm/problems.py ConvProblem.gemm):
//   fwd        C[m=(n,p,q)][j=k] = sum_{kk=(r,s,c)} x(n, p*sh-ph+r*dh, q*sw-pw+s*dw, c) w[k,r,s,c]
//   bwd_data   C[m=(n,h,w)][j=c] = sum_{kk=(r,s,k)} dy(n, (h+ph-r*dh)/sh, (w+pw-s*dw)/sw, k)
//                                                   * w[k,r,s,c]
//              one grid-z slice per (h % sh, w % sw) residue, iterating only the taps that hit
//   bwd_weight C[m=k][j=(r,s,c)] = sum_{kk=(n,p,q)} dy(n,p,q,k) x(n, p*sh-ph+r*dh, q*sw-pw+s*dw, c)
//              optionally split in slices of the reduction (grid z; split_k is a launch-time
//              choice of the descriptor): fp32 partials atomically added into the zeroed
//              workspace, then igemm_reduce writes dw.
// Shared-memory tiles are row-major with 16-byte chunks XOR-swizzled by row (no bank conflicts
// for cp.async writes and ldmatrix reads). Operands with K contiguous in memory are stored
// [M or N][K]; the others [K][M or N] and read with ldmatrix.trans.
// NVIDIA: cp.async (zero-fill through src-size), ldmatrix, mma.sync.m16n8k16 (fp32 accumulate).
// AMD (FARM_HIP): global loads into registers then LDS, MFMA 32x32x8 on 64-lane waves.
// Out-of-range rows, columns, taps and padding are predicated: nothing outside a tensor is read.
#include "../common.cuh"

#ifndef IGEMM_OP
#define IGEMM_OP 0
#endif
#ifndef BLOCK_M
#define BLOCK_M 128
#endif
#ifndef BLOCK_N
#define BLOCK_N 128
#endif
#ifndef BLOCK_K
#define BLOCK_K 32
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef WARPS_N
#define WARPS_N 4
#endif
#ifndef STAGES
#define STAGES 3
#endif
#ifndef VEC
#define VEC 8
#endif

#define IG_THREADS (32 * WARPS_M * WARPS_N)
// Two 256-thread blocks a multiprocessor (at most 128 registers a thread) where the
// accumulators leave room for it; the compiler alone picks up to 160 for some of these.
#ifndef IG_MIN_BLOCKS
#ifdef FARM_HIP
#define IG_MIN_BLOCKS 1
#else
#define IG_MIN_BLOCKS \
  ((IG_THREADS == 256 && BLOCK_M * BLOCK_N <= 64 * 256 && BLOCK_N <= 128 && VEC >= 4) ? 2 : 1)
#endif
#endif

#include "split_k.cuh"

#if FARM_DTYPE == 0
// No fp32 path on the matrix units: the descriptor marks fp32 instances not applicable; these
// stubs only keep every instance compilable.
extern "C" __global__ void conv2d_fwd(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_data(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void conv2d_bwd_weight(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void igemm_bwd_weight_split(const elem_t*, const elem_t*, float*, ConvParams,
                                                  int) {}
#else

namespace ig {

constexpr int BM = BLOCK_M, BN = BLOCK_N, BK = BLOCK_K;
constexpr int WM = WARPS_M, WN = WARPS_N, NST = STAGES, V = VEC, NT = IG_THREADS;
constexpr bool A_KMAJOR = IGEMM_OP != 2;  // A tile [BM][BK]; else [BK][BM]
constexpr bool B_KMAJOR = IGEMM_OP == 0;  // B tile [BN][BK]; else [BK][BN]
constexpr int A_ELEMS = BM * BK, B_ELEMS = BN * BK;
constexpr int BAD = -(1 << 28);  // a coordinate that fails every bounds check

static_assert(BK % 32 == 0 && BM % 32 == 0 && BN % 32 == 0, "tiles are multiples of 32");
static_assert(NST >= 2, "at least two stages");
static_assert(V == 1 || V == 2 || V == 4 || V == 8, "VEC is 1, 2, 4 or 8");
static_assert(NST * (A_ELEMS + B_ELEMS) * 2 <= 48 * 1024, "static shared memory over 48 KB");

// Element offset of (row, col) in a swizzled tile whose rows hold COLS 16-bit elements: the
// 16-byte chunk index is XORed with the row so 8 consecutive rows hit 8 distinct bank groups.
template <int COLS>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(COLS >= 32 && COLS % 32 == 0, "rows of at least 64 bytes");
  const int f = COLS >= 64 ? (row & 7) : ((row >> 1) & 3);
  return row * COLS + ((((col >> 3) ^ f)) << 3) + (col & 7);
}

// The igemm tiles: rows of COLS elements, swizzled (swz).
template <int ROWS, int COLS>
__device__ __forceinline__ int tile_offset(int row, int col) {
  return swz<COLS>(row, col);
}

#include "igemm_loaders.cuh"

// ---------------------------------------------------------------------------------------------
// The main loop: STAGES-deep ring of A and B tiles in shared memory, k-tiles [kt0, kt1).
// ---------------------------------------------------------------------------------------------
#ifndef FARM_HIP
constexpr int WTM = BM / WM, WTN = BN / WN;  // warp tile
static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are multiples of 16");
constexpr int MI = WTM / 16, NI = WTN / 8;

struct Acc { float c[MI][NI][4]; };

__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], const u16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldsm_x4_t(u32 (&r)[4], const u16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if FARM_DTYPE == 2
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One stage: BK/16 steps of MI x NI mma.m16n8k16 per warp.
__device__ __forceinline__ void compute_stage(Acc& acc, const u16* As, const u16* Bs, int wm,
                                              int wn, int lane) {
#pragma unroll
  for (int ks = 0; ks < BK / 16; ++ks) {
    u32 af[MI][4], bf[NI][2];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int mb = wm * WTM + mi * 16;
      if constexpr (A_KMAJOR) {
        // matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15): lanes 0-15 rows at k0, 16-31 at k8
        ldsm_x4(af[mi], As + swz<BK>(mb + (lane & 15), ks * 16 + (lane >> 4) * 8));
      } else {
        // [k][m] storage, transposed: matrix j = lane/8 holds m + (j&1)*8, k + (j>>1)*8
        const int j = lane >> 3;
        ldsm_x4_t(af[mi], As + swz<BM>(ks * 16 + (j >> 1) * 8 + (lane & 7), mb + (j & 1) * 8));
      }
    }
#pragma unroll
    for (int nj = 0; nj < NI / 2; ++nj) {
      const int nb = wn * WTN + nj * 16;
      u32 r[4];
      if constexpr (B_KMAJOR) {
        // [n][k]: matrix j: n + (j>>1)*8, k + (j&1)*8 -> b0,b1 of n-tile 0 then of n-tile 1
        ldsm_x4(r, Bs + swz<BK>(nb + (lane >> 4) * 8 + (lane & 7),
                                 ks * 16 + ((lane >> 3) & 1) * 8));
      } else {
        // [k][n], transposed: matrix j: k + (j&1)*8, n + (j>>1)*8
        ldsm_x4_t(r, Bs + swz<BN>(ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7),
                                   nb + (lane >> 4) * 8));
      }
      bf[2 * nj][0] = r[0]; bf[2 * nj][1] = r[1];
      bf[2 * nj + 1][0] = r[2]; bf[2 * nj + 1][1] = r[3];
    }
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) mma16816(acc.c[mi][ni], af[mi], bf[ni][0], bf[ni][1]);
  }
}

template <class LA, class LB>
__device__ __forceinline__ void mainloop(Acc& acc, u16* smem, const LA& la, const LB& lb, int kt0,
                                         int kt1) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WM, wn = warp / WM;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc.c[mi][ni][e] = 0.0f;
  u16* const sA = smem;
  u16* const sB = smem + NST * A_ELEMS;
  auto issue = [&](int kt, int stage) {
    u16* a = sA + stage * A_ELEMS;
    u16* b = sB + stage * B_ELEMS;
    la.visit(kt, [&](int, int off, const elem_t* src, bool ok) { copy_vec(a + off, src, ok); });
    lb.visit(kt, [&](int, int off, const elem_t* src, bool ok) { copy_vec(b + off, src, ok); });
  };
  const int nk = kt1 - kt0;
#pragma unroll
  for (int s = 0; s < NST - 1; ++s) {
    if (s < nk) issue(kt0 + s, s);
    cp_async_commit();
  }
  int read = 0, write = NST - 1;
  for (int i = 0; i < nk; ++i) {
    cp_async_wait<NST - 2>();  // k-tile i has landed (this thread's copies)
    __syncthreads();           // ... everyone's; and stage `write` is no longer being read
    if (i + NST - 1 < nk) issue(kt0 + i + NST - 1, write);
    cp_async_commit();
    compute_stage(acc, sA + read * A_ELEMS, sB + read * B_ELEMS, wm, wn, lane);
    read = read + 1 == NST ? 0 : read + 1;
    write = write + 1 == NST ? 0 : write + 1;
  }
  cp_async_wait<0>();
}

// Calls f(row, col, v0, v1) for each pair of adjacent accumulators (col, col + 1) of the tile.
template <class F>
__device__ __forceinline__ void for_each_pair(const Acc& acc, F&& f) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm = warp % WM, wn = warp / WM;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = wm * WTM + mi * 16 + (lane >> 2) + half * 8;
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
        const int col = wn * WTN + ni * 8 + (lane & 3) * 2;
        f(row, col, acc.c[mi][ni][2 * half], acc.c[mi][ni][2 * half + 1]);
      }
    }
}

#else  // FARM_HIP: 64-lane waves, MFMA 32x32x8, the same tiles and block size.
constexpr int NWAVES = NT / 64;
constexpr int AWM = (WN % 2 == 0) ? WM : WM / 2;
constexpr int AWN = (WN % 2 == 0) ? WN / 2 : WN;
static_assert(AWM * AWN == NWAVES, "waves tile the block");
constexpr int WTM = BM / AWM, WTN = BN / AWN;
static_assert(WTM % 32 == 0 && WTN % 32 == 0, "wave tiles are multiples of 32");
constexpr int MI = WTM / 32, NI = WTN / 32;

typedef float f32x16 __attribute__((ext_vector_type(16)));
#if FARM_DTYPE == 2
typedef short mfma_in __attribute__((ext_vector_type(4)));
#else
typedef _Float16 mfma_in __attribute__((ext_vector_type(4)));
#endif

struct Acc { f32x16 c[MI][NI]; };

struct alignas(8) U16x4 { u16 v[4]; };

// Four consecutive-k elements of row `mn` at k (a multiple of 4) from a tile.
template <bool KMAJOR, int MN_DIM>
__device__ __forceinline__ mfma_in read4(const u16* t, int mn, int k) {
  U16x4 q;
  if constexpr (KMAJOR) {
    const u16* p = t + swz<BK>(mn, k);  // 8 bytes inside one 16-byte chunk
    q = *reinterpret_cast<const U16x4*>(p);
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) q.v[e] = t[swz<MN_DIM>(k + e, mn)];
  }
  return __builtin_bit_cast(mfma_in, q);
}

__device__ __forceinline__ void compute_stage(Acc& acc, const u16* As, const u16* Bs, int wm,
                                              int wn, int lane) {
  const int kq = (lane >> 5) * 4, l32 = lane & 31;
#pragma unroll
  for (int ks = 0; ks < BK / 8; ++ks) {
    mfma_in a[MI], b[NI];
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
      a[mi] = read4<A_KMAJOR, BM>(As, wm * WTM + mi * 32 + l32, ks * 8 + kq);
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
      b[ni] = read4<B_KMAJOR, BN>(Bs, wn * WTN + ni * 32 + l32, ks * 8 + kq);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
      for (int ni = 0; ni < NI; ++ni) {
#if FARM_DTYPE == 2
        acc.c[mi][ni] =
            __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[mi], b[ni], acc.c[mi][ni], 0, 0, 0);
#else
        acc.c[mi][ni] = __builtin_amdgcn_mfma_f32_32x32x8f16(a[mi], b[ni], acc.c[mi][ni], 0, 0, 0);
#endif
      }
  }
}

template <class LA, class LB>
__device__ __forceinline__ void mainloop(Acc& acc, u16* smem, const LA& la, const LB& lb, int kt0,
                                         int kt1) {
  const int tid = threadIdx.x, lane = tid & 63, wave = tid >> 6;
  const int wm = wave % AWM, wn = wave / AWM;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 16; ++e) acc.c[mi][ni][e] = 0.0f;
  u16* const sA = smem;
  u16* const sB = smem + NST * A_ELEMS;
  VecT ra[LA::PASSES], rb[LB::PASSES];
  auto fetch = [&](int kt) {
    la.visit(kt, [&](int i, int, const elem_t* src, bool valid) {
      ra[i] = valid ? *reinterpret_cast<const VecT*>(src) : vzero();
    });
    lb.visit(kt, [&](int i, int, const elem_t* src, bool valid) {
      rb[i] = valid ? *reinterpret_cast<const VecT*>(src) : vzero();
    });
  };
  auto store = [&](int stage) {
    u16* a = sA + stage * A_ELEMS;
    u16* b = sB + stage * B_ELEMS;
#pragma unroll
    for (int i = 0; i < LA::PASSES; ++i) *reinterpret_cast<VecT*>(a + la.offset(i)) = ra[i];
#pragma unroll
    for (int i = 0; i < LB::PASSES; ++i) *reinterpret_cast<VecT*>(b + lb.offset(i)) = rb[i];
  };
  const int nk = kt1 - kt0;
  for (int s = 0; s < NST - 1 && s < nk; ++s) {
    fetch(kt0 + s);
    store(s);
  }
  __syncthreads();
  int read = 0, write = NST - 1;
  for (int i = 0; i < nk; ++i) {
    const bool more = i + NST - 1 < nk;
    if (more) fetch(kt0 + i + NST - 1);  // global loads in flight during the MFMAs
    compute_stage(acc, sA + read * A_ELEMS, sB + read * B_ELEMS, wm, wn, lane);
    if (more) store(write);  // stage `write` was last read in iteration i - 1
    __syncthreads();
    read = read + 1 == NST ? 0 : read + 1;
    write = write + 1 == NST ? 0 : write + 1;
  }
}

// Calls f(row, col, v) for each accumulator: MFMA 32x32 D element e of lane l is row
// (e/4)*8 + (l/32)*4 + e%4, column l%32 of its 32x32 tile.
template <class F>
__device__ __forceinline__ void for_each_elem(const Acc& acc, F&& f) {
  const int tid = threadIdx.x, lane = tid & 63, wave = tid >> 6;
  const int wm = wave % AWM, wn = wave / AWM;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int e = 0; e < 16; ++e) {
        const int row = wm * WTM + mi * 32 + (e >> 2) * 8 + (lane >> 5) * 4 + (e & 3);
        const int col = wn * WTN + ni * 32 + (lane & 31);
        f(row, col, acc.c[mi][ni][e]);
      }
}
#endif

// Output of a tile: rows [m0, m0 + BM) x columns [n0, n0 + BN) of the GEMM, written with
// row_offset(row) the element offset of the row's first column; columns beyond N are skipped.
// NVIDIA, where the tile fits in the pipeline's shared memory: staged there (rows padded by 16
// bytes: conflict-free fragment writes), then written as 16-byte row segments; narrow tiles
// (mostly grouped convolutions with few channels a group) store their fragments directly.
constexpr int EPI_LD = BN + 8;
constexpr bool EPI_SMEM = BN >= 64 && BM * EPI_LD <= NST * (A_ELEMS + B_ELEMS);

__device__ __forceinline__ u32 pack2(float v0, float v1) {
  return (u32)from_float(v0) | ((u32)from_float(v1) << 16);
}

template <class RowOffset>
__device__ __forceinline__ void store_tile(const Acc& acc, elem_t* out, u16* smem, int m0, int M,
                                           int n0, int N, RowOffset&& row_offset) {
#ifndef FARM_HIP
  if constexpr (EPI_SMEM) {
    __syncthreads();  // every warp is done with the last stage
    for_each_pair(acc, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<u32*>(smem + r * EPI_LD + c) = pack2(v0, v1);
    });
    __syncthreads();
    constexpr int VPR = BN / 8;  // 16-byte segments a row
#pragma unroll 4
    for (int idx = threadIdx.x; idx < BM * VPR; idx += NT) {
      const int r = idx / VPR, c = (idx % VPR) * 8;
      const int m = m0 + r, j = n0 + c;
      if (m >= M || j >= N) continue;
      const int off = row_offset(m) + j;
      const u16* src = smem + r * EPI_LD + c;
      if (j + 8 <= N && (off & 7) == 0) {
        *reinterpret_cast<Vec<8>*>(out + off) = *reinterpret_cast<const Vec<8>*>(src);
      } else {
        for (int e = 0; e < 8 && j + e < N; ++e) out[off + e] = src[e];
      }
    }
  } else {
    for_each_pair(acc, [&](int r, int c, float v0, float v1) {
      const int m = m0 + r, j = n0 + c;
      if (m >= M || j >= N) return;
      const int off = row_offset(m) + j;
      if (j + 1 < N && (off & 1) == 0) {
        *reinterpret_cast<u32*>(out + off) = pack2(v0, v1);
      } else {
        out[off] = from_float(v0);
        if (j + 1 < N) out[off + 1] = from_float(v1);
      }
    });
  }
#else
  for_each_elem(acc, [&](int r, int c, float v) {
    const int m = m0 + r, j = n0 + c;
    if (m < M && j < N) out[row_offset(m) + j] = from_float(v);
  });
#endif
}

template <class RowOffset>
__device__ __forceinline__ void add_tile(const Acc& acc, float* out, int m0, int M, int n0, int N,
                                         RowOffset&& row_offset) {
#ifndef FARM_HIP
  for_each_pair(acc, [&](int r, int c, float v0, float v1) {
    const int m = m0 + r, j = n0 + c;
    if (m >= M || j >= N) return;
    const int off = row_offset(m) + j;
    atomicAdd(out + off, v0);
    if (j + 1 < N) atomicAdd(out + off + 1, v1);
  });
#else
  for_each_elem(acc, [&](int r, int c, float v) {
    const int m = m0 + r, j = n0 + c;
    if (m < M && j < N) atomicAdd(out + row_offset(m) + j, v);
  });
#endif
}

__device__ __forceinline__ void tile_coords(int N, int& m0, int& n0) {
  const int ntiles = (N + BN - 1) / BN;  // n fastest: neighbouring blocks share the A rows
  const int bx = blockIdx.x;
  const int mt = bx / ntiles;
  m0 = mt * BM;
  n0 = (bx - mt * ntiles) * BN;
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(IG_THREADS, IG_MIN_BLOCKS)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  using namespace ig;
  __shared__ __attribute__((aligned(128))) u16 smem[NST * (A_ELEMS + B_ELEMS)];
  const int g = blockIdx.z, M = p.N * p.P * p.Q, CRS = p.Cg * p.R * p.S;
  int m0, n0;
  tile_coords(p.Kg, m0, n0);
  if (m0 >= M) return;
  LoaderA la;
  la.init(x, p, g, m0, threadIdx.x);
  LoaderB lb;
  lb.init(w, p, g, n0, threadIdx.x);
  Acc acc;
  mainloop(acc, smem, la, lb, 0, (CRS + BK - 1) / BK);
  const int K = p.K, gk = g * p.Kg;
  store_tile(acc, y, smem, m0, M, n0, p.Kg, [&](int m) { return m * K + gk; });
}

#elif IGEMM_OP == 1
extern "C" __global__ void __launch_bounds__(IG_THREADS, IG_MIN_BLOCKS)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  using namespace ig;
  __shared__ __attribute__((aligned(128))) u16 smem[NST * (A_ELEMS + B_ELEMS)];
  Residue rz;
  rz.init(p, blockIdx.z);
  int m0, n0;
  tile_coords(p.Cg, m0, n0);
  if (m0 >= rz.M) return;
  LoaderA la;
  la.init(dy, p, rz, m0, threadIdx.x);
  LoaderB lb;
  lb.init(w, p, rz, n0, threadIdx.x);
  Acc acc;
  mainloop(acc, smem, la, lb, 0, (rz.ktotal(p) + BK - 1) / BK);  // no taps: zeros
  const int HW = rz.Hr * rz.Wr, Wr = rz.Wr, sh = p.stride_h, sw = p.stride_w;
  const int H = p.H, W = p.W, C = p.C, gc = rz.g * p.Cg, rh = rz.rh, rw = rz.rw;
  FastDiv by_hw, by_wr;
  by_hw.init(HW);
  by_wr.init(Wr);
  store_tile(acc, dx, smem, m0, rz.M, n0, p.Cg, [&](int m) {
    const int n = by_hw.div(m), t = m - n * HW, a = by_wr.div(t), b = t - a * Wr;
    return ((n * H + rh + a * sh) * W + rw + b * sw) * C + gc;
  });
}

#else
// Unsplit: dw written directly. Split (igemm_bwd_weight_split): ws is fp32 [K][R][S][Cg],
// zeroed by igemm_zero; slice z / G covers k-tiles [slice * kt_per_split, + kt_per_split) and
// adds its partial sums atomically; igemm_reduce then converts ws into dw.
template <bool SPLIT>
__device__ __forceinline__ void bwd_weight(const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ dy, elem_t* __restrict__ dw,
                                           const ConvParams& p, float* __restrict__ ws,
                                           int kt_per_split) {
  using namespace ig;
  __shared__ __attribute__((aligned(128))) u16 smem[NST * (A_ELEMS + B_ELEMS)];
  const int g = blockIdx.z % p.G, slice = blockIdx.z / p.G;
  const int CRS = p.Cg * p.R * p.S, KT = (p.N * p.P * p.Q + BK - 1) / BK;
  int m0, n0;
  tile_coords(CRS, m0, n0);
  if (m0 >= p.Kg) return;
  int kt0 = 0, kt1 = KT;
  if (SPLIT) {
    kt0 = slice * kt_per_split;
    kt1 = kt0 + kt_per_split < KT ? kt0 + kt_per_split : KT;
    if (kt1 < kt0) kt1 = kt0;
  }
  LoaderA la;
  la.init(dy, p, g, m0, threadIdx.x);
  LoaderB lb;
  lb.init(x, p, g, n0, threadIdx.x);
  Acc acc;
  mainloop(acc, smem, la, lb, kt0, kt1);
  const int gk = g * p.Kg;
  if (SPLIT)
    add_tile(acc, ws, m0, p.Kg, n0, CRS, [&](int m) { return (gk + m) * CRS; });
  else
    store_tile(acc, dw, smem, m0, p.Kg, n0, CRS, [&](int m) { return (gk + m) * CRS; });
}

extern "C" __global__ void __launch_bounds__(IG_THREADS, IG_MIN_BLOCKS)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  elem_t* __restrict__ dw, ConvParams p) {
  bwd_weight<false>(x, dy, dw, p, nullptr, 0);
}

extern "C" __global__ void __launch_bounds__(IG_THREADS, IG_MIN_BLOCKS)
igemm_bwd_weight_split(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                       float* __restrict__ ws, ConvParams p, int kt_per_split) {
  bwd_weight<true>(x, dy, nullptr, p, ws, kt_per_split);
}
#endif

#endif  // FARM_DTYPE != 0
