// dwsep_resident: the fused depthwise-separable convolution forward, the depthwise output of a
// block's pixels resident in shared memory for every channel while the pointwise stage runs
// over its output channels on tensor cores (NVIDIA mma.sync m16n8k16, fp32 accumulation).
//
// A block owns TILE_P consecutive output pixels (n, p, q flattened) and the output-channel
// tiles blockIdx.y, blockIdx.y + gridDim.y, ... (TILE_N channels each): with one block per
// pixel tile along y the depthwise runs once per pixel. The block first computes the
// activated depthwise values of its pixels for all M*C channels (CUDA cores, fp32) into A
// [pixel][channel], 16-bit; then it streams the pointwise weight through STAGES shared-memory
// stages (cp.async) in chunks of KC channels, one pipeline over all of its output-channel
// tiles, and writes each tile's outputs (bias added) when its last chunk is done. The
// intermediate never leaves the chip.
//
// Dynamic shared memory: TILE_P * (AW + 8) + STAGES * TILE_N * (KC + 8) u16, AW = M*C rounded up
// to KC, and TILE_P row descriptors (dwsep/families.py). Macros: TILE_P, TILE_N, WARPS_M,
// WARPS_N, KC, STAGES, OCC.
#include "dwsep_tc.cuh"

extern "C" __global__ void DWSEP_BOUNDS
dwsep_resident(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
               const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
               const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
               elem_t* __restrict__ y, DwsepParams p) {
  extern __shared__ __align__(16) u16 smem[];
  const int aw = (p.MC + KC - 1) / KC * KC, a_stride = aw + 8;
  u16* as = smem;                                     // [TILE_P][a_stride]
  u16* bs = smem + TILE_P * a_stride;                 // [STAGES][TILE_N][B_STRIDE]
  RowTaps* rows = reinterpret_cast<RowTaps*>(bs + STAGES * TILE_N * B_STRIDE);
  const int warp = threadIdx.x >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
  const int pix0 = blockIdx.x * TILE_P;
  const int pixels = p.N * p.P * p.Q;
  const int chunks = aw / KC;
  const int k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const int mine = (k_tiles - (int)blockIdx.y + (int)gridDim.y - 1) / (int)gridDim.y;
  const int steps = mine * chunks;
  const int k_step = gridDim.y * TILE_N;  // from one of the block's channel tiles to the next

  // The copy pipeline walks (channel tile, chunk) in order: `load` issues the next one.
  int load_k0 = blockIdx.y * TILE_N, load_chunk = 0;
  auto load = [&](int stage) {
    load_pointwise(bs + stage * TILE_N * B_STRIDE, w_pw, p, load_k0, load_chunk * KC);
    if (++load_chunk == chunks) load_chunk = 0, load_k0 += k_step;
  };
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load(s);
    cp_async_commit();
  }
  rows_of(rows, p, pix0);
  __syncthreads();
  if (aw >= 64)
    fill_depthwise<32>(as, a_stride, 0, aw, rows, x, w_dw, scale, shift, p);
  else
    fill_depthwise<16>(as, a_stride, 0, aw, rows, x, w_dw, scale, shift, p);
  WarpAcc acc;
  acc.clear();
  int k0 = blockIdx.y * TILE_N, chunk = 0;
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage `step` and A are visible; stage step - 1 is free again
    if (step + STAGES - 1 < steps) load((step + STAGES - 1) % STAGES);
    cp_async_commit();
    warp_chunk(acc, as + chunk * KC, a_stride, bs + (step % STAGES) * TILE_N * B_STRIDE, wm, wn);
    if (++chunk == chunks) {
      store_outputs(acc, y, b_pw, p, k0, wm, wn,
                    [&](int row) { return pix0 + row < pixels ? (long)(pix0 + row) : -1L; });
      acc.clear();
      chunk = 0;
      k0 += k_step;
    }
  }
  cp_async_wait<0>();
}
