// conv_grouped_mma: grouped convolution, forward and backward-data, as block-diagonal GEMMs
// over an input tile staged once in shared memory (NVIDIA mma.sync m16n8k16, fp32 sums).
//
// Groups are packed into super-groups of WIDTH channels (WIDTH / Cg groups each, C/G == K/G):
// a super-group's filter tap is one dense WIDTH x WIDTH matrix, zero off its diagonal blocks,
// so groups of 1 to 16 channels fill the matrix instructions' k of 16. A block owns a slab of
// SG super-groups (SLAB channels, contiguous in channels-last memory) and walks output tiles of
// TILE_H x TILE_W pixels of one image (persistent: tile blockIdx.x, then every gridDim.x-th):
//  - the slab's filter, expanded to the block-diagonal matrices of every tap, is copied into
//    shared memory once;
//  - a tile's haloed input (every pixel its taps read, SLAB channels each) is copied by
//    cp.async, zero-filled outside the image, into one of STAGES buffers (two: the next tile's
//    copy runs under this tile's math);
//  - each warp computes MI 16-pixel fragments x WN outputs of one super-group: for every tap
//    and every 16 channels, ldmatrix reads the fragment's 16 pixels at the tap's offset (any
//    stride and dilation: only the address changes) and the tap's weights;
//  - results go through shared memory to 16-byte stores of whole pixels.
// Staged pixels are PITCH 16-byte chunks apart (odd: the eight rows of an ldmatrix land in
// distinct banks); with a stride along the row, even and odd input columns are staged apart,
// so neighbouring outputs read neighbouring slots again.
// Backward-data (GMMA_OP 1) is the same correlation of dy with the filter's taps transposed
// per group; with a stride it runs one grid.z slice per residue class of dx's rows and
// columns, each a unit-stride correlation with the taps that reach it.
#include "../mma_sync.cuh"

#ifndef GMMA_OP
#define GMMA_OP 0
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

#define WN (WIDTH < 32 ? WIDTH : 32)  // a warp's output columns
#define NSPLIT (WIDTH / WN)
#define NJ (WN / 8)
#define TILE_PIX (TILE_H * TILE_W)
#define MI (TILE_PIX / 16 / WARPS_M)
#ifndef THREADS  // backward-weight (grouped_mma_bwd_weight.cu) lays its warps out otherwise
#define THREADS (32 * SG * NSPLIT * WARPS_M)
#endif
#define SLAB (SG * WIDTH)
#define CHUNKS (SLAB / 8)         // 16-byte chunks of a staged pixel
#define PITCH (CHUNKS + 1)        // chunks from one staged pixel to the next
#define B_PITCH (WIDTH + 8)       // u16 from one weight row (an output) to the next
#define O_PITCH (SLAB + 8)        // u16 from one staged output pixel to the next

#if TILE_PIX % (16 * WARPS_M) || TILE_W % 8 || WIDTH % 16
#error "conv_grouped_mma: TILE_H x TILE_W must split into 16-pixel fragments a warp, rows of 8"
#endif

// The correlation one grid.z slice computes: out[i][j] = sum over taps of in[origin + i * step
// + tap offset] (tile-local), and where out pixel (i, j) of the slice lies in the output.
struct Slice {
  int in_h, in_w, in_c;     // the tensor read (x, or dy)
  int out_h, out_w, out_c;  // the slice's output grid and the written tensor's channels
  int step_h, step_w;       // input rows / columns from one output to the next
  int org_h, org_w;         // input row / column of tile (0, 0)'s first staged pixel, less
                            // the tile's own offset (i0 * step)
  int rows, cols;           // staged rows and columns of a tile
  int phase_cols;           // staged columns per column phase (cols / step_w, rounded up)
  int dst_h0, dst_w0, dst_sh, dst_sw, dst_h, dst_w;  // out (i, j) -> written pixel
  int tap_r0, tap_dr, tap_nr, tap_s0, tap_ds, tap_ns;  // the taps that reach the slice
  int off_r0, off_s0;       // staged row / column of the first tap's reading of pixel (0, 0)
  int off_dr, off_ds;       // and from one tap to the next
};

__device__ __forceinline__ int gcd_int(int a, int b) {
  while (b) {
    const int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

// The first tap of 0..taps-1 with (base - t * dil) divisible by stride, and the quotient.
__device__ __forceinline__ void first_reaching(int base, int dil, int stride, int taps,
                                               int& first, int& count, int& quotient) {
  first = -1;
  for (int t = 0; t < taps; ++t) {
    const int v = base - t * dil;
    if (((v % stride) + stride) % stride == 0) {
      first = t;
      break;
    }
  }
  if (first < 0) {
    count = 0;
    quotient = 0;
    return;
  }
  const int period = stride / gcd_int(dil, stride);
  count = (taps - first + period - 1) / period;
  const int v = base - first * dil;
  quotient = v >= 0 ? v / stride : -((-v) / stride);
}

__device__ __forceinline__ Slice make_slice(const ConvParams& p) {
  Slice s;
#if GMMA_OP != 1  // forward, and backward-weight's x
  s.in_h = p.H, s.in_w = p.W, s.in_c = p.C;
  s.out_h = p.P, s.out_w = p.Q, s.out_c = p.K;
  s.step_h = p.stride_h, s.step_w = p.stride_w;
  s.org_h = -p.pad_h, s.org_w = -p.pad_w;
  s.rows = (TILE_H - 1) * p.stride_h + (p.R - 1) * p.dil_h + 1;
  s.cols = (TILE_W - 1) * p.stride_w + (p.S - 1) * p.dil_w + 1;
  s.dst_h0 = 0, s.dst_w0 = 0, s.dst_sh = 1, s.dst_sw = 1, s.dst_h = p.P, s.dst_w = p.Q;
  s.tap_r0 = 0, s.tap_dr = 1, s.tap_nr = p.R, s.tap_s0 = 0, s.tap_ds = 1, s.tap_ns = p.S;
  s.off_r0 = 0, s.off_dr = p.dil_h, s.off_s0 = 0, s.off_ds = p.dil_w;
#else
  // Residue class (a, b): dx[a + sh * i] gathers dy[i + q(r)] over the taps r with
  // (a + pad - r * dil) % sh == 0, q(r) = (a + pad - r * dil) / sh; the taps that reach are
  // sh / gcd(dil, sh) apart, and q falls by dq from one to the next.
  const int a = blockIdx.z / p.stride_w, b = blockIdx.z % p.stride_w;
  int q0, c0;
  first_reaching(a + p.pad_h, p.dil_h, p.stride_h, p.R, s.tap_r0, s.tap_nr, q0);
  first_reaching(b + p.pad_w, p.dil_w, p.stride_w, p.S, s.tap_s0, s.tap_ns, c0);
  s.tap_dr = p.stride_h / gcd_int(p.dil_h, p.stride_h);
  s.tap_ds = p.stride_w / gcd_int(p.dil_w, p.stride_w);
  const int dq = s.tap_dr * p.dil_h / p.stride_h, dc = s.tap_ds * p.dil_w / p.stride_w;
  const int qmin = q0 - (s.tap_nr > 0 ? s.tap_nr - 1 : 0) * dq;
  const int cmin = c0 - (s.tap_ns > 0 ? s.tap_ns - 1 : 0) * dc;
  s.in_h = p.P, s.in_w = p.Q, s.in_c = p.K;
  s.out_h = (p.H - a + p.stride_h - 1) / p.stride_h;
  s.out_w = (p.W - b + p.stride_w - 1) / p.stride_w;
  s.out_c = p.C;
  s.step_h = 1, s.step_w = 1;
  s.org_h = qmin, s.org_w = cmin;
  s.rows = TILE_H + q0 - qmin, s.cols = TILE_W + c0 - cmin;
  s.dst_h0 = a, s.dst_w0 = b, s.dst_sh = p.stride_h, s.dst_sw = p.stride_w;
  s.dst_h = p.H, s.dst_w = p.W;
  s.off_r0 = q0 - qmin, s.off_dr = -dq, s.off_s0 = c0 - cmin, s.off_ds = -dc;
#endif
  s.phase_cols = (s.cols + s.step_w - 1) / s.step_w;
  return s;
}

// Shared memory: the slab's weights, STAGES input tiles of `stage_u16` each, the output tile.
// The weights: zeroed, then each thread copies whole filter rows, w[g][k][tap][0..Cg) (16
// bytes at a time where Cg allows), into the block-diagonal matrices (one row of one in
// forward, one column of one in backward-data, where the filter is read transposed).
__device__ __forceinline__ void load_weights(u16* ws, const elem_t* __restrict__ w,
                                             const ConvParams& p, int slab) {
  const int taps = p.R * p.S, cg = p.Cg, groups_per = WIDTH / cg;
  const int words = SG * taps * WIDTH * B_PITCH / 8;
  for (int i = threadIdx.x; i < words; i += THREADS)
    reinterpret_cast<uint4*>(ws)[i] = make_uint4(0u, 0u, 0u, 0u);
  __syncthreads();
  for (int row = threadIdx.x; row < SG * taps * WIDTH; row += THREADS) {
    const int j = row % WIDTH, tap = (row / WIDTH) % taps, sg = row / (WIDTH * taps);
    const int gl = j / cg, a = j - gl * cg, g = (slab * SG + sg) * groups_per + gl;
    if (g >= p.G) continue;
    const elem_t* src = w + ((size_t)(g * cg + a) * taps + tap) * cg;
    u16* m = ws + (sg * taps + tap) * WIDTH * B_PITCH;
    if (cg % 8 == 0) {
      for (int c = 0; c < cg; c += 8) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src + c));
#if GMMA_OP == 0
        *reinterpret_cast<uint4*>(m + j * B_PITCH + gl * cg + c) = v;
#else
        const u16* e = reinterpret_cast<const u16*>(&v);
#pragma unroll
        for (int q = 0; q < 8; ++q) m[(gl * cg + c + q) * B_PITCH + j] = e[q];
#endif
      }
    } else {
      for (int c = 0; c < cg; ++c) {
#if GMMA_OP == 0
        m[j * B_PITCH + gl * cg + c] = src[c];
#else
        m[(gl * cg + c) * B_PITCH + j] = src[c];
#endif
      }
    }
  }
}

__device__ __forceinline__ void tile_origin(const Slice& s, int tile, int& n, int& i0, int& j0) {
  const int th = (s.out_h + TILE_H - 1) / TILE_H, tw = (s.out_w + TILE_W - 1) / TILE_W;
  n = tile / (th * tw);
  const int rest = tile - n * th * tw;
  i0 = (rest / tw) * TILE_H;
  j0 = (rest % tw) * TILE_W;
}

// A thread's first staged chunk and its step (THREADS chunks further) as (row, column,
// chunk), so that copying a tile divides nothing.
struct TileWalk {
  int row, col, ch, drow, dcol;
};

__device__ __forceinline__ TileWalk tile_walk(const Slice& s) {
  const int pix = threadIdx.x / CHUNKS, step = THREADS / CHUNKS;
  return {pix / s.cols, pix % s.cols, threadIdx.x % CHUNKS, step / s.cols, step % s.cols};
}

__device__ __forceinline__ void load_tile(u16* buf, const elem_t* __restrict__ in, const Slice& s,
                                          TileWalk t, int tile, int slab) {
  int n, i0, j0;
  tile_origin(s, tile, n, i0, j0);
  const int h0 = i0 * s.step_h + s.org_h, w0 = j0 * s.step_w + s.org_w, c0 = slab * SLAB;
  const elem_t* image = in + (size_t)n * s.in_h * s.in_w * s.in_c;
  const int row_slots = s.step_w * s.phase_cols;
  for (; t.row < s.rows;) {
    const int h = h0 + t.row, wc = w0 + t.col, c = c0 + t.ch * 8;
    const bool ok = h >= 0 && h < s.in_h && wc >= 0 && wc < s.in_w && c < s.in_c;
    const elem_t* src = ok ? image + ((size_t)h * s.in_w + wc) * s.in_c + c : in;
    const int slot = s.step_w == 1 ? t.row * s.cols + t.col
                                   : t.row * row_slots + (t.col % s.step_w) * s.phase_cols +
                                         t.col / s.step_w;
    cp_async16(buf + (slot * PITCH + t.ch) * 8, src, ok);
    t.ch += THREADS % CHUNKS;
    const int carry = t.ch >= CHUNKS;
    t.ch -= carry * CHUNKS;
    t.col += t.dcol + carry;
    t.row += t.drow;
    if (t.col >= s.cols) {
      t.col -= s.cols;
      ++t.row;
    }
  }
  cp_async_commit();
}

// One warp's fragments over every tap that reaches the slice.
__device__ __forceinline__ void compute_tile(float (&acc)[MI][NJ][4], const u16* buf,
                                             const u16* ws, const Slice& s, const ConvParams& p,
                                             int sg, int ns, int wm, int lane) {
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int nj = 0; nj < NJ; ++nj)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[mi][nj][e] = 0.0f;
  const int row_slots = s.step_w * s.phase_cols;
  int base[MI];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    const int pix = (wm * MI + mi) * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    base[mi] = (pix / TILE_W) * s.step_h * row_slots + pix % TILE_W;
  }
  const int a_chunk = sg * (WIDTH / 8) + (lane >> 4);
  const int b_row = ns * WN + (lane >> 4) * 8 + (lane & 7), b_col = ((lane >> 3) & 1) * 8;
  const int taps = p.R * p.S;
  for (int tr = 0; tr < s.tap_nr; ++tr) {
    const int r = s.tap_r0 + tr * s.tap_dr, off_r = s.off_r0 + tr * s.off_dr;
    for (int ts = 0; ts < s.tap_ns; ++ts) {
      const int sc = s.tap_s0 + ts * s.tap_ds, off_s = s.off_s0 + ts * s.off_ds;
      const int tap_slot = off_r * row_slots + (off_s % s.step_w) * s.phase_cols +
                           off_s / s.step_w;
      const u16* wt = ws + ((sg * taps + r * p.S + sc) * WIDTH + b_row) * B_PITCH + b_col;
#pragma unroll
      for (int ks = 0; ks < WIDTH / 16; ++ks) {
        u32 b[NJ / 2][4];
#pragma unroll
        for (int nb = 0; nb < NJ / 2; ++nb) ldmatrix_x4(b[nb], wt + nb * 16 * B_PITCH + ks * 16);
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

__device__ __forceinline__ void run(const elem_t* __restrict__ in, const elem_t* __restrict__ w,
                                    elem_t* __restrict__ out, const ConvParams& p, int stage_u16) {
  extern __shared__ __align__(16) u16 smem[];
  const Slice s = make_slice(p);
  const int slab = blockIdx.y;
  u16* ws = smem;
  u16* bufs = ws + SG * p.R * p.S * WIDTH * B_PITCH;
  u16* os = bufs + STAGES * stage_u16;
  const int tiles = p.N * ((s.out_h + TILE_H - 1) / TILE_H) * ((s.out_w + TILE_W - 1) / TILE_W);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp % WARPS_M, ns = (warp / WARPS_M) % NSPLIT, sg = warp / (WARPS_M * NSPLIT);
  const TileWalk walk = tile_walk(s);
  int stage = 0;
  if (STAGES > 1 && blockIdx.x < tiles) load_tile(bufs, in, s, walk, blockIdx.x, slab);
  load_weights(ws, w, p, slab);  // under the first tile's copy
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    u16* buf = bufs + stage * stage_u16;
    if (STAGES > 1) {
      const int next = tile + gridDim.x;
      if (next < tiles) {
        load_tile(bufs + (stage ^ 1) * stage_u16, in, s, walk, next, slab);
      } else {
        cp_async_commit();
      }
      cp_async_wait<1>();
    } else {
      load_tile(buf, in, s, walk, tile, slab);
      cp_async_wait<0>();
    }
    __syncthreads();
    float acc[MI][NJ][4];
    compute_tile(acc, buf, ws, s, p, sg, ns, wm, lane);
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
    tile_origin(s, tile, n, i0, j0);
    const int c0 = slab * SLAB;
    for (int i = threadIdx.x; i < TILE_PIX * CHUNKS; i += THREADS) {
      const int ch = i % CHUNKS, pix = i / CHUNKS;
      const int oi = i0 + pix / TILE_W, oj = j0 + pix % TILE_W, c = c0 + ch * 8;
      if (oi < s.out_h && oj < s.out_w && c < s.out_c) {
        const int h = s.dst_h0 + oi * s.dst_sh, wc = s.dst_w0 + oj * s.dst_sw;
        *reinterpret_cast<uint4*>(out + (((size_t)n * s.dst_h + h) * s.dst_w + wc) * s.out_c +
                                  c) = *reinterpret_cast<const uint4*>(os + pix * O_PITCH + ch * 8);
      }
    }
    stage ^= (STAGES > 1);
  }
}

#if GMMA_OP == 0
extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv2d_fwd(const elem_t* __restrict__ x, const elem_t* __restrict__ w, elem_t* __restrict__ y,
           ConvParams p, int stage_u16) {
  run(x, w, y, p, stage_u16);
}
#elif GMMA_OP == 1
extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv2d_bwd_data(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                elem_t* __restrict__ dx, ConvParams p, int stage_u16) {
  run(dy, w, dx, p, stage_u16);
}
#endif
