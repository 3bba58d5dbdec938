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
// measurements keyed by its source hash stay as they are. Its stream-K entries
// (conv_wgmma_stream) are below.
#include "wgmma_split.cu"

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void wgmma_fwd_im2col(const elem_t*, const elem_t*, elem_t*, ConvParams) {}
extern "C" __global__ void wgmma_bwd_data_im2col(const elem_t*, const elem_t*, elem_t*,
                                                 ConvParams) {}
extern "C" __global__ void wgmma_fwd_im2col_split(const elem_t*, const elem_t*, elem_t*, float*,
                                                  ConvParams, int, int, int) {}
extern "C" __global__ void wgmma_bwd_data_im2col_split(const elem_t*, const elem_t*, elem_t*,
                                                       float*, ConvParams, int, int, int) {}
extern "C" __global__ void wgmma_fwd_stream(const elem_t*, const elem_t*, elem_t*, float*,
                                            ConvParams) {}
extern "C" __global__ void wgmma_bwd_data_stream(const elem_t*, const elem_t*, elem_t*, float*,
                                                 ConvParams) {}
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
struct Direction {
  int rows, cols, k_tiles, g;
  const ConvParams& p;
  __device__ __forceinline__ Direction(const ConvParams& p_, int g_)
      : rows(p_.N * p_.P * p_.Q), cols(p_.Kg), k_tiles(p_.Cg * p_.R * p_.S / BK), g(g_), p(p_) {}
  __device__ __forceinline__ Window window(int m0) const {
    return Window(m0, p.P, p.Q, p.stride_h, p.stride_w, -p.pad_h, -p.pad_w);
  }
  __device__ __forceinline__ void copy(const TensorMap& tmap_a, const TensorMap& tmap_b,
                                       const Window& o, int n0, int kt, unsigned char* a,
                                       unsigned char* b, u64* bar) const {
    const int kk = kt * BK, tap = kk / p.Cg, r = tap / p.S, s = tap - r * p.S;
    tma_im2col_4d(a, tmap_a, g * p.Cg + kk - tap * p.Cg, o.w, o.h, o.n, s * p.dil_w,
                  r * p.dil_h, bar);
    sm90_tma_2d(b, tmap_b, kk, g * p.Kg + n0, bar);  // BN rows, 64 columns
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

// The producer's copies of tile (m0, n0)'s k-tiles [kt0, kt1), one thread issuing them.
__device__ __forceinline__ void produce_tile(const Direction& d, const TensorMap& tmap_a,
                                             const TensorMap& tmap_b, unsigned char* stages,
                                             u64* bars, int m0, int n0, int kt0, int kt1,
                                             int& step) {
  LoaderA la;  // not used: both operands come by tensor maps
  LoaderB lb;
  const Window o = d.window(m0);
  produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a, unsigned char* b,
                                                    u64* bar) {
    d.copy(tmap_a, tmap_b, o, n0, kt, a, b, bar);
  });
}

// The tiles of grid z slice blockIdx.z: group z % G, and split, slice z / G of the reduction
// (its sums added into ws, the last slice of a tile writing it).
template <bool SPLIT>
__device__ __forceinline__ void im2col_tiles(elem_t* __restrict__ out, float* __restrict__ ws,
                                             const ConvParams& p, int kt_per_split, int splits,
                                             int tiles_stride, const TensorMap& tmap_a,
                                             const TensorMap& tmap_b) {
  const Direction d(p, blockIdx.z % p.G);
  int kt0 = 0, kt1 = d.k_tiles;
  if (SPLIT) slice_range(blockIdx.z / p.G, kt_per_split, d.k_tiles, kt0, kt1);
  const Tiles tiles(d.rows, d.cols);
  if (!tiles.mine) return;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      produce_tile(d, tmap_a, tmap_b, stages, bars, m0, n0, kt0, kt1, step);
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

// Stream-K (conv_wgmma_stream): the grid's blocks, as many as the GPU holds at once, share the
// k-tiles of a group's output tiles evenly, tile after tile: block b takes the iterations
// [b T / B, (b + 1) T / B) of T = tiles x k-tiles. A tile a block covers whole it writes; a
// tile that several blocks share is the sum of their parts: each sharer writes its fp32 part
// to its own slot of the workspace (a block has at most two shared tiles, the first and the
// last of its range: slots 2 b and 2 b + 1) and counts the tile; the sharer that counts it
// last adds the other parts to its own and writes the tile. The workspace: an int counter per
// tile of each group (zeroed by a launch before), then the slots.
__device__ __forceinline__ long long stream_start(int b, long long total, int blocks) {
  return total * b / blocks;
}

// The block whose iterations hold `it`: the last b with stream_start(b) <= it.
__device__ __forceinline__ int stream_block(long long it, long long total, int blocks) {
  const long long b = ((it + 1) * blocks - 1) / total;
  return b < blocks - 1 ? (int)b : blocks - 1;
}

// Block b's slot for the shared tile whose first iteration is `first`: its first tile's (the
// range starts in it), else its last's.
__device__ __forceinline__ int stream_slot(int b, long long first, long long total, int blocks) {
  return 2 * b + (stream_start(b, total, blocks) < first ? 1 : 0);
}

// The fp32 part at `part` (a BM x BN tile, row-major) added to the consumer's accumulators, in
// for_each_pair's layout.
__device__ __forceinline__ void add_pairs(Acc& acc, int m_group, const float* __restrict__ part) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int row = m_group * WG_M + mi * 64 + 16 * warp + (lane >> 2);
#pragma unroll
    for (int n = 0; n < BN / 8; ++n) {
      const int col = 8 * n + 2 * (lane & 3);
      const float2 a = __ldcg(reinterpret_cast<const float2*>(part + row * BN + col));
      const float2 b = __ldcg(reinterpret_cast<const float2*>(part + (row + 8) * BN + col));
      acc.c[mi][4 * n] += a.x;
      acc.c[mi][4 * n + 1] += a.y;
      acc.c[mi][4 * n + 2] += b.x;
      acc.c[mi][4 * n + 3] += b.y;
    }
  }
}

// A sharer's count of its tile, by one thread after the consumers' barrier: a release of the
// block's part (cumulative over the barrier) and an acquire of the parts counted before it.
__device__ __forceinline__ int count_tile(int* counter) {
  int before;
  asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(before) : "l"(counter)
               : "memory");
  return before;
}

// Words of the workspace before the slots: the counters, rounded up to 16 bytes.
__device__ __forceinline__ long long stream_counter_words(const ConvParams& p, int count) {
  return ((long long)p.G * count + 3) / 4 * 4;
}

__device__ __forceinline__ void stream_tiles(elem_t* __restrict__ out, float* __restrict__ ws,
                                             const ConvParams& p, const TensorMap& tmap_a,
                                             const TensorMap& tmap_b) {
  const Direction d(p, blockIdx.z);
  const int n_tiles = (d.cols + BN - 1) / BN, count = (d.rows + BM - 1) / BM * n_tiles;
  const int blocks = gridDim.x, me = blockIdx.x, KT = d.k_tiles;
  const long long total = (long long)count * KT;
  const long long it0 = stream_start(me, total, blocks), it1 = stream_start(me + 1, total, blocks);
  if (it0 == it1) return;  // more blocks than iterations
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7;
  int step = 0;
  // the segment of the range from `it`: its tile, k-tiles [kb, ke) and origin
  const auto segment = [&](long long it, int& tile, int& kb, int& ke, int& m0, int& n0) {
    tile = (int)(it / KT);
    kb = (int)(it - (long long)tile * KT);
    ke = it1 - it < KT - kb ? kb + (int)(it1 - it) : KT;
    m0 = tile / n_tiles * BM;
    n0 = (tile - tile / n_tiles * n_tiles) * BN;
  };
  int tile, kb, ke, m0, n0;
  if (wg >= CONSUMERS) {
    for (long long it = it0; it < it1; it += ke - kb) {
      segment(it, tile, kb, ke, m0, n0);
      produce_tile(d, tmap_a, tmap_b, stages, bars, m0, n0, kb, ke, step);
    }
    produce_end(step);
    return;
  }
  int* counters = reinterpret_cast<int*>(ws) + d.g * count;
  float* slots = ws + stream_counter_words(p, count) + (long long)d.g * blocks * 2 * BM * BN;
  const auto row = [&](int m) { return d.row_offset(m); };
  const int steps = (int)(it1 - it0);
  for (long long it = it0; it < it1; it += ke - kb) {
    segment(it, tile, kb, ke, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, ke - kb, step, steps);
    if (kb == 0 && ke == KT) {
      store_pairs(acc, wg, out, m0, d.rows, n0, d.cols, row);
      continue;
    }
    const long long first = (long long)tile * KT;
    const int j0 = stream_block(first, total, blocks);
    const int j1 = stream_block(first + KT - 1, total, blocks);
    float* part = slots + (long long)stream_slot(me, first, total, blocks) * BM * BN;
    for_each_pair(acc, wg, [&](int r, int c, float v0, float v1) {
      *reinterpret_cast<float2*>(part + r * BN + c) = make_float2(v0, v1);
    });
    split_consumers_sync();  // the consumers' parts written before one thread counts
    volatile int* last = reinterpret_cast<volatile int*>(bars + 7);  // a spare barrier slot
    if (threadIdx.x == 0) *last = count_tile(counters + tile) == j1 - j0;
    split_consumers_sync();
    if (*last) {
      for (int j = j0; j <= j1; ++j)
        if (j != me)
          add_pairs(acc, wg, slots + (long long)stream_slot(j, first, total, blocks) * BM * BN);
      store_pairs(acc, wg, out, m0, d.rows, n0, d.cols, row);
    }
    split_consumers_sync();  // `last` is read before the next shared tile sets it
  }
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_fwd_stream(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                 elem_t* __restrict__ y, float* __restrict__ ws, ConvParams p MAPS) {
  ig::stream_tiles(y, ws, p, tmap_a, tmap_b);
}

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
wgmma_bwd_data_stream(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                      elem_t* __restrict__ dx, float* __restrict__ ws, ConvParams p MAPS) {
  ig::stream_tiles(dx, ws, p, tmap_a, tmap_b);
}

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
