// conv_wgmma_split: conv_wgmma's forward and backward-data (wgmma.cu, included whole: the same
// producers, consumers, stages and tile loaders) with the reduction split over the grid, for
// the shapes whose output tiles are too few to fill the GPU (a small N x P x Q, a long
// reduction: late 1x1 and 3x3 layers at small batch).
//
// Grid z = the unsplit kernel's z (groups; backward-data: groups x stride residues) x `splits`
// slices; slice z / zres runs k-tiles [slice * kt_per_split, + kt_per_split) of its tile (none
// where a residue's reduction is shorter) and adds its fp32 sums atomically into the zeroed
// workspace, laid out as the output. Then it counts the tile in the int counters after the
// sums (one per tile of each z, `tiles_stride` apart), and the block that counts a tile the
// `splits`-th time reads the sums back from L2 and writes the output: the reduction ends in the
// kernel (igemm_zero clears the workspace before). The split entries sit beside wgmma.cu's,
// not in it, so that conv_wgmma's code objects, and the measurements keyed by their source
// hash, stay as they are.
#include "wgmma.cu"

#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void wgmma_fwd_split(const elem_t*, const elem_t*, elem_t*, float*,
                                           ConvParams, int, int, int) {}
extern "C" __global__ void wgmma_bwd_data_split(const elem_t*, const elem_t*, elem_t*, float*,
                                                ConvParams, int, int, int) {}
#else

namespace ig {

// The consumers' own barrier (the producers may have left): the id after the stages' two.
__device__ __forceinline__ void split_consumers_sync() { sm90_sync(1 + 2 * NST, 128 * CONSUMERS); }

// The slice's k-tiles [kt0, kt1) of a reduction of KT k-tiles (empty past its end).
__device__ __forceinline__ void slice_range(int slice, int kt_per_split, int KT, int& kt0,
                                            int& kt1) {
  kt0 = slice * kt_per_split;
  kt1 = kt0 + kt_per_split < KT ? kt0 + kt_per_split : KT;
  if (kt1 < kt0) kt1 = kt0;
}

// One slice's sums of the tile (m0, n0) added into ws at row_offset(m) + column; the tile's
// `splits`-th slice to count it at *counter writes out from ws, a pair (4 bytes) at a time in
// the accumulators' layout.
template <class RowOffset>
__device__ __forceinline__ void add_slice(const Acc& acc, int wg, float* __restrict__ ws,
                                          int* counter, elem_t* __restrict__ out, int m0, int M,
                                          int n0, int N, int splits, bool empty, u64* bars,
                                          RowOffset&& row_offset) {
  if (!empty)  // a slice past its residue's reduction has only zeros to add: it just counts
    for_each_pair(acc, wg, [&](int r, int c, float v0, float v1) {
      const int m = m0 + r, j = n0 + c;
      if (m >= M || j >= N) return;
      float* o = ws + row_offset(m) + j;
      atomicAdd(o, v0);
      atomicAdd(o + 1, v1);
    });
  __threadfence();  // this block's sums before its count
  split_consumers_sync();
  volatile int* last = reinterpret_cast<volatile int*>(bars + 7);  // a spare barrier slot
  if (threadIdx.x == 0) *last = atomicAdd(counter, 1) == splits - 1;
  split_consumers_sync();
  if (*last) {
    __threadfence();  // every slice's sums after their counts
    for_each_pair(acc, wg, [&](int r, int c, float, float) {
      const int m = m0 + r, j = n0 + c;
      if (m >= M || j >= N) return;
      const int at = row_offset(m) + j;
      const float2 v = __ldcg(reinterpret_cast<const float2*>(ws + at));
      *reinterpret_cast<u32*>(out + at) = pack_rn(v.x, v.y);
    });
  }
  split_consumers_sync();  // `last` is read before the next tile sets it
}

}  // namespace ig

#if IGEMM_OP == 0
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_fwd_split(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                elem_t* __restrict__ y, float* __restrict__ ws, ConvParams p, int kt_per_split,
                int splits, int tiles_stride MAPS) {
  using namespace ig;
  const int g = blockIdx.z % p.G, slice = blockIdx.z / p.G, M = p.N * p.P * p.Q;
  int kt0, kt1;
  slice_range(slice, kt_per_split, (p.Cg * p.R * p.S + BK - 1) / BK, kt0, kt1);
  const Tiles tiles(M, p.Kg);
  if (!tiles.mine) return;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7, kg = g * p.Kg;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      LoaderA la;
      la.init(x, p, g, m0, threadIdx.x - 128 * CONSUMERS);
      LoaderB lb;
      lb.init(w, p, g, n0, threadIdx.x - 128 * CONSUMERS);
      produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
#if TMA_B
        sm90_tma_2d(b, tmap_b, kt * BK, kg + n0, bar);
#endif
#if TMA_A
        sm90_tma_2d(a, tmap_a, kt * BK, m0, bar);
#endif
      });
    }
    produce_end(step);
    return;
  }
  const int K = p.K, total = tiles.mine * (kt1 - kt0);
  int* counters = reinterpret_cast<int*>(ws + (long)M * K) + g * tiles_stride;
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, kt1 - kt0, step, total);
    add_slice(acc, wg, ws, counters + blockIdx.x + i * gridDim.x, y, m0, M, n0, p.Kg, splits,
              kt1 == kt0, bars, [&](int m) { return m * K + kg; });
  }
}

#elif IGEMM_OP == 1
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_bwd_data_split(const elem_t* __restrict__ dy, const elem_t* __restrict__ w,
                     elem_t* __restrict__ dx, float* __restrict__ ws, ConvParams p,
                     int kt_per_split, int splits, int tiles_stride MAPS) {
  using namespace ig;
  const int zres = p.G * p.stride_h * p.stride_w, z = blockIdx.z % zres;
  Residue rz;
  rz.init(p, z);
  int kt0, kt1;
  slice_range(blockIdx.z / zres, kt_per_split, (rz.ktotal(p) + BK - 1) / BK, kt0, kt1);
  const Tiles tiles(rz.M, p.Cg);
  if (!tiles.mine) return;
  u64* bars;
  unsigned char* stages = stage_memory(bars);
  const int wg = threadIdx.x >> 7;
  int step = 0, m0, n0;
  if (wg >= CONSUMERS) {
    for (int i = 0; i < tiles.mine; ++i) {
      tiles.origin(i, m0, n0);
      LoaderA la;
      la.init(dy, p, rz, m0, threadIdx.x - 128 * CONSUMERS);
      LoaderB lb;
      lb.init(w, p, rz, n0, threadIdx.x - 128 * CONSUMERS);
      produce(stages, bars, la, lb, kt0, kt1, step, [&](int kt, unsigned char* a,
                                                        unsigned char* b, u64* bar) {
#if TMA_A  // dy as [NPQ][K] (tma 2: 1x1, stride 1, no padding, G = 1)
        sm90_tma_2d(a, tmap_a, kt * BK, m0, bar);
#else
        (void)a;
#endif
#if TMA_B
        const int kk = kt * BK, j = kk / p.Kg, k = kk - j * p.Kg, jr = j / rz.tw.count;
        const int r = rz.th.r0 + jr * rz.th.step;
        const int s = rz.tw.r0 + (j - jr * rz.tw.count) * rz.tw.step;
#pragma unroll
        for (int c = 0; c < BN / 64; ++c)
          sm90_tma_4d(b + c * MN_BLOCK_BYTES, tmap_b, n0 + 64 * c, s, r, rz.g * p.Kg + k, bar);
#endif
      });
    }
    produce_end(step);
    return;
  }
  const int HW = rz.Hr * rz.Wr, Wr = rz.Wr, sh = p.stride_h, sw = p.stride_w;
  const int H = p.H, W = p.W, C = p.C, gc = rz.g * p.Cg, rh = rz.rh, rw = rz.rw;
  const int total = tiles.mine * (kt1 - kt0);
  int* counters = reinterpret_cast<int*>(ws + (long)p.N * H * W * C) + z * tiles_stride;
  FastDiv by_hw, by_wr;
  by_hw.init(HW);
  by_wr.init(Wr);
  for (int i = 0; i < tiles.mine; ++i) {
    tiles.origin(i, m0, n0);
    Acc acc;
    consume(acc, stages, bars, wg, kt1 - kt0, step, total);
    add_slice(acc, wg, ws, counters + blockIdx.x + i * gridDim.x, dx, m0, rz.M, n0, p.Cg,
              splits, kt1 == kt0, bars, [&](int m) {
                const int n = by_hw.div(m), t = m - n * HW, a = by_wr.div(t), b = t - a * Wr;
                return ((n * H + rh + a * sh) * W + rw + b * sw) * C + gc;
              });
  }
}
#endif

#endif  // FARM_DTYPE != 0 and sm_90a
