// conv_grouped_taps: grouped convolution, forward (GT_OP 0) and stride-1 backward-data
// (GT_OP 1), as block-diagonal GEMMs over an input tile staged in shared memory (NVIDIA
// mma.sync m16n8k16, fp32 sums), with the filter size FR x FR and the stride fixed at compile
// time and dilation 1. Backward-data is the correlation of dy with the filter flipped and
// transposed per group, padded by FR - 1 - pad.
//
// The scheme is conv_grouped_mma's (super-groups of WIDTH channels, a block owning SG of them
// and walking output tiles of TILE_H x TILE_W pixels, every tap an address offset into the
// staged tile), with what its profile showed to cost: there the taps' loops and offsets, the
// staging walk and the stride's column phases are computed at run time for every tile and
// every tap, and integer work issues several instructions per matrix instruction. Here every
// tap is unrolled with its offset a constant, each fragment's pixel offsets are computed once a
// block, a tile's copy walks a fixed count of 16-byte chunks with constant divisors, and
// STAGES (1 to 3) tiles are in flight.
// Staged pixels are PITCH 16-byte chunks apart (odd: the eight rows of an ldmatrix land in
// distinct banks); with stride 2, even and odd input columns are staged apart, so neighbouring
// outputs read neighbouring slots.
#include "../mma_sync.cuh"

#ifndef GT_OP
#define GT_OP 0
#endif
#ifndef TILE_H
#define TILE_H 8
#endif
#ifndef TILE_W
#define TILE_W 8
#endif
#ifndef WIDTH
#define WIDTH 16
#endif
#ifndef SG
#define SG 4
#endif
#ifndef WARPS_M
#define WARPS_M 2
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef FR
#define FR 3
#endif
#ifndef STRIDE
#define STRIDE 1
#endif
#ifndef MIN_BLOCKS  // resident blocks a multiprocessor (grouped_taps.py's resident_blocks)
#define MIN_BLOCKS 1
#endif

#define WN (WIDTH < 32 ? WIDTH : 32)  // a warp's output columns
#define NSPLIT (WIDTH / WN)
#define NJ (WN / 8)
#define TILE_PIX (TILE_H * TILE_W)
#define MI (TILE_PIX / 16 / WARPS_M)
#define THREADS (32 * SG * NSPLIT * WARPS_M)
#define SLAB (SG * WIDTH)
#define CHUNKS (SLAB / 8)         // 16-byte chunks of a staged pixel
#define PITCH (CHUNKS + 1)        // chunks from one staged pixel to the next
#define B_PITCH (WIDTH + 8)       // u16 from one weight row (an output) to the next
#define O_PITCH (SLAB + 8)        // u16 from one staged output pixel to the next
#define ROWS ((TILE_H - 1) * STRIDE + FR)  // staged input rows of a tile
#define COLS ((TILE_W - 1) * STRIDE + FR)  // and columns
#define PHASE_COLS ((COLS + STRIDE - 1) / STRIDE)  // staged columns of one column phase
#define ROW_SLOTS (STRIDE * PHASE_COLS)            // pixel slots of a staged row
#define STAGE_U16 (ROWS * ROW_SLOTS * PITCH * 8)
#define TAPS (FR * FR)

#if GT_OP == 0  // the tensor read (x) and written (y)
#define IN_H p.H
#define IN_W p.W
#define IN_C p.C
#define OUT_H p.P
#define OUT_W p.Q
#define OUT_C p.K
#define PAD_H p.pad_h
#define PAD_W p.pad_w
#else  // dy read, dx written
#define IN_H p.P
#define IN_W p.Q
#define IN_C p.K
#define OUT_H p.H
#define OUT_W p.W
#define OUT_C p.C
#define PAD_H (FR - 1 - p.pad_h)
#define PAD_W (FR - 1 - p.pad_w)
#endif

#if (GT_OP == 1 && STRIDE != 1) || TILE_PIX % (16 * WARPS_M) || THREADS % CHUNKS || \
    TILE_W % 8 || WIDTH % 16 || STAGES < 1 || STAGES > 3
#error "conv_grouped_taps: TILE_H x TILE_W must split into 16-pixel fragments a warp, rows of 8"
#endif

// Shared memory: the slab's block-diagonal tap matrices (zero off the groups' blocks), then
// STAGES staged tiles, then the output tile. Each filter row w[g][k][tap][0..Cg) lands as it
// lies in row k of its super-group's tap matrix: the forward's matrix [output][reduction], read
// by ldmatrix; backward-data's (the tap flipped) [reduction][output], read by ldmatrix.trans.
#if GT_OP == 0
#define MATRIX_TAP(tap) (tap)
#define B_STEP_N (16 * B_PITCH)  // u16 from one 16-column block of B to the next
#define B_STEP_K 16              // and from one 16-deep step of the reduction to the next
#else
#define MATRIX_TAP(tap) (TAPS - 1 - (tap))
#define B_STEP_N 16
#define B_STEP_K (16 * B_PITCH)
#endif
__device__ __forceinline__ void load_weights(u16* ws, const elem_t* __restrict__ w,
                                             const ConvParams& p, int slab) {
  const int cg = p.Cg, groups_per = WIDTH / cg;
  constexpr int words = SG * TAPS * WIDTH * B_PITCH / 8;
  for (int i = threadIdx.x; i < words; i += THREADS)
    reinterpret_cast<uint4*>(ws)[i] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
  for (int row = threadIdx.x; row < SG * TAPS * WIDTH; row += THREADS) {
    const int j = row % WIDTH, tap = (row / WIDTH) % TAPS, sg = row / (WIDTH * TAPS);
    const int gl = j / cg, a = j - gl * cg, g = (slab * SG + sg) * groups_per + gl;
    if (g >= p.G) continue;
    const elem_t* src = w + ((size_t)(g * cg + a) * TAPS + tap) * cg;
    u16* m = ws + (sg * TAPS + MATRIX_TAP(tap)) * WIDTH * B_PITCH + j * B_PITCH + gl * cg;
    for (int c = 0; c < cg; ++c) m[c] = reinterpret_cast<const u16*>(src)[c];
  }
}

// Cg a multiple of 8: each 16-byte chunk of a tap matrix's row is 8 input channels
// of the row's group or zeros, so cp.async copies or zero-fills every chunk, with no barrier,
// into the first tile's group of copies.
__device__ __forceinline__ void copy_weights(u16* ws, const elem_t* __restrict__ w,
                                             const ConvParams& p, int slab) {
  const int cg = p.Cg, groups_per = WIDTH / cg;
  constexpr int chunks = WIDTH / 8;  // of a row
  for (int i = threadIdx.x; i < SG * TAPS * WIDTH * chunks; i += THREADS) {
    const int q = i % chunks, row = i / chunks;
    const int tap = row % TAPS, j = (row / TAPS) % WIDTH, sg = row / (TAPS * WIDTH);
    const int gl = j / cg, a = j - gl * cg, g = (slab * SG + sg) * groups_per + gl;
    const int c = q * 8 - gl * cg;  // the chunk's first input channel within the group
    const bool ok = g < p.G && c >= 0 && c < cg;
    const elem_t* src = ok ? w + ((size_t)(g * cg + a) * TAPS + tap) * cg + c : w;
    cp_async16(ws + ((sg * TAPS + MATRIX_TAP(tap)) * WIDTH + j) * B_PITCH + q * 8, src, ok);
  }
}

__device__ __forceinline__ void tile_origin(const ConvParams& p, int tile, int& n, int& i0,
                                            int& j0) {
  const int th = (OUT_H + TILE_H - 1) / TILE_H, tw = (OUT_W + TILE_W - 1) / TILE_W;
  n = tile / (th * tw);
  const int rest = tile - n * th * tw;
  i0 = (rest / tw) * TILE_H;
  j0 = (rest % tw) * TILE_W;
}

// A tile's haloed input, SLAB channels a pixel, by cp.async (zero outside the image): a thread
// copies one chunk (THREADS is a multiple of CHUNKS) of every THREADS / CHUNKS-th pixel.
__device__ __forceinline__ void load_tile(u16* buf, const elem_t* __restrict__ x,
                                          const ConvParams& p, int tile, int slab) {
  int n, i0, j0;
  tile_origin(p, tile, n, i0, j0);
  const int h0 = i0 * STRIDE - PAD_H, w0 = j0 * STRIDE - PAD_W, c0 = slab * SLAB;
  const elem_t* image = x + (size_t)n * IN_H * IN_W * IN_C;
  const int ch = threadIdx.x % CHUNKS, c = c0 + ch * 8;
  const bool c_ok = c < IN_C;
  image += c;
#pragma unroll 4
  for (int pix = threadIdx.x / CHUNKS; pix < ROWS * COLS; pix += THREADS / CHUNKS) {
    const int row = pix / COLS, col = pix - row * COLS;
    const int h = h0 + row, wc = w0 + col;
    const bool ok = c_ok && (unsigned)h < (unsigned)IN_H && (unsigned)wc < (unsigned)IN_W;
    const elem_t* src = ok ? image + ((size_t)h * IN_W + wc) * IN_C : x;
    const int slot = row * ROW_SLOTS + (col % STRIDE) * PHASE_COLS + col / STRIDE;
    cp_async16(buf + (slot * PITCH + ch) * 8, src, ok);
  }
  cp_async_commit();
}

// One warp's fragments over every tap: the fragments' pixel slots `base` (a block's
// constants), each tap a constant slot offset.
__device__ __forceinline__ void compute_tile(float (&acc)[MI][NJ][4], const u16* buf,
                                             const u16* wt0, const int (&base)[MI],
                                             int a_chunk) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
#pragma unroll(FR > 3 ? 1 : FR)  // 5x5: a row's taps unrolled (the whole filter spills)
  for (int r = 0; r < FR; ++r) {
#pragma unroll
    for (int s = 0; s < FR; ++s) {
      const int tap_slot = r * ROW_SLOTS + (s % STRIDE) * PHASE_COLS + s / STRIDE;
      const u16* wt = wt0 + (r * FR + s) * WIDTH * B_PITCH;
#pragma unroll
      for (int ks = 0; ks < WIDTH / 16; ++ks) {
        u32 b[NJ / 2][4];
#pragma unroll
        for (int nb = 0; nb < NJ / 2; ++nb) {
#if GT_OP == 0
          ldmatrix_x4(b[nb], wt + nb * B_STEP_N + ks * B_STEP_K);
#else
          ldmatrix_x4_trans(b[nb], wt + nb * B_STEP_N + ks * B_STEP_K);
#endif
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          u32 a[4];
          ldmatrix_x4(a, buf + ((base[mi] + tap_slot) * PITCH + a_chunk + ks * 2) * 8);
#pragma unroll
          for (int nj = 0; nj < NJ; ++nj)
            mma16816(acc[mi][nj], a, b[nj / 2][(nj & 1) * 2], b[nj / 2][(nj & 1) * 2 + 1]);
        }
      }
    }
  }
}

// x and y: the tensors read and written (dy and dx in backward-data)
__device__ __forceinline__ void run(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                                    elem_t* __restrict__ y, const ConvParams& p) {
  extern __shared__ __align__(16) u16 smem[];
  const int slab = blockIdx.y;
  u16* ws = smem;
  u16* bufs = ws + SG * TAPS * WIDTH * B_PITCH;
  u16* os = bufs + STAGES * STAGE_U16;
  const int tiles = p.N * ((OUT_H + TILE_H - 1) / TILE_H) * ((OUT_W + TILE_W - 1) / TILE_W);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp % WARPS_M, ns = (warp / WARPS_M) % NSPLIT, sg = warp / (WARPS_M * NSPLIT);
  // the weights in the first group of copies where Cg allows; the first STAGES - 1 tiles'
  // copies (one group each, empty past the last tile)
  const bool copied = p.Cg % 8 == 0;
  if (copied) copy_weights(ws, w, p, slab);
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    const int tile = blockIdx.x + k * gridDim.x;
    if (tile < tiles) {
      load_tile(bufs + k * STAGE_U16, x, p, tile, slab);
    } else {
      cp_async_commit();
    }
  }
  if (!copied) load_weights(ws, w, p, slab);  // under the first tiles' copies
  int base[MI];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int pix = (wm * MI + mi) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    base[mi] = (pix / TILE_W) * STRIDE * ROW_SLOTS + pix % TILE_W;
  }
  const int a_chunk = sg * (WIDTH / 8) + (lane >> 4);
  // a lane's row of B's four 8x8 matrices: outputs (n) 0-7, 0-7, 8-15, 8-15 by reduction (k)
  // 0-7, 8-15, 0-7, 8-15; rows are outputs in the forward's matrices, reductions in the other's
  const int b_n = ns * WN + (lane >> 4) * 8, b_k = ((lane >> 3) & 1) * 8;
#if GT_OP == 0
  const u16* wt0 = ws + (sg * TAPS * WIDTH + b_n + (lane & 7)) * B_PITCH + b_k;
#else
  const u16* wt0 = ws + (sg * TAPS * WIDTH + b_k + (lane & 7)) * B_PITCH + b_n;
#endif
  int stage = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if (STAGES > 1) {
      const int next = tile + (STAGES - 1) * gridDim.x;
      const int into = stage + STAGES - 1 >= STAGES ? stage - 1 : stage + STAGES - 1;
      if (next < tiles) {
        load_tile(bufs + into * STAGE_U16, x, p, next, slab);
      } else {
        cp_async_commit();
      }
      cp_async_wait<STAGES - 1>();
    } else {
      load_tile(bufs, x, p, tile, slab);
      cp_async_wait<0>();
    }
    __syncthreads();
    float acc[MI][NJ][4];
    compute_tile(acc, bufs + stage * STAGE_U16, wt0, base, a_chunk);
#pragma unroll
    for (int mi = 0; mi < MI; ++mi) {
      const int row = (wm * MI + mi) * 16 + (lane >> 2);
#pragma unroll
      for (int nj = 0; nj < NJ; ++nj) {
        const int col = sg * WIDTH + ns * WN + nj * 8 + (lane & 3) * 2;
        *reinterpret_cast<u32*>(os + row * O_PITCH + col) =
            pack_pair(acc[mi][nj][0], acc[mi][nj][1]);
        *reinterpret_cast<u32*>(os + (row + 8) * O_PITCH + col) =
            pack_pair(acc[mi][nj][2], acc[mi][nj][3]);
      }
    }
    __syncthreads();
    int n, i0, j0;
    tile_origin(p, tile, n, i0, j0);
    const int c0 = slab * SLAB;
#pragma unroll 2
    for (int i = threadIdx.x; i < TILE_PIX * CHUNKS; i += THREADS) {
      const int ch = i % CHUNKS, pix = i / CHUNKS;
      const int oi = i0 + pix / TILE_W, oj = j0 + pix % TILE_W, c = c0 + ch * 8;
      if (oi < OUT_H && oj < OUT_W && c < OUT_C)
        *reinterpret_cast<uint4*>(y + (((size_t)n * OUT_H + oi) * OUT_W + oj) * OUT_C + c) =
            *reinterpret_cast<const uint4*>(os + pix * O_PITCH + ch * 8);
    }
    stage = stage + 1 == STAGES ? 0 : stage + 1;
  }
}

#if GT_OP == 0
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p) {
  run(x, w, y, p);
}
#else
extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p) {
  run(dy, w, dx, p);
}
#endif
