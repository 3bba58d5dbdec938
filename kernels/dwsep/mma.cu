// dwsep_mma: the fused depthwise-separable convolution forward with the pointwise stage on
// tensor cores (NVIDIA mma.sync m16n8k16, fp32 accumulation). A block owns TILE_P consecutive
// output pixels (n, p, q flattened) and TILE_K output channels (blockIdx.y); its warps, 32 x 32
// outputs each, tile it. It walks the M*C depthwise channels in chunks of KC: each chunk's
// depthwise values of its pixels are computed on CUDA cores (fp32), scaled, shifted, activated
// and rounded to the element type into shared memory as the GEMM's A tile [pixel][channel];
// the pointwise weights of the chunk go beside them as B [output channel][channel]; then every
// warp multiplies its part. The intermediate never leaves the chip. y in the element type,
// bias added at the end. 16-bit element types only (the farm measures dwsep_fwd in bf16 and
// fp16); NVIDIA only (mma.sync).
// Macros: TILE_P (32 * warp rows), TILE_K (32 * warp columns), KC (a multiple of 16).
#define WARP_ROWS (TILE_P / 32)
#define WARP_COLS (TILE_K / 32)
#define THREADS (32 * WARP_ROWS * WARP_COLS)
#define STRIDE (KC + 8)  // u16 per shared-memory row: rows 16 bytes apart in banks
#include "dwsep_mma.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
dwsep_mma(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
          const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
          const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
          elem_t* __restrict__ y, DwsepParams p) {
  __shared__ __align__(16) u16 as[TILE_P * STRIDE];  // A: [pixel][channel of the chunk]
  __shared__ __align__(16) u16 bs[TILE_K * STRIDE];  // B: [output channel][channel]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp / WARP_COLS, wc = warp % WARP_COLS;
  const long pixels = (long)p.N * p.P * p.Q;
  const long pix0 = (long)blockIdx.x * TILE_P;
  const int k0 = blockIdx.y * TILE_K;
  WarpAcc acc;
  acc.clear();
  for (int j0 = 0; j0 < p.MC; j0 += KC) {
    // A: the chunk's activated depthwise values, channels fastest across threads (a warp
    // reads neighbouring channels of one input pixel: coalesced in channels-last memory).
    for (int e = tid; e < KC * TILE_P; e += THREADS) {
      const int jj = e % KC, pp = e / KC;
      as[pp * STRIDE + jj] = from_float(dwsep_value(x, w_dw, scale, shift, p, pix0 + pp,
                                                    j0 + jj));
    }
    load_pointwise(bs, w_pw, p, k0, j0, TILE_K, tid, THREADS);
    __syncthreads();
    warp_chunk(acc, as, bs, wr, wc, lane);
    __syncthreads();
  }
  store_outputs(acc, y, b_pw, p, k0, wr, wc, lane,
                [&](int row) { return pix0 + row < pixels ? pix0 + row : -1L; });
}
