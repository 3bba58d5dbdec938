// conv_grouped_mma_bwd_weight: grouped backward-weight on mma.sync over the same staged tiles
// as conv_grouped_mma (grouped_mma.cu, whose copies and geometry it includes):
//   dw[tap] (WIDTH x WIDTH a super-group) += dy_tile^T (outputs x pixels) . x_tile@tap
// Each block owns a slab of SG super-groups, a grid z slice of TAPS filter taps and a split of
// the output tiles (grid x); per tile it stages x with its halo and dy (cp.async, two stages),
// and each warp keeps 16 output channels x WIDTH input channels of one super-group for each of
// its taps in registers, reading dy^T once a 16-pixel step for all of them (ldmatrix.trans)
// and x at every tap's offset. Only the diagonal blocks of a super-group's sums are weights:
// each split writes them, fp32, into its own slice of the workspace laid out as dw (every
// entry once, no atomics), and grouped_mma_reduce sums the slices and converts (the second
// level of the reduction).
#ifndef TAPS
#define TAPS 9
#endif
#define MSPLIT (WIDTH / 16)  // warps of 16 output channels a super-group
#define THREADS (32 * SG * MSPLIT)
#define GMMA_OP 2
#include "grouped_mma.cu"

#define KF (TILE_PIX / 16)  // 16-pixel steps of a tile
#define DY_U16 (TILE_PIX * PITCH * 8)

// dy's tile, the slab's channels of TILE_PIX output pixels (zeros past the output), into the
// cp.async group load_tile then commits.
__device__ __forceinline__ void load_dy(u16* buf, const elem_t* __restrict__ dy, const Slice& s,
                                        int tile, int slab) {
  int n, i0, j0;
  tile_origin(s, tile, n, i0, j0);
  const int c0 = slab * SLAB;
  for (int i = threadIdx.x; i < TILE_PIX * CHUNKS; i += THREADS) {
    const int ch = i % CHUNKS, pix = i / CHUNKS;
    const int oi = i0 + pix / TILE_W, oj = j0 + pix % TILE_W, c = c0 + ch * 8;
    const bool ok = oi < s.out_h && oj < s.out_w && c < s.out_c;
    const elem_t* src = ok ? dy + (((size_t)n * s.out_h + oi) * s.out_w + oj) * s.out_c + c : dy;
    cp_async16(buf + (pix * PITCH + ch) * 8, src, ok);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
conv2d_bwd_weight(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                  float* __restrict__ partial, ConvParams p, int stage_u16,
                  int tiles_per_split) {
  extern __shared__ __align__(16) u16 smem[];
  const Slice s = make_slice(p);
  const int slab = blockIdx.y, taps = p.R * p.S, t0 = blockIdx.z * TAPS;
  const int nt = min(TAPS, taps - t0);
  u16* xs = smem;
  u16* dys = xs + STAGES * stage_u16;
  const int tiles = p.N * ((s.out_h + TILE_H - 1) / TILE_H) * ((s.out_w + TILE_W - 1) / TILE_W);
  const int first = blockIdx.x * tiles_per_split, last = min(tiles, first + tiles_per_split);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int sg = warp / MSPLIT, mh = warp % MSPLIT;
  const TileWalk walk = tile_walk(s);
  float acc[TAPS][WIDTH / 8][4];
#pragma unroll
  for (int t = 0; t < TAPS; ++t)
#pragma unroll
    for (int j = 0; j < WIDTH / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][j][e] = 0.0f;
  // a tap's slot offset, as compute_tile finds it (forward geometry)
  const int row_slots = s.step_w * s.phase_cols;
  int tap_slot[TAPS];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    const int tap = t0 + (t < nt ? t : 0), r = tap / p.S, sc = tap % p.S;
    const int off_r = r * s.off_dr, off_s = sc * s.off_ds;
    tap_slot[t] = off_r * row_slots + (off_s % s.step_w) * s.phase_cols + off_s / s.step_w;
  }
  // this lane's rows: dy^T's pixels for A (a0..a3 = m 0-7 / 8-15 by k 0-7 / 8-15) and x's for B
  const int a_pix = (lane & 7) + (lane >> 4) * 8, a_chunk = (sg * WIDTH + mh * 16) / 8 +
                                                          ((lane >> 3) & 1);
  const int b_pix = (lane & 7) + ((lane >> 3) & 1) * 8, b_chunk = sg * WIDTH / 8 + (lane >> 4);
  int stage = 0;
  if (first < last) {
    load_dy(dys, dy, s, first, slab);
    load_tile(xs, x, s, walk, first, slab);
  }
  for (int tile = first; tile < last; ++tile) {
    if (tile + 1 < last) {
      load_dy(dys + (stage ^ 1) * DY_U16, dy, s, tile + 1, slab);
      load_tile(xs + (stage ^ 1) * stage_u16, x, s, walk, tile + 1, slab);
    } else {
      cp_async_commit();
    }
    cp_async_wait<1>();
    __syncthreads();
    const u16* xb = xs + stage * stage_u16;
    const u16* db = dys + stage * DY_U16;
#pragma unroll 1
    for (int kf = 0; kf < KF; ++kf) {
      u32 a[4];
      ldmatrix_x4_trans(a, db + ((kf * 16 + a_pix) * PITCH + a_chunk) * 8);
      const int pix = kf * 16 + b_pix;
      const int base = (pix / TILE_W) * s.step_h * row_slots + pix % TILE_W;
#pragma unroll
      for (int t = 0; t < TAPS; ++t) {
        if (t < nt) {
#pragma unroll
          for (int nb = 0; nb < WIDTH / 16; ++nb) {
            u32 b[4];
            ldmatrix_x4_trans(b, xb + ((base + tap_slot[t]) * PITCH + b_chunk + nb * 2) * 8);
            mma16816(acc[t][nb * 2], a, b[0], b[1]);
            mma16816(acc[t][nb * 2 + 1], a, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();
    stage ^= 1;
  }
  // the diagonal blocks: output channel mh * 16 + row, input channel j * 8 + col of the
  // super-group, where both fall in one group
  const int cg = p.Cg, groups_per = WIDTH / cg;
  float* out = partial + (size_t)blockIdx.x * p.K * taps * cg;
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    if (t >= nt) continue;
#pragma unroll
    for (int j = 0; j < WIDTH / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int m = mh * 16 + (lane >> 2) + (e >> 1) * 8, c = j * 8 + (lane & 3) * 2 + (e & 1);
        const int gl = m / cg, g = (slab * SG + sg) * groups_per + gl;
        if (gl == c / cg && g < p.G)
          out[((size_t)(g * cg + m % cg) * taps + t0 + t) * cg + c % cg] = acc[t][j][e];
      }
  }
}

// dw = the sum of the splits' slices, in the element type: a block sums REDUCE_COLUMNS
// consecutive entries, its REDUCE_LANES rows of threads every REDUCE_LANES-th split (loads
// coalesced along the entries, REDUCE_LANES sums in flight a column), then adds the rows in
// shared memory.
#define REDUCE_COLUMNS 32
#define REDUCE_LANES 8
extern "C" __global__ void __launch_bounds__(REDUCE_COLUMNS * REDUCE_LANES)
grouped_mma_reduce(const float* __restrict__ partial, elem_t* __restrict__ dw, int total,
                   int splits) {
  __shared__ float sums[REDUCE_LANES][REDUCE_COLUMNS + 1];
  const int col = threadIdx.x % REDUCE_COLUMNS, lane = threadIdx.x / REDUCE_COLUMNS;
  for (int base = blockIdx.x * REDUCE_COLUMNS; base < total; base += gridDim.x * REDUCE_COLUMNS) {
    const int i = base + col;
    float sum = 0.0f;
    if (i < total) {
#pragma unroll 4
      for (int k = lane; k < splits; k += REDUCE_LANES) sum += partial[(size_t)k * total + i];
    }
    sums[lane][col] = sum;
    __syncthreads();
    if (lane == 0 && i < total) {
      float all = 0.0f;
#pragma unroll
      for (int l = 0; l < REDUCE_LANES; ++l) all += sums[l][col];
      dw[i] = from_float(all);
    }
    __syncthreads();
  }
}
