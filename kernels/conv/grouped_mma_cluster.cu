// conv_grouped_mma_cluster: conv_grouped_mma_bwd_weight's sums (the same staged tiles of
// grouped_mma.cu and the same mma.sync products) with the reduction over the output tiles split
// over the CLUSTER blocks of a thread-block cluster instead of splits written to a workspace and
// added by a second launch: the cluster of (slab, tap slice) takes every output tile, its block
// of rank r the r-th share; each block runs its tiles through a ring of STAGES buffers
// (cp.async, STAGES - 1 tiles in flight under a tile's math), KQ warps per 16 output channels of
// a super-group each taking every KQ-th 16-pixel step of a tile; the KQ warps' sums are added in
// shared memory (TAPS x SLAB x WIDTH fp32, in the then idle buffers), and after a cluster
// barrier each block adds every CLUSTER-th share of them over the cluster's blocks (distributed
// shared memory) and writes dw's diagonal blocks. One launch, no workspace, no atomics.
// Macros: grouped_mma.cu's tile and packing, TAPS, STAGES (2 to 4), KQ and CLUSTER (2, 4 or
// 8); grid x is CLUSTER, y the slabs, z the tap slices.
#ifndef TAPS
#define TAPS 3
#endif
#ifndef KQ
#define KQ 2
#endif
#ifndef CLUSTER
#define CLUSTER 4
#endif
#define MSPLIT (WIDTH / 16)  // warps of 16 output channels a super-group
#define THREADS (32 * SG * MSPLIT * KQ)
#define GMMA_OP 2  // forward geometry: x's tile read at every tap of dy's pixels
#include "grouped_mma.cu"
#include "../cluster.cuh"

#define KF (TILE_PIX / 16)  // 16-pixel steps of a tile
#define DY_U16 (TILE_PIX * PITCH * 8)

// dy's tile, the slab's channels of TILE_PIX output pixels (zeros past the output), into the
// cp.async group load_tile then commits.
__device__ __forceinline__ void load_dy_tile(u16* buf, const elem_t* __restrict__ dy,
                                             const Slice& s, int tile, int slab) {
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

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(THREADS, 1)
grouped_mma_bwd_weight_cluster(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                               elem_t* __restrict__ dw, ConvParams p, int stage_u16) {
  extern __shared__ __align__(16) u16 smem[];
  const Slice s = make_slice(p);
  const int slab = blockIdx.y, taps = p.R * p.S, t0 = blockIdx.z * TAPS;
  const int nt = min(TAPS, taps - t0), rank = blockIdx.x;
  u16* xs = smem;
  u16* dys = xs + STAGES * stage_u16;
  const int tiles = p.N * ((s.out_h + TILE_H - 1) / TILE_H) * ((s.out_w + TILE_W - 1) / TILE_W);
  const int per = (tiles + CLUSTER - 1) / CLUSTER;
  const int first = min(tiles, rank * per), last = min(tiles, first + per);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int kq = warp / (SG * MSPLIT), sg = warp / MSPLIT % SG, mh = warp % MSPLIT;
  const TileWalk walk = tile_walk(s);
  float acc[TAPS][WIDTH / 8][4];
#pragma unroll
  for (int t = 0; t < TAPS; ++t)
#pragma unroll
    for (int j = 0; j < WIDTH / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[t][j][e] = 0.0f;
  const int row_slots = s.step_w * s.phase_cols;
  int tap_slot[TAPS];
#pragma unroll
  for (int t = 0; t < TAPS; ++t) {
    const int tap = t0 + (t < nt ? t : 0), r = tap / p.S, sc = tap % p.S;
    const int off_r = r * s.off_dr, off_s = sc * s.off_ds;
    tap_slot[t] = off_r * row_slots + (off_s % s.step_w) * s.phase_cols + off_s / s.step_w;
  }
  const int a_pix = (lane & 7) + (lane >> 4) * 8, a_chunk = (sg * WIDTH + mh * 16) / 8 +
                                                          ((lane >> 3) & 1);
  const int b_pix = (lane & 7) + ((lane >> 3) & 1) * 8, b_chunk = sg * WIDTH / 8 + (lane >> 4);
  // the ring: tile first + i in buffer i % STAGES; STAGES - 1 copies ahead of the math
#pragma unroll
  for (int k = 0; k < STAGES - 1; ++k) {
    if (first + k < last) {
      load_dy_tile(dys + k * DY_U16, dy, s, first + k, slab);
      load_tile(xs + k * stage_u16, x, s, walk, first + k, slab);
    } else {
      cp_async_commit();
    }
  }
  int slot = 0;
  for (int tile = first; tile < last; ++tile) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // the tile's copies seen; every warp done with the previous buffer
    const int ahead = tile + STAGES - 1, ring = slot == 0 ? STAGES - 1 : slot - 1;
    if (ahead < last) {
      load_dy_tile(dys + ring * DY_U16, dy, s, ahead, slab);
      load_tile(xs + ring * stage_u16, x, s, walk, ahead, slab);
    } else {
      cp_async_commit();
    }
    const u16* xb = xs + slot * stage_u16;
    const u16* db = dys + slot * DY_U16;
#pragma unroll 1
    for (int kf = kq; kf < KF; kf += KQ) {
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
    slot = slot == STAGES - 1 ? 0 : slot + 1;
  }
  cp_async_wait<0>();
  __syncthreads();  // the buffers are free: they hold the block's sums, [tap][slab row][WIDTH]
  float* part = reinterpret_cast<float*>(smem);
  const int row0 = sg * WIDTH + mh * 16 + (lane >> 2), col0 = (lane & 3) * 2;
#pragma unroll 1
  for (int q = 0; q < KQ; ++q) {  // the KQ warps of each 16 x WIDTH block of sums, in turn
    if (kq == q) {
#pragma unroll
      for (int t = 0; t < TAPS; ++t)
#pragma unroll
        for (int j = 0; j < WIDTH / 8; ++j)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            float2* at = reinterpret_cast<float2*>(
                part + ((t * SLAB + row0 + h * 8) * WIDTH + j * 8 + col0));
            const float2 v = q ? *at : make_float2(0.0f, 0.0f);
            *at = make_float2(v.x + acc[t][j][h * 2], v.y + acc[t][j][h * 2 + 1]);
          }
    }
    if (q + 1 < KQ) __syncthreads();
  }
  // the diagonal blocks: output channel m of super-group sg, input channel c, in one group
  const int cg = p.Cg, groups_per = WIDTH / cg;
  cluster_meet_pairs<CLUSTER, TAPS * SLAB, WIDTH, THREADS>(part, rank, threadIdx.x,
                                                           [&](int row, int c, float v0,
                                                               float v1) {
    const int t = row / SLAB, m = row % WIDTH, gl = m / cg;
    const int g = (slab * SG + (row % SLAB) / WIDTH) * groups_per + gl;
    if (t >= nt || g >= p.G) return;
    elem_t* out = dw + ((size_t)(g * cg + m % cg) * taps + t0 + t) * cg;
    if (c / cg == gl) out[c % cg] = from_float(v0);
    if ((c + 1) / cg == gl) out[(c + 1) % cg] = from_float(v1);
  });
}
#endif
