// dwsep_stream: the fused depthwise-separable convolution forward for wide channel counts,
// the M*C depthwise channels streamed in chunks of KC and the pointwise partial sums kept in
// registers (NVIDIA mma.sync m16n8k16, fp32 accumulation).
//
// A block owns TILE_P consecutive output pixels (n, p, q flattened) and TILE_N output
// channels (blockIdx.y). For each chunk it computes the activated depthwise values of its
// pixels (CUDA cores, fp32) into an A tile [pixel][channel], 16-bit, while the pointwise
// weight arrives through STAGES shared-memory stages (cp.async), then its warps multiply.
// When M = 1 and C is a multiple of 8, the chunk's input under every tap of every pixel comes
// through the same stages ahead of use (staged taps: the depthwise reads shared memory only);
// otherwise the depthwise reads the input through the cache into two alternating A tiles.
// The depthwise is computed again by each of the ceil(K / TILE_N) blocks of a pixel tile. The
// intermediate never leaves the chip.
//
// With C_SPLIT > 1 a cluster of C_SPLIT blocks along z shares one output tile, each block
// taking an equal run of the chunks; their partial sums meet in shared memory across the
// cluster (sm_90), and each block writes a share of the tile: more blocks for small grids.
//
// Dynamic shared memory (dwsep/families.py): the larger of the pipeline's (staged taps:
// TILE_P * (KC + 8) + STAGES * (TILE_N * (KC + 8) + R * S * TILE_P * KC) u16; otherwise
// 2 * TILE_P * (KC + 8) + STAGES * TILE_N * (KC + 8) u16; and TILE_P row descriptors) and,
// with C_SPLIT > 1, TILE_P * (TILE_N + 4) floats. Macros: TILE_P, TILE_N, WARPS_M, WARPS_N,
// KC, STAGES, C_SPLIT, TILES, OCC, and what an instance is compiled for: FILTER (3 or 5: R = S
// = FILTER; 0: any other size) and STAGED (1: staged taps, which the family gives to M = 1 and
// C a multiple of 8; 0: reads through the cache). Only the code of that case is compiled.
#include "dwsep_tc.cuh"

#if C_SPLIT > 1
#define CLUSTER __cluster_dims__(1, 1, C_SPLIT)
#else
#define CLUSTER
#endif

extern "C" __global__ void CLUSTER DWSEP_BOUNDS
dwsep_stream(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
             const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
             const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
             elem_t* __restrict__ y, DwsepParams p) {
#if FILTER > 0
  p.R = FILTER;  // known to the compiler: the taps' loops unroll, other sizes' code goes
  p.S = FILTER;
#endif
  extern __shared__ __align__(16) u16 smem[];
  const int warp = threadIdx.x >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int pix0 = blockIdx.x * TILE_P;  // without staged taps, TILES is 1
  const int pixels = p.N * p.P * p.Q;
  const int k0 = blockIdx.y * TILE_N;
  const int all_chunks = (p.MC + KC - 1) / KC;
  const int per_block = (all_chunks + C_SPLIT - 1) / C_SPLIT;
  const int first = blockIdx.z * per_block;  // this block's chunks: [first, first + chunks)
  const int chunks = max(0, min(all_chunks - first, per_block));
  constexpr int CP = KC / 2 < 32 ? KC / 2 : 32;

  WarpAcc acc;
  acc.clear();
  constexpr bool staged = STAGED;
  if (staged) {
    // Staged taps: A [TILE_P][B_STRIDE], then per stage B [TILE_N][B_STRIDE] and the taps
    // [R*S][TILE_P][KC]. The pipeline runs over (pixel tile, chunk) for the block's TILES
    // consecutive pixel tiles, so the next tile's copies overlap this one's work.
    const int stage_u16 = TILE_N * B_STRIDE + p.R * p.S * TILE_P * KC;
    u16* a = smem;
    u16* stages = smem + TILE_P * B_STRIDE;
    const int tile0 = blockIdx.x * TILES;
    const int tiles = min(TILES, (pixels + TILE_P - 1) / TILE_P - tile0);
    const int steps = tiles * chunks;
    int load_tile = 0, load_chunk = 0;
    auto load = [&](int stage) {
      u16* st = stages + stage * stage_u16;
      load_pointwise(st, w_pw, p, k0, (first + load_chunk) * KC);
      load_taps(st + TILE_N * B_STRIDE, (tile0 + load_tile) * TILE_P, x, p,
                (first + load_chunk) * KC);
      if (++load_chunk == chunks) load_chunk = 0, ++load_tile;
    };
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < steps) load(s);
      cp_async_commit();
    }
    int tile = 0, chunk = 0;
    for (int step = 0; step < steps; ++step) {
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // stage `step` has landed; A and stage step - 1 are free again
      if (step + STAGES - 1 < steps) load((step + STAGES - 1) % STAGES);
      cp_async_commit();
      const u16* st = stages + (step % STAGES) * stage_u16;
      const int tile_pix0 = (tile0 + tile) * TILE_P;
      fill_from_taps<CP>(a, st + TILE_N * B_STRIDE, pixels - tile_pix0, (first + chunk) * KC,
                         w_dw, scale, shift, p);
      __syncthreads();  // A is visible
      warp_chunk(acc, a, B_STRIDE, st, wm, wn);
      if (++chunk == chunks && C_SPLIT == 1) {
        store_outputs(acc, y, b_pw, p, k0, wm, wn, [&](int row) {
          return tile_pix0 + row < pixels ? (long)(tile_pix0 + row) : -1L;
        });
        acc.clear();
        chunk = 0;
        ++tile;
      }
    }
  } else {
    u16* as = smem;                          // [2][TILE_P][B_STRIDE]
    u16* bs = smem + 2 * TILE_P * B_STRIDE;  // [STAGES][TILE_N][B_STRIDE]
    RowTaps* rows = reinterpret_cast<RowTaps*>(bs + STAGES * TILE_N * B_STRIDE);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (s < chunks) load_pointwise(bs + s * TILE_N * B_STRIDE, w_pw, p, k0, (first + s) * KC);
      cp_async_commit();
    }
    rows_of(rows, p, pix0);
    __syncthreads();
    for (int chunk = 0; chunk < chunks; ++chunk) {
      u16* a = as + (chunk & 1) * TILE_P * B_STRIDE;
      fill_depthwise<CP>(a, B_STRIDE, (first + chunk) * KC, KC, rows, x, w_dw, scale, shift, p);
      cp_async_wait<STAGES - 2>();
      __syncthreads();  // A and stage `chunk` are visible; stage chunk - 1 is free again
      const int next = chunk + STAGES - 1;
      if (next < chunks) load_pointwise(bs + (next % STAGES) * TILE_N * B_STRIDE, w_pw, p, k0,
                                        (first + next) * KC);
      cp_async_commit();
      warp_chunk(acc, a, B_STRIDE, bs + (chunk % STAGES) * TILE_N * B_STRIDE, wm, wn);
    }
  }
  cp_async_wait<0>();
  auto pixel_of = [&](int row) { return pix0 + row < pixels ? (long)(pix0 + row) : -1L; };
#if C_SPLIT > 1
  __syncthreads();  // the pipeline's buffers are free for the partial sums
  cluster_reduce_store<C_SPLIT>(acc, reinterpret_cast<float*>(smem), y, b_pw, p, k0, wm, wn,
                                pixel_of);
#else
  if (!staged) store_outputs(acc, y, b_pw, p, k0, wm, wn, pixel_of);
#endif
}
