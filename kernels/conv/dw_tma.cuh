// What conv_dw_tma's kernels share (dw_tma.cu: forward and backward-data; dw_tma_bwd_weight.cu:
// backward-weight): the configuration macros (ROWS: the bands of a tile's rows, a thread in
// one), the geometry of a direction, the boxes' layout in shared memory, the loads and stores of
// VEC 16-bit elements, the work items and the bulk tensor copy of an item's haloed input tile.
#pragma once
#include "../common.cuh"
#include "../mma_sync.cuh"
#include "../sm90.cuh"

#ifndef DW_OP
#define DW_OP 0
#endif
#ifndef CH
#define CH 64
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef TILE_H
#define TILE_H 8
#endif
#ifndef TILE_W
#define TILE_W 32
#endif
#ifndef STAGES
#define STAGES 2
#endif
#ifndef FR
#define FR 3
#endif
#ifndef STRIDE
#define STRIDE 1
#endif
#ifndef OCC
#define OCC 1
#endif
#ifndef ROWS
#define ROWS 1
#endif
#if TILE_H % ROWS
#error "ROWS must divide TILE_H"
#endif

#define PIECES (CH / VEC)
#define THREADS (PIECES * TILE_W)
#define IN_H ((TILE_H - 1) * STRIDE + FR)
#define IN_W ((TILE_W - 1) * STRIDE + FR)
#define BAND_H (TILE_H / ROWS)                   // output (or dy) rows of a band, one a thread
#define BAND_IN ((BAND_H - 1) * STRIDE + FR)      // input rows under a band
#define BOX_BYTES (IN_H * IN_W * CH * 2)
#define STAGE_BYTES ((BOX_BYTES + 1023) / 1024 * 1024)

#if FARM_DTYPE != 0 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace dw {

// The geometry of one direction: the correlation's input (x, or dy in backward-data) and
// output (y, dx, or dy in backward-weight).
struct Geometry {
  int N, C, Hi, Wi, Ho, Wo, ph, pw;
};

__device__ __forceinline__ Geometry geometry(const ConvParams& p) {
#if DW_OP == 1
  return Geometry{p.N, p.C, p.P, p.Q, p.H, p.W, FR - 1 - p.pad_h, FR - 1 - p.pad_w};
#else
  return Geometry{p.N, p.C, p.H, p.W, p.P, p.Q, p.pad_h, p.pad_w};
#endif
}

// Byte offset of the 16-byte piece `piece` of box pixel `q`: rows of CH * 2 bytes, 128-byte
// swizzle where a row is 128 bytes.
__device__ __forceinline__ int box_offset(int q, int piece) {
  const int byte = piece * VEC * 2;
  return CH == 64 ? q * 128 + (((byte >> 4) ^ (q & 7)) << 4) + (byte & 15) : q * (CH * 2) + byte;
}

// VEC 16-bit elements as one load or store.
#if VEC == 8
typedef uint4 raw_t;
#elif VEC == 4
typedef uint2 raw_t;
#else
typedef u32 raw_t;
#endif

__device__ __forceinline__ void unpack(const raw_t& v, float (&f)[VEC]) {
  const u32* w = reinterpret_cast<const u32*>(&v);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) {
#if FARM_DTYPE == 2
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
#else
    f[2 * i] = half_to_float((u16)(w[i] & 0xffffu));
    f[2 * i + 1] = half_to_float((u16)(w[i] >> 16));
#endif
  }
}

__device__ __forceinline__ raw_t pack(const float (&a)[VEC]) {
  raw_t r;
  u32* w = reinterpret_cast<u32*>(&r);
#pragma unroll
  for (int i = 0; i < VEC / 2; ++i) w[i] = pack_pair(a[2 * i], a[2 * i + 1]);
  return r;
}

struct Item {
  int n, oh0, ow0, cb;
};

__device__ __forceinline__ Item item_of(int item, const Geometry& g) {
  const int tw = (g.Wo + TILE_W - 1) / TILE_W, th = (g.Ho + TILE_H - 1) / TILE_H;
  const int blocks = (g.C + CH - 1) / CH;
  const int s = item / blocks, cb = item - s * blocks;
  const int x = s % tw, rest = s / tw;
  return Item{rest / th, (rest % th) * TILE_H, x * TILE_W, cb};
}

__device__ __forceinline__ void fetch(unsigned char* stage, const TensorMap& map, u64* bar,
                                      const Item& it, const Geometry& g) {
  sm90_mbar_expect(bar, BOX_BYTES);
  sm90_tma_4d(stage, map, it.cb * CH, it.ow0 * STRIDE - g.pw, it.oh0 * STRIDE - g.ph, it.n, bar);
}

// The stages, on a 1024-byte boundary of the dynamic shared memory, and their mbarriers `bytes`
// after them, initialised by thread 0 before any thread of the block waits on them.
__device__ __forceinline__ unsigned char* stages_and_barriers(unsigned char* smem, int bytes,
                                                              u64*& bars) {
  unsigned char* base = smem + ((1024 - (sm90_smem(smem) & 1023)) & 1023);
  bars = reinterpret_cast<u64*>(base + bytes);
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < STAGES; ++s) sm90_mbar_init(&bars[s], 1);
    sm90_mbar_fence_init();
  }
  __syncthreads();
  return base;
}

}  // namespace dw
#endif
