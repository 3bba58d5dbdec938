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
#include "dwsep_common.cuh"
#ifdef FARM_HIP
#error "dwsep_mma uses NVIDIA's mma.sync: it has no AMD build"
#endif

#define WARP_ROWS (TILE_P / 32)
#define WARP_COLS (TILE_K / 32)
#define THREADS (32 * WARP_ROWS * WARP_COLS)
#define STRIDE (KC + 8)  // u16 per shared-memory row: rows 16 bytes apart in banks

__device__ __forceinline__ u32 pair_at(const u16* p) { return *reinterpret_cast<const u32*>(p); }

__device__ __forceinline__ void mma16816(float (&d)[4], const u32 (&a)[4], u32 b0, u32 b1) {
#if FARM_DTYPE == 2
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
#else
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
#endif
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(THREADS)
dwsep_mma(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
          const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
          const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
          elem_t* __restrict__ y, DwsepParams p) {
  __shared__ __align__(16) u16 as[TILE_P * STRIDE];  // A: [pixel][channel of the chunk]
  __shared__ __align__(16) u16 bs[TILE_K * STRIDE];  // B: [output channel][channel]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wr = warp / WARP_COLS, wc = warp % WARP_COLS;
  const int group = lane >> 2, tig = lane & 3;
  const long pixels = (long)p.N * p.P * p.Q;
  const long pix0 = (long)blockIdx.x * TILE_P;
  const int k0 = blockIdx.y * TILE_K;
  float acc[2][4][4];  // [m16 tile][n8 tile][fragment]
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  for (int j0 = 0; j0 < p.MC; j0 += KC) {
    // A: the chunk's activated depthwise values, channels fastest across threads (a warp
    // reads neighbouring channels of one input pixel: coalesced in channels-last memory).
    for (int e = tid; e < KC * TILE_P; e += THREADS) {
      const int jj = e % KC, pp = e / KC;
      const int j = j0 + jj;
      const long pix = pix0 + pp;
      float a = 0.0f;
      if (j < p.MC && pix < pixels) {
        const int q = (int)(pix % p.Q);
        const long rest = pix / p.Q;
        const int oh = (int)(rest % p.P), n = (int)(rest / p.P);
        const int c = j / p.M;
        float d = 0.0f;
        for (int r = 0; r < p.R; ++r) {
          const int h = oh * p.stride - p.pad + r;
          if (h < 0 || h >= p.H) continue;
          const elem_t* row = x + ((long)n * p.H + h) * p.W * p.C + c;
          const elem_t* wrow = w_dw + ((long)j * p.R + r) * p.S;
          for (int s = 0; s < p.S; ++s) {
            const int w = q * p.stride - p.pad + s;
            if (w < 0 || w >= p.W) continue;
            d += to_float(row[(long)w * p.C]) * to_float(wrow[s]);
          }
        }
        a = dwsep_activate(d * to_float(scale[j]) + to_float(shift[j]), p.activation);
      }
      as[pp * STRIDE + jj] = from_float(a);
    }
    // B: the chunk of the pointwise weight, channels of the chunk fastest (contiguous in w_pw).
    for (int e = tid; e < KC * TILE_K; e += THREADS) {
      const int kk = e / KC, jj = e % KC;
      const int k = k0 + kk, j = j0 + jj;
      bs[kk * STRIDE + jj] = (k < p.K && j < p.MC) ? w_pw[(long)k * p.MC + j] : (u16)0;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < KC; kk += 16) {
      u32 a[2][4];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const u16* base = as + (wr * 32 + i * 16 + group) * STRIDE + kk + 2 * tig;
        a[i][0] = pair_at(base);
        a[i][1] = pair_at(base + 8 * STRIDE);
        a[i][2] = pair_at(base + 8);
        a[i][3] = pair_at(base + 8 * STRIDE + 8);
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const u16* base = bs + (wc * 32 + j * 8 + group) * STRIDE + kk + 2 * tig;
        const u32 b0 = pair_at(base), b1 = pair_at(base + 8);
#pragma unroll
        for (int i = 0; i < 2; ++i) mma16816(acc[i][j], a[i], b0, b1);
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long pix = pix0 + wr * 32 + i * 16 + group + 8 * half;
      if (pix >= pixels) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = k0 + wc * 32 + j * 8 + 2 * tig + e;
          if (k >= p.K) continue;
          const float bias = p.pw_bias ? to_float(b_pw[k]) : 0.0f;
          y[pix * p.K + k] = from_float(acc[i][j][2 * half + e] + bias);
        }
    }
}
