// dwsep_halo: the fused depthwise-separable convolution forward on 2-D output tiles, each
// chunk's input read once into shared memory with its halo (NVIDIA mma.sync m16n8k16, fp32
// accumulation). For maps of many pixels and moderate channel counts, where the work is
// memory-bound.
//
// A block owns TILES consecutive tiles of TILE_H x TILE_W output pixels (tiles in (n, row,
// column) order, each inside one image) and TILE_N output channels (blockIdx.y). The M*C = C
// depthwise channels are streamed in chunks of KC. Per (tile, chunk) step one cp.async stage
// brings the pointwise weight's chunk and the input under the tile: HH x HW pixels of KC
// channels, HH = (TILE_H - 1) * stride + R, HW = (TILE_W - 1) * stride + S, zeros outside the
// input. The depthwise stage (CUDA cores, fp32) reads that halo from shared memory, each thread
// a channel pair for RUN outputs along a row, the inputs of a row's taps held in registers and
// shared by the run; the activated values go to an A tile [pixel][channel], 16-bit, and the
// warps multiply it by the chunk's weight. The intermediate never leaves the chip.
//
// Multiplier 1 and C a multiple of 8 (16-byte copies along channels); the depthwise is
// computed again by each of the ceil(K / TILE_N) blocks of a tile.
//
// With C_SPLIT > 1 (and one tile per block) a cluster of C_SPLIT blocks along z shares one
// output tile, each block taking an equal run of the chunks; their partial sums meet in
// shared memory across the cluster (sm_90), as in dwsep_stream: more blocks where a map has
// few tiles and C is wide.
//
// With DW_TC (the dwsep_halo_tc family) the depthwise of 3x3 and 5x5 filters runs on the
// tensor cores instead (halo_depthwise_tc), and a halo pixel takes KC + 8 u16.
//
// Dynamic shared memory (dwsep/families.py): the larger of TILE_P * (KC + 8) + STAGES *
// (TILE_N * (KC + 8) + HH * HW * HS) u16 (HS = KC, or KC + 8 with DW_TC) and, with C_SPLIT > 1,
// TILE_P * (TILE_N + 4) floats. Macros: TILE_H, TILE_W, TILE_N, WARPS_M, WARPS_N, KC, STAGES,
// TILES, OCC, C_SPLIT, DW_TC (0 or 1).
#define TILE_P (TILE_H * TILE_W)
#include "dwsep_tc.cuh"
#ifndef DW_TC
#define DW_TC 0
#endif
#if DW_TC
#define HS (KC + 8)  // u16 per halo pixel: the 8 rows an ldmatrix reads fall in distinct banks
#else
#define HS KC
#endif

// The activation applied to N values, its choice made once for all of them.
template <int N>
__device__ __forceinline__ void activate_all(float (&v)[N], int activation) {
#define DWSEP_ACTIVATE_ALL(A) \
  case A:                     \
    _Pragma("unroll") for (int i = 0; i < N; ++i) v[i] = dwsep_activate(v[i], A); break;
  switch (activation) {
    DWSEP_ACTIVATE_ALL(DWSEP_RELU)
    DWSEP_ACTIVATE_ALL(DWSEP_RELU6)
    DWSEP_ACTIVATE_ALL(DWSEP_SILU)
    DWSEP_ACTIVATE_ALL(DWSEP_HARDSWISH)
    default: break;
  }
#undef DWSEP_ACTIVATE_ALL
}

// A tile's place: image n and its first output row and column.
struct HaloTile {
  int n, oh0, ow0;
};

__device__ __forceinline__ HaloTile halo_tile(int t, const DwsepParams& p) {
  const int tiles_w = (p.Q + TILE_W - 1) / TILE_W, tiles_h = (p.P + TILE_H - 1) / TILE_H;
  const int tw = t % tiles_w, rest = t / tiles_w;
  return {rest / tiles_h, (rest % tiles_h) * TILE_H, tw * TILE_W};
}

// A tile's rows as output pixels (n, p, q flattened), -1 past the output.
struct HaloPixels {
  HaloTile t;
  int P, Q;
  __device__ __forceinline__ long operator()(int row) const {
    const int oh = t.oh0 + row / TILE_W, ow = t.ow0 + row % TILE_W;
    return oh < P && ow < Q ? ((long)(t.n * P + oh) * Q + ow) : -1L;
  }
};

__device__ __forceinline__ HaloPixels pixel_of(const HaloTile& t, const DwsepParams& p) {
  return {t, p.P, p.Q};
}

// Channels [c0, c0 + KC) of the input under tile `t` into hs [HH * HW][KC], zeros outside the
// input and past C.
__device__ __forceinline__ void load_halo(u16* hs, const HaloTile& t,
                                          const elem_t* __restrict__ x, const DwsepParams& p,
                                          int hh, int hw, int c0) {
  constexpr int SEGS = KC / 8;
  const int h0 = t.oh0 * p.stride - p.pad, w0 = t.ow0 * p.stride - p.pad;
  const elem_t* image = x + (long)t.n * p.H * p.W * p.C;
  const int seg = threadIdx.x % SEGS, c = c0 + seg * 8;
  const bool c_in = c < p.C;
  int hy = 0, hx = threadIdx.x / SEGS;  // (hy, hx) walks the halo in steps of THREADS / SEGS
  for (int pix = threadIdx.x / SEGS; pix < hh * hw; pix += THREADS / SEGS) {
    while (hx >= hw) hx -= hw, ++hy;
    const int h = h0 + hy, w = w0 + hx;
    const bool in = c_in && (unsigned)h < (unsigned)p.H && (unsigned)w < (unsigned)p.W;
    cp_async16(hs + pix * HS + seg * 8, in ? image + (h * p.W + w) * p.C + c : x, in);
    hx += THREADS / SEGS;
  }
}

// The activated depthwise values of chunk [j0, j0 + KC) for the tile's pixels, from the halo
// hs into A (as, B_STRIDE u16 per pixel row, pixel row = row * TILE_W + column), a thread
// computing RUN consecutive outputs of a row for a channel pair (eight for 3x3 filters where
// TILE_W allows, four otherwise). RR x SS taps and stride ST known at compile time, or RR = 0:
// p.R x p.S taps and p.stride, one tap at a time. Pixels past the output get values that are
// never stored; channels past C get zeros.
template <int RR, int SS, int ST, int CP>
__device__ __forceinline__ void halo_depthwise(u16* as, const u16* hs, int hw, int j0,
                                               const elem_t* __restrict__ w_dw,
                                               const elem_t* __restrict__ scale,
                                               const elem_t* __restrict__ shift,
                                               const DwsepParams& p) {
  constexpr int GROUPS = 32 / CP;  // runs a warp covers per step
  constexpr int RUN = RR == 3 && TILE_W % 8 == 0 ? 8 : 4;
  constexpr int RUNS_PER_ROW = TILE_W / RUN, RUNS = TILE_H * RUNS_PER_ROW;
  constexpr int COLS = RR > 0 ? (RUN - 1) * ST + SS : 1;  // a run's input columns per row
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int cpl = lane % CP, group = lane / CP;
  const int rs = p.R * p.S;
  for (int jj = 2 * cpl; jj < KC; jj += 2 * CP) {
    const ChannelPair<RR, SS> ch(j0 + jj, w_dw, scale, shift, p);
    for (int run = warp * GROUPS + group; run < RUNS; run += WARPS * GROUPS) {
      const int row = run / RUNS_PER_ROW, col0 = (run % RUNS_PER_ROW) * RUN;
      float d0[RUN], d1[RUN];
#pragma unroll
      for (int o = 0; o < RUN; ++o) d0[o] = d1[o] = 0.0f;
      if (RR > 0) {
#pragma unroll
        for (int r = 0; r < RR; ++r) {
          const u16* src = hs + ((row * ST + r) * hw + col0 * ST) * HS + jj;
          float v0[COLS], v1[COLS];
#pragma unroll
          for (int c = 0; c < COLS; ++c)
            unpack_pair(*reinterpret_cast<const u32*>(src + c * HS), v0[c], v1[c]);
#pragma unroll
          for (int o = 0; o < RUN; ++o)
#pragma unroll
            for (int s = 0; s < SS; ++s) {
              d0[o] = fmaf(v0[o * ST + s], ch.f0[r * SS + s], d0[o]);
              d1[o] = fmaf(v1[o * ST + s], ch.f1[r * SS + s], d1[o]);
            }
        }
      } else {
        for (int r = 0; r < p.R; ++r)
          for (int s = 0; s < p.S; ++s) {
            const float w0 = ch.tap0(r * p.S + s), w1 = ch.tap1(r * p.S + s, rs);
#pragma unroll
            for (int o = 0; o < RUN; ++o) {
              const u16* src =
                  hs + ((row * p.stride + r) * hw + (col0 + o) * p.stride + s) * HS + jj;
              float v0, v1;
              unpack_pair(*reinterpret_cast<const u32*>(src), v0, v1);
              d0[o] = fmaf(v0, w0, d0[o]);
              d1[o] = fmaf(v1, w1, d1[o]);
            }
          }
      }
#pragma unroll
      for (int o = 0; o < RUN; ++o) {
        d0[o] = d0[o] * ch.sc0 + ch.sh0;
        d1[o] = d1[o] * ch.sc1 + ch.sh1;
      }
      activate_all(d0, p.activation);
      activate_all(d1, p.activation);
#pragma unroll
      for (int o = 0; o < RUN; ++o)
        *reinterpret_cast<u32*>(as + (row * TILE_W + col0 + o) * B_STRIDE + jj) =
            ch.live0 ? pack_pair(d0[o], ch.live1 ? d1[o] : 0.0f) : 0u;
    }
  }
}

template <int CP>
__device__ __forceinline__ void halo_fill(u16* as, const u16* hs, int hw, int j0,
                                          const elem_t* __restrict__ w_dw,
                                          const elem_t* __restrict__ scale,
                                          const elem_t* __restrict__ shift,
                                          const DwsepParams& p) {
  if (p.R == 3 && p.S == 3 && p.stride == 1)
    halo_depthwise<3, 3, 1, CP>(as, hs, hw, j0, w_dw, scale, shift, p);
  else if (p.R == 3 && p.S == 3)
    halo_depthwise<3, 3, 2, CP>(as, hs, hw, j0, w_dw, scale, shift, p);
  else if (p.R == 5 && p.S == 5 && p.stride == 1)
    halo_depthwise<5, 5, 1, CP>(as, hs, hw, j0, w_dw, scale, shift, p);
  else if (p.R == 5 && p.S == 5)
    halo_depthwise<5, 5, 2, CP>(as, hs, hw, j0, w_dw, scale, shift, p);
  else
    halo_depthwise<0, 0, 1, CP>(as, hs, hw, j0, w_dw, scale, shift, p);
}

#if DW_TC
// The depthwise on tensor cores. Per 16 output pixels (an m-tile) and 8 channels (a channel
// group) a warp runs mma.sync with k = (tap, channel): a k16 step takes two taps of the 8
// channels, A's rows gathered from the halo by ldmatrix (a row: one pixel's 8 channels under
// one tap), B diagonal (B[(tap, c)][n] = w[n][tap] where c = n, else 0); an odd last tap takes a
// k8 step. The products are exact and the sums fp32, as on CUDA cores.
__device__ __forceinline__ void ldsm_x4(u32 (&r)[4], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2(u32 (&r)[2], u32 addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void mma1688(float (&d)[4], const u32 (&a)[2], u32 b) {
#if FARM_DTYPE == 2
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 "
#else
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
#endif
               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(b));
}

// RR x RR taps (stride p.stride) from the halo hs [hh * hw][HS] into A, as halo_depthwise.
template <int RR>
__device__ __forceinline__ void halo_depthwise_tc(u16* as, const u16* hs, int hw, int j0,
                                                  const elem_t* __restrict__ w_dw,
                                                  const elem_t* __restrict__ scale,
                                                  const elem_t* __restrict__ shift,
                                                  const DwsepParams& p) {
  constexpr int T = RR * RR, MT = TILE_P / 16, CGS = KC / 8;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, q = lane & 3;
  // the A row whose address this lane gives ldmatrix: pixel rho of the m-tile, tap half khalf
  const int rho = (lane & 7) + 8 * ((lane >> 3) & 1), khalf = lane >> 4;
  const u32 hs0 = smem_u32(hs), row_bytes = (u32)hw * HS * 2u;
  const unsigned short* taps = reinterpret_cast<const unsigned short*>(w_dw);
  u32 b[T];  // the current channel group's B fragments, one per tap
  float sc0 = 0.0f, sh0 = 0.0f, sc1 = 0.0f, sh1 = 0.0f;
  bool live = false;
  int current = -1;
  for (int item = warp; item < MT * CGS; item += WARPS) {
    const int cg = item % CGS, mt = item / CGS;
    if (cg != current) {  // warp-uniform
      current = cg;
      // lane (g, q) holds B[(tap, 2q), g] and B[(tap, 2q + 1), g]: channel g's tap where g is
      // 2q or 2q + 1, in that half
      const int jn = j0 + cg * 8 + g;
      const bool on = q == (g >> 1) && jn < p.C;
#pragma unroll
      for (int t = 0; t < T; ++t)
        b[t] = (on ? (u32)__ldg(taps + jn * T + t) : 0u) << (16 * (g & 1));
      const int j = j0 + cg * 8 + 2 * q;
      live = j < p.C;  // C is a multiple of 8: a group is whole or absent
      sc0 = live ? to_float(scale[j]) : 0.0f;
      sh0 = live ? to_float(shift[j]) : 0.0f;
      sc1 = live ? to_float(scale[j + 1]) : 0.0f;
      sh1 = live ? to_float(shift[j + 1]) : 0.0f;
    }
    const int pixel = mt * 16 + rho;
    const int base = (pixel / TILE_W) * p.stride * hw + (pixel % TILE_W) * p.stride;
    const u32 row_addr = hs0 + (u32)(base * HS + cg * 8) * 2u;
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < T / 2; ++m) {
      const int t = 2 * m + khalf;
      u32 a[4];
      ldsm_x4(a, row_addr + (u32)(t / RR) * row_bytes + (u32)(t % RR) * (HS * 2));
      mma16816(d, a, b[2 * m], b[2 * m + 1]);
    }
    if (T % 2) {
      constexpr int t = T - 1;
      u32 a[2];
      ldsm_x2(a, row_addr + (u32)(t / RR) * row_bytes + (u32)(t % RR) * (HS * 2));
      mma1688(d, a, b[t]);
    }
    // d: pixel mt * 16 + g, channels 2q and 2q + 1 of the group; then the pixel 8 rows on
    d[0] = d[0] * sc0 + sh0;
    d[1] = d[1] * sc1 + sh1;
    d[2] = d[2] * sc0 + sh0;
    d[3] = d[3] * sc1 + sh1;
    activate_all(d, p.activation);
    u16* out = as + (mt * 16 + g) * B_STRIDE + cg * 8 + 2 * q;
    *reinterpret_cast<u32*>(out) = live ? pack_pair(d[0], d[1]) : 0u;
    *reinterpret_cast<u32*>(out + 8 * B_STRIDE) = live ? pack_pair(d[2], d[3]) : 0u;
  }
}

// 3x3 and 5x5 filters on tensor cores, other sizes on CUDA cores.
template <int CP>
__device__ __forceinline__ void halo_fill_tc(u16* as, const u16* hs, int hw, int j0,
                                             const elem_t* __restrict__ w_dw,
                                             const elem_t* __restrict__ scale,
                                             const elem_t* __restrict__ shift,
                                             const DwsepParams& p) {
  if (p.R == 3 && p.S == 3)
    halo_depthwise_tc<3>(as, hs, hw, j0, w_dw, scale, shift, p);
  else if (p.R == 5 && p.S == 5)
    halo_depthwise_tc<5>(as, hs, hw, j0, w_dw, scale, shift, p);
  else
    halo_fill<CP>(as, hs, hw, j0, w_dw, scale, shift, p);
}
#endif

#if C_SPLIT > 1
#define CLUSTER __cluster_dims__(1, 1, C_SPLIT)
#else
#define CLUSTER
#endif

#if DW_TC
#define HALO_KERNEL dwsep_halo_tc
#else
#define HALO_KERNEL dwsep_halo
#endif
extern "C" __global__ void CLUSTER DWSEP_BOUNDS
HALO_KERNEL(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
           const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
           const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
           elem_t* __restrict__ y, DwsepParams p) {
  extern __shared__ __align__(16) u16 smem[];
  constexpr int CP = KC / 2 < 32 ? KC / 2 : 32;
  const int warp = threadIdx.x >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int k0 = blockIdx.y * TILE_N;
  const int hh = (TILE_H - 1) * p.stride + p.R, hw = (TILE_W - 1) * p.stride + p.S;
  const int all_tiles = p.N * ((p.P + TILE_H - 1) / TILE_H) * ((p.Q + TILE_W - 1) / TILE_W);
  const int tile0 = blockIdx.x * TILES;
  const int tiles = min(TILES, all_tiles - tile0);
  const int all_chunks = (p.C + KC - 1) / KC;
  const int per_block = (all_chunks + C_SPLIT - 1) / C_SPLIT;
  const int first = blockIdx.z * per_block;  // this block's chunks: [first, first + chunks)
  const int chunks = max(0, min(all_chunks - first, per_block));
  const int steps = tiles * chunks;
  const int stage_u16 = TILE_N * B_STRIDE + hh * hw * HS;
  u16* a = smem;                           // [TILE_P][B_STRIDE]
  u16* stages = smem + TILE_P * B_STRIDE;  // [STAGES][B: TILE_N x B_STRIDE, halo: hh*hw x KC]

  // The copy pipeline walks (tile, chunk) in order: `load` issues the next one.
  int load_tile = 0, load_chunk = 0;
  auto load = [&](int stage) {
    u16* st = stages + stage * stage_u16;
    load_pointwise(st, w_pw, p, k0, (first + load_chunk) * KC);
    load_halo(st + TILE_N * B_STRIDE, halo_tile(tile0 + load_tile, p), x, p, hh, hw,
              (first + load_chunk) * KC);
    if (++load_chunk == chunks) load_chunk = 0, ++load_tile;
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  WarpAcc acc;
  acc.clear();
  int tile = 0, chunk = 0;
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage `step` has landed; A and stage step - 1 are free again
    if (step + STAGES - 1 < steps) load((step + STAGES - 1) % STAGES);
    cp_async_commit();
    const u16* st = stages + (step % STAGES) * stage_u16;
#if DW_TC
    halo_fill_tc<CP>(a, st + TILE_N * B_STRIDE, hw, (first + chunk) * KC, w_dw, scale, shift, p);
#else
    halo_fill<CP>(a, st + TILE_N * B_STRIDE, hw, (first + chunk) * KC, w_dw, scale, shift, p);
#endif
    __syncthreads();  // A is visible
    warp_chunk(acc, a, B_STRIDE, st, wm, wn);
    if (++chunk == chunks && C_SPLIT == 1) {
      store_outputs(acc, y, b_pw, p, k0, wm, wn, pixel_of(halo_tile(tile0 + tile, p), p));
      acc.clear();
      chunk = 0;
      ++tile;
    }
  }
  cp_async_wait<0>();
#if C_SPLIT > 1
  __syncthreads();  // the pipeline's buffers are free for the partial sums
  cluster_reduce_store<C_SPLIT>(acc, reinterpret_cast<float*>(smem), y, b_pw, p, k0, wm, wn,
                                pixel_of(halo_tile(tile0, p), p));
#endif
}
