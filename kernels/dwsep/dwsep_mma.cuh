// The tensor-core half of the dwsep_fwd families that run the pointwise stage on mma.sync
// (mma.cu, tile.cu): the B tile's load, a warp's 32 x 32 outputs over one chunk, and the
// epilogue. A tile is [row][channel of the chunk], STRIDE u16 per row (rows 16 bytes apart in
// banks). NVIDIA only; 16-bit element types. The including source defines KC and STRIDE.
#pragma once
#include "dwsep_common.cuh"
#ifdef FARM_HIP
#error "the dwsep tensor-core families use NVIDIA's mma.sync: they have no AMD build"
#endif

__device__ __forceinline__ u32 pair_at(const u16* p) { return *reinterpret_cast<const u32*>(p); }

// The same instruction as conv/igemm.cu's mma16816; that source keeps its own copy, since its
// hash identifies the shipped recordings' rows and a shared header would change it.
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

// Accumulators of one warp: [m16 tile][n8 tile][fragment], cleared.
struct WarpAcc {
  float c[2][4][4];
  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[i][j][e] = 0.0f;
  }
};

// B: the chunk [j0, j0 + KC) of the pointwise weight for output channels [k0, k0 + tile_k),
// channels of the chunk fastest (contiguous in w_pw); zeros out of range.
__device__ __forceinline__ void load_pointwise(u16* bs, const elem_t* __restrict__ w_pw,
                                               const DwsepParams& p, int k0, int j0,
                                               int tile_k, int tid, int threads) {
  for (int e = tid; e < KC * tile_k; e += threads) {
    const int kk = e / KC, jj = e % KC;
    const int k = k0 + kk, j = j0 + jj;
    bs[kk * STRIDE + jj] = (k < p.K && j < p.MC) ? w_pw[(long)k * p.MC + j] : (u16)0;
  }
}

// The warp's 32 x 32 outputs (rows wr * 32.., columns wc * 32..) over the chunk in as, bs.
__device__ __forceinline__ void warp_chunk(WarpAcc& acc, const u16* as, const u16* bs, int wr,
                                           int wc, int lane) {
  const int group = lane >> 2, tig = lane & 3;
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
      for (int i = 0; i < 2; ++i) mma16816(acc.c[i][j], a[i], b0, b1);
    }
  }
}

// y for the warp's outputs, bias added: pixel_of(row of the block's tile) gives the output
// pixel (n, p, q flattened) or -1 when the row lies outside the output.
template <typename PixelOf>
__device__ __forceinline__ void store_outputs(const WarpAcc& acc, elem_t* __restrict__ y,
                                              const elem_t* __restrict__ b_pw,
                                              const DwsepParams& p, int k0, int wr, int wc,
                                              int lane, PixelOf pixel_of) {
  const int group = lane >> 2, tig = lane & 3;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long pix = pixel_of(wr * 32 + i * 16 + group + 8 * half);
      if (pix < 0) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int k = k0 + wc * 32 + j * 8 + 2 * tig + e;
          if (k >= p.K) continue;
          const float bias = p.pw_bias ? to_float(b_pw[k]) : 0.0f;
          y[pix * p.K + k] = from_float(acc.c[i][j][2 * half + e] + bias);
        }
    }
}
