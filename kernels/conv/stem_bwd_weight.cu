// conv_stem_bwd_weight: backward-weight of convolutions with few input channels a group (the
// stems: 1 to 4 channels in, tens out; and groups of 8 to 32) on mma.sync (sm_80 and later,
// bf16 and fp16):
//   dw[g, k, r, s, c] = sum over n, oh, ow of dy[n, oh, ow, g, k] x[n, ih, iw, g, c]
// with ih = oh stride_h - pad_h + r dil_h (and the same along w): a GEMM of
// M = K/G output channels by N = R x S x C/G columns over a reduction of every output pixel,
// whose operand B is an im2col of the input. Each tile of TP x TQ output pixels stages dy's KC
// channels (the grid y slice's, cp.async, zeros past the output and the group) and the input
// rows and columns the tile reaches, in two stages: the next tile's dy copies are in flight under
// this tile's products. With 1 to 4 channels a group no copy fetches a pixel whole (2 to 8
// bytes): the inputs are staged element by element after the products, but for a first batch
// that waits in registers, and a lane builds its B fragments with one 16-bit load an element
// (the pixel's address plus the column's byte offset). With a multiple of 8 the inputs come by
// 16-byte copies beside dy's and B by ldmatrix.trans (copy mode). A (dy^T) comes from
// ldmatrix.trans. A warp owns the block's KC channels by NT column tiles of 8
// (WN warps along the columns) and every WP-th 16-pixel step of a tile (WP warps along the
// pixels); a block walks `tiles_per_split` tiles (grid x: the splits), adds its WP warps' sums
// in shared memory and stores those in its split's fp32 slice of the workspace (laid out as dw,
// no atomics, nothing to zero first); stem_bwd_weight_sum adds the slices up after.
//
// Macros: MT (16-channel tiles a warp: KC = 16 MT), NT (8-column tiles a warp), WN and WP
// (warps along the columns and the pixels), TP and TQ (a tile's output rows and columns, TQ a
// power of two, TP x TQ a multiple of 16).
#include "../mma_sync.cuh"

#ifndef MT
#define MT 4
#endif
#ifndef NT
#define NT 5
#endif
#ifndef WN
#define WN 4
#endif
#ifndef WP
#define WP 2
#endif
#ifndef TP
#define TP 4
#endif
#ifndef TQ
#define TQ 32
#endif
#define THREADS (32 * WN * WP)
#define NWARPS (WN * WP)
#define MIN_BLOCKS (THREADS == 128 ? 3 : 1)  // 128 threads: at most 170 registers, 12 warps
// A lane's loads of the staged input at a time: X_ROWS rows by X_PIECES pieces of 32 elements;
// with X_PREFETCH the next tile's first batch waits in registers under this tile's products
// (not where the accumulators leave too few registers for it)
#define X_PREFETCH (MT * NT < 12)
#define X_ROWS (X_PREFETCH ? 2 : 4)
#define X_PIECES 4
#define TILE_PIX (TP * TQ)
#define STEPS (TILE_PIX / 16)  // 16-pixel steps of a tile
#define KC (16 * MT)           // output channels a block
#define COLS (8 * NT * WN)     // columns (r, s, c) a block
#define DY_PITCH (KC + 8)      // a staged dy row, 16-bit: 16 bytes past KC, ldmatrix conflict-free

// The staged input tile: xh rows of xrow 16-bit elements (XW columns of C/G channels) from input
// row ih0 and column iw0 on, zeros outside the image, element (row, e) at xs[row * xrow + e].
// Warp w stages rows w, w + NWARPS, ...: a batch is X_ROWS of its rows by X_PIECES pieces of 32
// consecutive elements a row, a lane's X_ROWS x X_PIECES loads in flight together.
struct XTile {
  int xh, xrow, n, g, ih0, iw0;
};

// The batch from row0 and element e0 (this lane's first), zeros outside the image and the tile.
__device__ __forceinline__ void load_batch(u16 (&v)[X_ROWS][X_PIECES], const XTile& t,
                                           const elem_t* __restrict__ x, const ConvParams& p,
                                           int row0, int e0) {
  const u16* xu = reinterpret_cast<const u16*>(x);
#pragma unroll
  for (int r = 0; r < X_ROWS; ++r) {
    const int row = row0 + r * NWARPS, ih = t.ih0 + row;
    const bool row_in = row < t.xh && (unsigned)ih < (unsigned)p.H;
    const long at = ((long)t.n * p.H + (row_in ? ih : 0)) * p.W;
#pragma unroll
    for (int u = 0; u < X_PIECES; ++u) {
      const int e = e0 + 32 * u;
      if (p.G == 1) {  // a row's elements are contiguous in memory: XW pixels of C channels
        const int col = t.iw0 * p.C + e;
        v[r][u] = row_in && e < t.xrow && (unsigned)col < (unsigned)(p.W * p.C)
                      ? xu[at * p.C + col] : (u16)0;
      } else {  // a pixel's C/G channels of group g, C apart from the next pixel's
        const int px = e / p.Cg, iw = t.iw0 + px;
        v[r][u] = row_in && e < t.xrow && (unsigned)iw < (unsigned)p.W
                      ? xu[(at + iw) * p.C + t.g * p.Cg + (e - px * p.Cg)] : (u16)0;
      }
    }
  }
}

__device__ __forceinline__ void store_batch(u16* xs, const u16 (&v)[X_ROWS][X_PIECES],
                                            const XTile& t, int row0, int e0) {
#pragma unroll
  for (int r = 0; r < X_ROWS; ++r)
#pragma unroll
    for (int u = 0; u < X_PIECES; ++u) {
      const int row = row0 + r * NWARPS, e = e0 + 32 * u;
      if (row < t.xh && e < t.xrow) xs[row * t.xrow + e] = v[r][u];
    }
}

// The tile's batches after the first `skip` (1: the first is in registers already).
__device__ __forceinline__ void stage_x(u16* xs, u16 (&v)[X_ROWS][X_PIECES], const XTile& t,
                                        const elem_t* __restrict__ x, const ConvParams& p,
                                        int warp, int lane, int skip) {
  int batch = 0;
  for (int row0 = warp; row0 < t.xh; row0 += X_ROWS * NWARPS)
    for (int e0 = lane; e0 < t.xrow + lane; e0 += 32 * X_PIECES, ++batch) {
      if (batch < skip) continue;
      load_batch(v, t, x, p, row0, e0);
      store_batch(xs, v, t, row0, e0);
    }
}

// dy's tile: TILE_PIX pixels' KC channels from k0 of group g (zeros past the output and the
// group), 16 bytes a copy (the caller commits).
__device__ __forceinline__ void load_dy(u16* dys, const elem_t* __restrict__ dy,
                                        const ConvParams& p, int n, int oh0, int ow0, int g,
                                        int k0) {
  for (int i = threadIdx.x; i < TILE_PIX * (KC / 8); i += THREADS) {
    const int ch = i % (KC / 8), pix = i / (KC / 8);
    const int oh = oh0 + pix / TQ, ow = ow0 + pix % TQ, k = k0 + ch * 8;
    const bool ok = oh < p.P && ow < p.Q && k < p.Kg;
    const elem_t* src = ok ? dy + (((long)n * p.P + oh) * p.Q + ow) * p.K + g * p.Kg + k : dy;
    cp_async16(dys + pix * DY_PITCH + ch * 8, src, ok);
  }
}

// A staged input pixel's 16-bit elements: its C/G channels, and where they are a multiple of 8
// (copied), 8 more where that makes an even number of 16-byte pieces: ldmatrix's 8 rows (pixels
// at stride 1) then fall in distinct banks.
__device__ __forceinline__ int pixel_pitch(int cg) {
  return cg % 8 || (cg / 8) % 2 ? cg : cg + 8;
}

// Copy mode: where a thread's 16-byte copies of the input tile fall, as (row, column, piece)
// of the tile: its first (from threadIdx.x) and how far THREADS copies on move, so that a tile's
// copies need no division.
struct CopyWalk {
  int row, col, piece;     // this thread's first copy
  int drow, dcol, dpiece;  // THREADS copies on
  int cols, pieces, total;
};

__device__ __forceinline__ CopyWalk copy_walk(int xh, int cols, int pieces) {
  const int per_row = cols * pieces;
  const int i = threadIdx.x, d = THREADS;
  return {i / per_row, i / pieces % cols, i % pieces, d / per_row, d / pieces % cols,
          d % pieces, cols, pieces, xh * per_row};
}

// The whole input tile by 16-byte copies, where C/G is a multiple of 8 (a pixel's channels of
// the group are whole 16-byte pieces): the caller commits.
__device__ __forceinline__ void copy_x(u16* xs, const XTile& t, const CopyWalk& w,
                                       const elem_t* __restrict__ x, const ConvParams& p) {
  const int pitch = pixel_pitch(p.Cg);
  const elem_t* image = x + (long)t.n * p.H * p.W * p.C + t.g * p.Cg;
  int row = w.row, col = w.col, piece = w.piece;
  for (int i = threadIdx.x; i < w.total; i += THREADS) {
    const int ih = t.ih0 + row, iw = t.iw0 + col;
    const bool ok = (unsigned)ih < (unsigned)p.H && (unsigned)iw < (unsigned)p.W;
    const elem_t* src = ok ? image + (ih * p.W + iw) * p.C + piece * 8 : x;
    cp_async16(xs + row * t.xrow + col * pitch + piece * 8, src, ok);
    piece += w.dpiece;  // the next copy: THREADS on, one carry a digit at most
    col += w.dcol;
    row += w.drow;
    if (piece >= w.pieces) piece -= w.pieces, ++col;
    if (col >= w.cols) col -= w.cols, ++row;
  }
}

// One 16-pixel step's products of the warp's n tiles (with SOME, its first `live` only): B's
// 16-bit pairs gathered at each pixel's staged input plus the column's offset (bytes), times
// the MT A fragments.
template <bool SOME>
__device__ __forceinline__ void products(float (&acc)[MT][NT][4], const u32 (&a)[MT][4],
                                         const char* const (&px)[4], const int (&off)[NT],
                                         int live) {
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    if (!SOME || j < live) {
      const u32 b0 = (u32)*reinterpret_cast<const u16*>(px[0] + off[j]) |
                     ((u32)*reinterpret_cast<const u16*>(px[1] + off[j]) << 16);
      const u32 b1 = (u32)*reinterpret_cast<const u16*>(px[2] + off[j]) |
                     ((u32)*reinterpret_cast<const u16*>(px[3] + off[j]) << 16);
#pragma unroll
      for (int m = 0; m < MT; ++m) mma16816(acc[m][j], a[m], b0, b1);
    }
  }
}

// Two 8x8 matrices transposed (lanes 0-15 give the rows' addresses).
__device__ __forceinline__ void ldmatrix_x2_trans(u32 (&r)[2], const u16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}

// The same step where C/G is a multiple of 8 (an n tile is 8 channels of one filter tap, 16
// bytes at each pixel's staged input): B by ldmatrix.trans, pixels as rows, two n tiles a
// load. Lane l gives row l % 8 of pixels (l / 8 % 2) x 8 on of n tile j + l / 16: `row` is that
// pixel's staged input and off[j] that tile's first column (bytes).
template <bool SOME>
__device__ __forceinline__ void products_copied(float (&acc)[MT][NT][4], const u32 (&a)[MT][4],
                                                const char* row, const int (&off)[NT],
                                                int live) {
#pragma unroll
  for (int j = 0; j < NT; j += 2) {
    if (j + 1 < NT && (!SOME || j + 1 < live)) {
      u32 b[4];
      ldmatrix_x4_trans(b, reinterpret_cast<const u16*>(row + off[j]));
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        mma16816(acc[m][j], a[m], b[0], b[1]);
        mma16816(acc[m][j + 1], a[m], b[2], b[3]);
      }
    } else if (!SOME || j < live) {
      u32 b[2];
      ldmatrix_x2_trans(b, reinterpret_cast<const u16*>(row + off[j]));
#pragma unroll
      for (int m = 0; m < MT; ++m) mma16816(acc[m][j], a[m], b[0], b[1]);
    }
  }
}

// The first output pixel of a tile: tiles run along the output's columns, rows, then images.
__device__ __forceinline__ void tile_origin(const ConvParams& p, int tile, int& n, int& oh0,
                                            int& ow0) {
  const int tiles_q = (p.Q + TQ - 1) / TQ, tiles_p = (p.P + TP - 1) / TP;
  ow0 = tile % tiles_q * TQ;
  oh0 = tile / tiles_q % tiles_p * TP;
  n = tile / (tiles_q * tiles_p);
}

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
stem_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                float* __restrict__ ws, ConvParams p, int tiles_per_split) {
  extern __shared__ __align__(16) u16 smem[];
  const int g = blockIdx.z, kchunks = (p.Kg + KC - 1) / KC;
  const int k0 = (blockIdx.y % kchunks) * KC, col0 = (blockIdx.y / kchunks) * COLS;
  const int rsc = p.R * p.S * p.Cg;
  const int xh = (TP - 1) * p.stride_h + (p.R - 1) * p.dil_h + 1;
  const int xpix = pixel_pitch(p.Cg);
  const int xrow = ((TQ - 1) * p.stride_w + (p.S - 1) * p.dil_w + 1) * xpix;
  const int x_u16 = (xh * xrow + 7) / 8 * 8;
  const bool copies = p.Cg % 8 == 0;  // the input tile by 16-byte copies beside dy's
  const CopyWalk walk = copy_walk(xh, xrow / xpix, copies ? p.Cg / 8 : 1);
  u16* dys = smem;                         // two stages of [TILE_PIX][DY_PITCH]
  u16* xs = smem + 2 * TILE_PIX * DY_PITCH;  // two stages of x_u16
  const int tiles = p.N * ((p.P + TP - 1) / TP) * ((p.Q + TQ - 1) / TQ);
  const int first = blockIdx.x * tiles_per_split, last = min(tiles, first + tiles_per_split);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wn = warp % WN, wp = warp / WN;

  // this lane's column of each of its n tiles, as a byte offset from a pixel's staged input
  // (copies: the first column of tile j, or of j + 1 for lanes 16 to 31, products_copied's)
  int off[NT];
  int live = 0;  // the warp's n tiles with a column of dw
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    const int tile0 = col0 + (wn * NT + j) * 8;
    const int col = copies ? tile0 + (lane >> 4) * 8 : tile0 + (lane >> 2);
    live += tile0 < rsc;
    const int c = col % p.Cg, rs = col / p.Cg, r = rs / p.S, s = rs % p.S;
    off[j] = col < rsc ? 2 * (r * p.dil_h * xrow + (s * p.dil_w) * xpix + c) : 0;
  }
  float acc[MT][NT][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
  // A: dy^T's 16 x 16 fragments from [pixel][channel] rows (a0..a3: channels 0-7 / 8-15 by
  // pixels 0-7 / 8-15); B: the pixels 2t, 2t + 1, 2t + 8, 2t + 9 of a step, column lane / 4
  const int a_pix = (lane & 7) + (lane >> 4) * 8, a_k = ((lane >> 3) & 1) * 8;
  const int t2 = (lane & 3) * 2;

  u16 v[X_ROWS][X_PIECES];
  if (first < last) {  // the first tile, staged before the loop
    int n, oh0, ow0;
    tile_origin(p, first, n, oh0, ow0);
    load_dy(dys, dy, p, n, oh0, ow0, g, k0);
    const XTile t = {xh, xrow, n, g, oh0 * p.stride_h - p.pad_h, ow0 * p.stride_w - p.pad_w};
    if (copies) copy_x(xs, t, walk, x, p);
    cp_async_commit();
    if (!copies) stage_x(xs, v, t, x, p, warp, lane, 0);
  }
  for (int tile = first; tile < last; ++tile) {
    // the next tile's dy by cp.async and (X_PREFETCH) the first batch of its inputs under this
    // tile's products; the rest of its inputs after them, into the other stage
    const int stage = (tile - first) & 1;
    const bool next = tile + 1 < last;
    XTile t = {xh, xrow, 0, g, 0, 0};
    if (next) {
      int oh0, ow0;
      tile_origin(p, tile + 1, t.n, oh0, ow0);
      load_dy(dys + (stage ^ 1) * TILE_PIX * DY_PITCH, dy, p, t.n, oh0, ow0, g, k0);
      t.ih0 = oh0 * p.stride_h - p.pad_h;
      t.iw0 = ow0 * p.stride_w - p.pad_w;
      if (copies) copy_x(xs + (stage ^ 1) * x_u16, t, walk, x, p);
      else if (X_PREFETCH) load_batch(v, t, x, p, warp, lane);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const u16* db = dys + stage * TILE_PIX * DY_PITCH;
    const u16* xb = xs + stage * x_u16;
#pragma unroll 1
    for (int step = wp; step < STEPS; step += WP) {
      u32 a[MT][4];
#pragma unroll
      for (int m = 0; m < MT; ++m)
        ldmatrix_x4_trans(a[m], db + (step * 16 + a_pix) * DY_PITCH + m * 16 + a_k);
      if (copies) {  // this lane's ldmatrix row: pixel l % 8 + (l / 8 % 2) x 8 of the step
        const int pix = step * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        const char* row = reinterpret_cast<const char*>(xb) +
                          2 * ((pix / TQ) * p.stride_h * xrow + (pix % TQ) * p.stride_w * xpix);
        if (live == NT)
          products_copied<false>(acc, a, row, off, NT);
        else
          products_copied<true>(acc, a, row, off, live);
        continue;
      }
      const char* px[4];  // the step's pixels 2t, 2t + 1, 2t + 8, 2t + 9 in the staged input
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int pix = step * 16 + t2 + (e & 1) + (e >> 1) * 8;
        px[e] = reinterpret_cast<const char*>(xb) +
                2 * ((pix / TQ) * p.stride_h * xrow + (pix % TQ) * p.stride_w * xpix);
      }
      if (live == NT)  // every n tile of the warp has columns of dw: no test a tile
        products<false>(acc, a, px, off, NT);
      else
        products<true>(acc, a, px, off, live);
    }
    if (next && !copies) {
      u16* xn = xs + (stage ^ 1) * x_u16;
      if (X_PREFETCH) store_batch(xn, v, t, warp, lane);
      stage_x(xn, v, t, x, p, warp, lane, X_PREFETCH);
    }
    __syncthreads();
  }

  // the WP warps of a column range add up in shared memory ([KC][COLS] floats), then the
  // block adds its sums to the workspace, consecutive threads at consecutive columns
  float* sums = reinterpret_cast<float*>(smem);
#pragma unroll 1
  for (int q = 0; q < WP; ++q) {
    if (wp == q) {
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int row = m * 16 + (lane >> 2) + (e >> 1) * 8;
            const int col = (wn * NT + j) * 8 + t2 + (e & 1);
            float& at = sums[row * COLS + col];
            at = q == 0 ? acc[m][j][e] : at + acc[m][j][e];
          }
    }
    __syncthreads();
  }
  float* slice = ws + (long)blockIdx.x * p.K * rsc;  // this split's, laid out as dw
  for (int i = threadIdx.x; i < KC * COLS; i += THREADS) {
    const int k = k0 + i / COLS, col = col0 + i % COLS;
    if (k < p.Kg && col < rsc) slice[(long)(g * p.Kg + k) * rsc + col] = sums[i];
  }
}

// dw = the splits' slices added up, converted. A block takes 32 consecutive entries at a time;
// its warp w adds slices w, w + 8, ... (each warp's loads coalesced, eight sums in flight an
// entry) and warp 0 the eight partial sums.
extern "C" __global__ void __launch_bounds__(256)
stem_bwd_weight_sum(const float* __restrict__ ws, elem_t* __restrict__ dw, int n, int splits) {
  __shared__ float partial[8][33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int first = blockIdx.x * 32; first < n; first += gridDim.x * 32) {
    const int i = first + lane;
    float total = 0.0f;
    if (i < n)
      for (int k = warp; k < splits; k += 8) total += ws[(long)k * n + i];
    partial[warp][lane] = total;
    __syncthreads();
    if (warp == 0 && i < n) {
#pragma unroll
      for (int w = 1; w < 8; ++w) total += partial[w][lane];
      dw[i] = from_float(total);
    }
    __syncthreads();
  }
}
