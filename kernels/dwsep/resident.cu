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
// to 64 (dwsep/families.py). Macros: TILE_P, TILE_N, WARPS_M, WARPS_N, KC, STAGES.
#include "dwsep_tc.cuh"

extern "C" __global__ void __launch_bounds__(THREADS, 1)
dwsep_resident(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
               const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
               const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
               elem_t* __restrict__ y, DwsepParams p) {
  extern __shared__ __align__(16) u16 smem[];
  const int aw = (p.MC + 63) / 64 * 64, a_stride = aw + 8;
  u16* as = smem;
  u16* bs = smem + TILE_P * a_stride;
  const int warp = threadIdx.x >> 5, wm = warp / WARPS_N, wn = warp % WARPS_N;
  const long pix0 = (long)blockIdx.x * TILE_P;
  const int chunks = (p.MC + KC - 1) / KC;
  const int k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const int mine = (k_tiles - (int)blockIdx.y + (int)gridDim.y - 1) / (int)gridDim.y;
  const int steps = mine * chunks;
  auto stage_k0 = [&](int step) { return (blockIdx.y + (step / chunks) * gridDim.y) * TILE_N; };

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < steps) load_pointwise(bs + s * TILE_N * B_STRIDE, w_pw, p, stage_k0(s),
                                  (s % chunks) * KC);
    cp_async_commit();
  }
  fill_depthwise<32>(as, a_stride, 0, aw, x, w_dw, scale, shift, p,
                     [&](int row, int& n, int& oh, int& ow) {
                       return split_pixel(p, pix0 + row, n, oh, ow);
                     });
  WarpAcc acc;
  acc.clear();
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // stage `step` and A are visible; stage step - 1 is free again
    const int next = step + STAGES - 1;
    if (next < steps) load_pointwise(bs + (next % STAGES) * TILE_N * B_STRIDE, w_pw, p,
                                     stage_k0(next), (next % chunks) * KC);
    cp_async_commit();
    const int chunk = step % chunks;
    warp_chunk(acc, as + chunk * KC, a_stride, bs + (step % STAGES) * TILE_N * B_STRIDE, wm, wn);
    if (chunk == chunks - 1) {
      store_outputs(acc, y, b_pw, p, stage_k0(step), wm, wn, [&](int row) {
        return pix0 + row < (long)p.N * p.P * p.Q ? pix0 + row : -1L;
      });
      acc.clear();
    }
  }
  cp_async_wait<0>();
}
