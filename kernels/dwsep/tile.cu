// dwsep_tile: the fused depthwise-separable convolution forward over a spatial output tile, the
// pointwise stage on tensor cores (NVIDIA mma.sync m16n8k16, fp32 accumulation). A block owns
// a TILE_H x TILE_W tile of output pixels of one image and TILE_K output channels
// (blockIdx.y). For each chunk of KC depthwise channels it loads the input halo of its tile
// (the input channels the chunk reads, channels fastest: coalesced in channels-last memory)
// and the chunk's depthwise filters into shared memory, computes the depthwise values from
// there (fp32), scales, shifts, activates and rounds them into the GEMM's A tile
// [pixel][channel], puts the chunk of the pointwise weight beside it as B [output
// channel][channel], and every warp (32 x 32 outputs) multiplies its part. The intermediate
// never leaves the chip. y in the element type, bias added at the end. 16-bit element types,
// NVIDIA only. Macros: TILE_H, TILE_W (TILE_H * TILE_W a multiple of 32), TILE_K (a multiple
// of 32), KC (a multiple of 16), HALO (the halo's elements per channel, at most), RS_MAX
// (the filter's taps, at most).
#define TILE_P (TILE_H * TILE_W)
#define WARP_ROWS (TILE_P / 32)
#define WARP_COLS (TILE_K / 32)
#define THREADS (32 * WARP_ROWS * WARP_COLS)
#define STRIDE (KC + 8)  // u16 per row of A and B: rows 16 bytes apart in banks
#include "dwsep_mma.cuh"

extern "C" __global__ void __launch_bounds__(THREADS)
dwsep_tile(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
           const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
           const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
           elem_t* __restrict__ y, DwsepParams p) {
  __shared__ __align__(16) u16 as[TILE_P * STRIDE];  // A: [pixel][channel of the chunk]
  __shared__ __align__(16) u16 bs[TILE_K * STRIDE];  // B: [output channel][channel]
  __shared__ elem_t halo[HALO * KC];                 // input: [halo pixel][input channel]
  __shared__ float filt[KC * RS_MAX];                // the chunk's depthwise filters
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp / WARP_COLS, wc = warp % WARP_COLS;
  const int tiles_w = (p.Q + TILE_W - 1) / TILE_W, tiles_h = (p.P + TILE_H - 1) / TILE_H;
  const int n = blockIdx.x / (tiles_h * tiles_w);
  const int t = blockIdx.x % (tiles_h * tiles_w);
  const int oh0 = (t / tiles_w) * TILE_H, ow0 = (t % tiles_w) * TILE_W;
  const int ih0 = oh0 * p.stride - p.pad, iw0 = ow0 * p.stride - p.pad;
  const int IH = (TILE_H - 1) * p.stride + p.R, IW = (TILE_W - 1) * p.stride + p.S;
  const int RS = p.R * p.S;
  const int k0 = blockIdx.y * TILE_K;
  const int cin = KC / p.M;  // input channels a chunk reads (M divides KC)
  WarpAcc acc;
  acc.clear();

  for (int j0 = 0; j0 < p.MC; j0 += KC) {
    const int c0 = j0 / p.M;
    for (int e = tid; e < IH * IW * cin; e += THREADS) {  // the halo, channels fastest
      const int cc = e % cin, hw = e / cin;
      const int h = ih0 + hw / IW, w = iw0 + hw % IW, c = c0 + cc;
      halo[hw * KC + cc] = (h >= 0 && h < p.H && w >= 0 && w < p.W && c < p.C)
          ? x[(((long)n * p.H + h) * p.W + w) * p.C + c] : (elem_t)0;
    }
    for (int e = tid; e < KC * RS; e += THREADS) {  // the filters, contiguous in w_dw
      const int j = j0 + e / RS;
      filt[e] = j < p.MC ? to_float(w_dw[(long)j0 * RS + e]) : 0.0f;
    }
    load_pointwise(bs, w_pw, p, k0, j0, TILE_K, tid, THREADS);
    __syncthreads();
    for (int e = tid; e < KC * TILE_P; e += THREADS) {  // A, channels fastest
      const int jj = e % KC, pp = e / KC;
      const int j = j0 + jj, oh = oh0 + pp / TILE_W, ow = ow0 + pp % TILE_W;
      float a = 0.0f;
      if (j < p.MC && oh < p.P && ow < p.Q) {
        const elem_t* in = halo + ((pp / TILE_W) * p.stride * IW + (pp % TILE_W) * p.stride) * KC
                           + jj / p.M;
        const float* f = filt + jj * RS;
        float d = 0.0f;
        for (int r = 0; r < p.R; ++r)
          for (int s = 0; s < p.S; ++s) d += to_float(in[(r * IW + s) * KC]) * f[r * p.S + s];
        a = dwsep_activate(d * to_float(scale[j]) + to_float(shift[j]), p.activation);
      }
      as[pp * STRIDE + jj] = from_float(a);
    }
    __syncthreads();
    warp_chunk(acc, as, bs, wr, wc, lane);
    __syncthreads();
  }
  store_outputs(acc, y, b_pw, p, k0, wr, wc, lane, [&](int row) {
    const int oh = oh0 + row / TILE_W, ow = ow0 + row % TILE_W;
    return oh < p.P && ow < p.Q ? ((long)n * p.P + oh) * p.Q + ow : -1L;
  });
}
