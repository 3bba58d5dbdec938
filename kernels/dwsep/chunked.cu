// dwsep_chunked: the fused depthwise-separable convolution forward, the intermediate kept on
// chip. A block owns TILE_P consecutive output pixels (n, p, q flattened) and TILE_K
// output channels (blockIdx.y). It walks the M*C depthwise channels in chunks of CHUNK:
// each chunk's depthwise values of its pixels are computed, scaled, shifted and activated
// into shared memory (fp32), the chunk of the pointwise weight beside them, and every thread
// adds the chunk's products to its FARM_TM x FARM_TN outputs in registers. The depthwise is
// computed again by each of the ceil(K / TILE_K) blocks of a pixel tile (one when
// K <= TILE_K). fp32 accumulation; y in the element type, bias added at the end.
// Macros: TILE_P, TILE_K (multiples of 4), CHUNK; threads =
// (TILE_P / 4) * (TILE_K / 4), each with 4 x 4 outputs.
#include "dwsep_common.cuh"

#define FARM_TM 4
#define FARM_TN 4
#define FARM_THREADS ((TILE_P / FARM_TM) * (TILE_K / FARM_TN))

extern "C" __global__ void __launch_bounds__(FARM_THREADS)
dwsep_chunked(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
              const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
              const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
              elem_t* __restrict__ y, DwsepParams p) {
  __shared__ float as[CHUNK][TILE_P + 1];  // activated depthwise values, [j][pixel]
  __shared__ float ws[CHUNK][TILE_K + 1];  // pointwise weights, [j][k]
  const int tid = threadIdx.x;
  const long pixels = (long)p.N * p.P * p.Q;
  const long pix0 = (long)blockIdx.x * TILE_P;
  const int k0 = blockIdx.y * TILE_K;
  const int tp = tid / (TILE_K / FARM_TN), tk = tid % (TILE_K / FARM_TN);
  float acc[FARM_TM][FARM_TN];
#pragma unroll
  for (int i = 0; i < FARM_TM; ++i)
#pragma unroll
    for (int e = 0; e < FARM_TN; ++e) acc[i][e] = 0.0f;

  for (int j0 = 0; j0 < p.MC; j0 += CHUNK) {
    // The chunk's activated depthwise values: one (channel, pixel) per step, channels fastest
    // (a warp reads neighbouring channels of one input pixel: coalesced in channels-last).
    for (int e = tid; e < CHUNK * TILE_P; e += FARM_THREADS) {
      const int jj = e % CHUNK, pp = e / CHUNK;
      as[jj][pp] = dwsep_value(x, w_dw, scale, shift, p, pix0 + pp, j0 + jj);
    }
    for (int e = tid; e < CHUNK * TILE_K; e += FARM_THREADS) {
      const int kk = e / CHUNK, jj = e % CHUNK;  // the weight's rows are along j
      const int k = k0 + kk, j = j0 + jj;
      ws[jj][kk] = (k < p.K && j < p.MC) ? to_float(w_pw[(long)k * p.MC + j]) : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < CHUNK; ++jj) {
      float av[FARM_TM], wv[FARM_TN];
#pragma unroll
      for (int i = 0; i < FARM_TM; ++i) av[i] = as[jj][tp + i * (TILE_P / FARM_TM)];
#pragma unroll
      for (int e = 0; e < FARM_TN; ++e) wv[e] = ws[jj][tk + e * (TILE_K / FARM_TN)];
#pragma unroll
      for (int i = 0; i < FARM_TM; ++i)
#pragma unroll
        for (int e = 0; e < FARM_TN; ++e) acc[i][e] += av[i] * wv[e];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < FARM_TM; ++i) {
    const long pix = pix0 + tp + i * (TILE_P / FARM_TM);
    if (pix >= pixels) continue;
#pragma unroll
    for (int e = 0; e < FARM_TN; ++e) {
      const int k = k0 + tk + e * (TILE_K / FARM_TN);
      if (k >= p.K) continue;
      const float bias = p.pw_bias ? to_float(b_pw[k]) : 0.0f;
      y[pix * p.K + k] = from_float(acc[i][e] + bias);
    }
  }
}
