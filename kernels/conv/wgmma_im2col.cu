// conv_wgmma_im2col: conv_wgmma's forward and stride-1 backward-data (wgmma.cu, included whole
// with TMA 2 through wgmma_split.cu: its producers, consumers, stages and epilogues, and
// conv_wgmma_split's slices of the reduction) with the gathered operand brought
// by Hopper's im2col bulk tensor copies instead of 128 producer threads' cp.async: one thread
// issues, per k-tile, one copy of the A tile (BLOCK_M pixels' 64 channels of one filter tap)
// and the weight's, both completing on the stage's mbarrier; the tensor map walks the window
// origins and fills zeros for the padding (conv/wgmma_im2col.py builds it).
//  - forward: A = x, rows m = (n, oh, ow), window origin (oh sh - ph, ow sw - pw), the k-tile's
//    tap (r, s) as the copy's offsets (s dw, r dh); 64 channels of one tap a k-tile (C/G a
//    multiple of 64); the weight [K][R S C/G] as conv_wgmma's tma 1 reads it.
//  - backward-data, stride 1: dx is the correlation of dy with the weight's taps reversed, so
//    A = dy, rows m = (n, h, w) of dx, window origin (h + ph - (R-1) dh, w + pw - (S-1) dw) and
//    tap (r, s) at offsets ((S-1-s) dw, (R-1-r) dh); 64 output channels of one tap a k-tile
//    (K/G a multiple of 64); the weight [K][R][S][C/G] read MN-major as conv_wgmma's tma 1 does.
// The *_split entries split the reduction where the output tiles leave the GPU idle (slice z /
// G of the grid takes k-tiles [slice kt_per_split, + kt_per_split)) and end it as
// conv_wgmma_split does: fp32 sums added into the zeroed workspace, the last slice of a tile
// writing it. The entries sit beside wgmma.cu's, not in it, so that conv_wgmma's code and the
// measurements keyed by its source hash stay as they are. Its split sums are added by
// reductions that return nothing (red_sums.cuh), where conv_wgmma_split's are atomics.
#include "red_sums.cuh"
#include "wgmma_split.cu"

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void wgmma_fwd_im2col(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void wgmma_bwd_data_im2col(const elem_t*, const elem_t*, elem_t*,
                                                 ConvParams) {}
extern "C" __global__ void wgmma_fwd_im2col_split(const elem_t*, const elem_t*, elem_t*, float*,
                                                  ConvParams, int, int, int) {}
extern "C" __global__ void wgmma_bwd_data_im2col_split(const elem_t*, const elem_t*, elem_t*,
                                                       float*, ConvParams, int, int, int) {}
#else
#if TMA != 2 || IGEMM_OP == 2
#error "conv_wgmma_im2col: forward or backward-data, both operands by tensor maps (TMA 2)"
#endif

namespace ig {

// The im2col box of a 4D [N][H][W][C] tensor map into shared memory: its pixels' channels from
// c on, walked from the window origin (w, h) of image n, each at the origin plus the filter
// tap's offsets (off_w, off_h).
__device__ __forceinline__ void tma_im2col_4d(void* dst, const TensorMap& map, int c, int w,
                                              int h, int n, int off_w, int off_h, u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6], {%7, %8};\n" ::"r"(sm90_smem(dst)),
      "l"(reinterpret_cast<u64>(&map)), "r"(c), "r"(w), "r"(h), "r"(n), "r"(sm90_smem(bar)),
      "h"((unsigned short)off_w), "h"((unsigned short)off_h)
      : "memory");
}

// Row m of an A tile over a rows x cols map of `images` (m = (n, y, x)), as the window origin
// (y step_y + shift_y, x step_x + shift_x) of image n.
struct Window {
  int n, h, w;
  __device__ __forceinline__ Window(int m, int rows, int cols, int step_y, int step_x,
                                    int shift_y, int shift_x) {
    const int per_image = rows * cols;
    n = m / per_image;
    const int t = m - n * per_image, y = t / cols;
    h = y * step_y + shift_y;
    w = (t - y * cols) * step_x + shift_x;
  }
};

#if IGEMM_OP == 0
// The forward's GEMM: rows (n, oh, ow), columns the group's K/G outputs, k-tiles (r, s, c);
// A = x's window at (oh sh - ph, ow sw - pw) offset by the tap, B = w as [K][CRS].
// With PADDED_GROUPS (conv_wgmma_blockdiag's super-groups of `per` groups), group g's Cg
// channels from g Cg on are read as ceil(Cg / 64) k-tiles of 64 a tap (channels past them meet
// the filter's zeros; past C, the copy's zero fill) and its Kg columns end at K. With
// FUSED_FILTER the block-diagonal filter tile comes straight from w (copy_filter), else from
// the one expand_blockdiag wrote.
struct Direction {
  int rows, cols, k_tiles, g;
  const ConvParams& p;
#ifdef PADDED_GROUPS
  int per;
  __device__ __forceinline__ Direction(const ConvParams& p_, int g_, int per_)
      : rows(p_.N * p_.P * p_.Q), cols(min(p_.Kg, p_.K - g_ * p_.Kg)),
        k_tiles(p_.R * p_.S * ((p_.Cg + BK - 1) / BK)), g(g_), p(p_), per(per_) {}
  // The B tile of k-tile (tap, 64-channel block ct) from w [K][R][S][Cg / per] by a 4D map
  // (Cg / per, R S, K, 1): one group a super-group, one box of BN rows from channel 64 ct (past
  // the group's channels, the copy's zero fill; rows past the group are columns not stored);
  // else a box of Kg / per rows for each group of the tile, from channel -slot Cg / per, so
  // that its channels land at its slot of the 64 and the rest of its rows is zero fill (slots
  // past the super-group: wholly zero).
  __device__ __forceinline__ void copy_filter(const TensorMap& tmap_b, int n0, int tap, int ct,
                                              unsigned char* b, u64* bar) const {
    const int row0 = g * p.Kg + n0;
    if (per == 1) {
      sm90_tma_4d(b, tmap_b, ct * BK, tap, row0, 0, bar);
      return;
    }
    const int cg = p.Cg / per, kg = p.Kg / per;
    for (int i = 0; i < BN / kg; ++i) {
      const int slot = n0 / kg + i;
      sm90_tma_4d(b + i * kg * 128, tmap_b, slot < per ? -slot * cg : -BK, tap, row0 + i * kg,
                  0, bar);
    }
  }
#else
  __device__ __forceinline__ Direction(const ConvParams& p_, int g_)
      : rows(p_.N * p_.P * p_.Q), cols(p_.Kg), k_tiles(p_.Cg * p_.R * p_.S / BK), g(g_), p(p_) {}
#endif
  __device__ __forceinline__ Window window(int m0) const {
    return Window(m0, p.P, p.Q, p.stride_h, p.stride_w, -p.pad_h, -p.pad_w);
  }
  __device__ __forceinline__ void copy(const TensorMap& tmap_a, const TensorMap& tmap_b,
                                       const Window& o, int n0, int kt, unsigned char* a,
                                       unsigned char* b, u64* bar) const {
#ifdef PADDED_GROUPS
    const int kk = kt * BK, per_tap = (p.Cg + BK - 1) / BK, tap = kt / per_tap;
    const int c = g * p.Cg + (kt - tap * per_tap) * BK;
#else
    const int kk = kt * BK, tap = kk / p.Cg, c = g * p.Cg + kk - tap * p.Cg;
#endif
    const int r = tap / p.S, s = tap - r * p.S;
    tma_im2col_4d(a, tmap_a, c, o.w, o.h, o.n, s * p.dil_w, r * p.dil_h, bar);
#if defined(PADDED_GROUPS) && FUSED_FILTER
    copy_filter(tmap_b, n0, tap, kt - tap * per_tap, b, bar);
#else
    sm90_tma_2d(b, tmap_b, kk, g * p.Kg + n0, bar);  // BN rows, 64 columns
#endif
  }
  __device__ __forceinline__ int row_offset(int m) const { return m * p.K + g * p.Kg; }
};
#else
// Backward-data's GEMM (stride 1): rows (n, h, w) of dx, columns the group's C/G inputs,
// k-tiles (r, s, k); A = dy's window at (h + ph - (R-1) dh, w + pw - (S-1) dw) offset by the
// reversed tap, B = w as [K][R][S][Cg], 64 k by 64 c a block.
struct Direction {
  int rows, cols, k_tiles, g;
  const ConvParams& p;
  __device__ __forceinline__ Direction(const ConvParams& p_, int g_)
      : rows(p_.N * p_.H * p_.W), cols(p_.Cg), k_tiles(p_.Kg * p_.R * p_.S / BK), g(g_), p(p_) {}
  __device__ __forceinline__ Window window(int m0) const {
    return Window(m0, p.H, p.W, 1, 1, p.pad_h - (p.R - 1) * p.dil_h,
                  p.pad_w - (p.S - 1) * p.dil_w);
  }
  __device__ __forceinline__ void copy(const TensorMap& tmap_a, const TensorMap& tmap_b,
                                       const Window& o, int n0, int kt, unsigned char* a,
                                       unsigned char* b, u64* bar) const {
    const int kk = kt * BK, tap = kk / p.Kg, k = kk - tap * p.Kg, r = tap / p.S;
    const int s = tap - r * p.S;
    tma_im2col_4d(a, tmap_a, g * p.Kg + k, o.w, o.h, o.n, (p.S - 1 - s) * p.dil_w,
                  (p.R - 1 - r) * p.dil_h, bar);
#pragma unroll
    for (int c = 0; c < BN / 64; ++c)
      sm90_tma_4d(b + c * MN_BLOCK_BYTES, tmap_b, n0 + 64 * c, s, r, g * p.Kg + k, bar);
  }
  __device__ __forceinline__ int row_offset(int m) const { return m * p.C + g * p.Cg; }
};
#endif

// The tiles of grid z slice blockIdx.z: group z % G, and split, slice z / G of the reduction
// (its sums added into ws, the last slice of a tile writing it).
template <bool SPLIT>
__device__ __forceinline__ void im2col_tiles(elem_t* __restrict__ out, float* __restrict__ ws,
                                             const ConvParams& p, int kt_per_split, int splits,
                                             int tiles_stride, const TensorMap& tmap_a,
                                             const TensorMap& tmap_b, int per = 1) {
#ifdef PADDED_GROUPS
  const Direction d(p, blockIdx.z % p.G, per);
#else
  const Direction d(p, blockIdx.z % p.G);
#endif
  int kt0 = 0, kt1 = d.k_tiles;
  if (SPLIT) slice_range(blockIdx.z / p.G, kt_per_split, d.k_tiles, kt0, kt1);
  const Tiles tiles(d.rows, d.cols);
  if (!tiles.mine) return;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    LoaderA la;  // not used: both operands come by tensor maps
    LoaderB lb;
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      const Window o = d.window(m0);
      produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
        d.copy(tmap_a, tmap_b, o, n0, kt, a, b, bar);
      });
    }
    produce_end(step);
    return;
  }
  const int total = tiles.mine * (kt1 - kt0);
  int* counters = reinterpret_cast<int*>(ws + (long)d.rows * (IGEMM_OP == 0 ? p.K : p.C)) +
                  d.g * tiles_stride;
  const auto row = [&](int m) { return d.row_offset(m); };
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, kt1 - kt0, step, total);
    if (SPLIT)
      add_slice(acc, wg, ws, counters + blockIdx.x + i * gridDim.x, out, m0, d.rows, n0, d.cols,
                splits, kt1 == kt0, bars, row);
    else
      store_pairs(acc, wg, out, m0, d.rows, n0, d.cols, row);
  }
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_fwd_im2col(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                 elem_t* __restrict__ y, ConvParams p MAPS) {
  ig::im2col_tiles<false>(y, nullptr, p, 0, 1, 0, tmap_a, tmap_b);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_fwd_im2col_split(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                       elem_t* __restrict__ y, float* __restrict__ ws, ConvParams p,
                       int kt_per_split, int splits, int tiles_stride MAPS) {
  ig::im2col_tiles<true>(y, ws, p, kt_per_split, splits, tiles_stride, tmap_a, tmap_b);
}
#else
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_bwd_data_im2col(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                      elem_t* __restrict__ dx, ConvParams p MAPS) {
  ig::im2col_tiles<false>(dx, nullptr, p, 0, 1, 0, tmap_a, tmap_b);
}

extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_bwd_data_im2col_split(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                            elem_t* __restrict__ dx, float* __restrict__ ws, ConvParams p,
                            int kt_per_split, int splits, int tiles_stride MAPS) {
  ig::im2col_tiles<true>(dx, ws, p, kt_per_split, splits, tiles_stride, tmap_a, tmap_b);
}
#endif
#endif
