// dwsep_wgmma: the fused depthwise-separable convolution forward on Hopper's warpgroup matrix
// instructions (sm_90a: wgmma.mma_async, fp32 accumulation), for the wide pairs whose
// pointwise GEMM dominates.
//
// A block owns TILE_P consecutive output pixels (n, p, q flattened) and TILE_N output channels.
// Consecutive blocks take the output-channel tiles of one pixel tile, so its input is read from
// L2 by all of them. Its warpgroups (128 threads) have one of two jobs:
//  - consumers, one per 64 pixels and WG_N (at most 256) output channels of the block: each
//    issues the m64nWG_Nk16 wgmma of its part and holds its accumulators (registers) to the
//    epilogue; where TILE_N is 512, two consumers share each A row, so that a depthwise value
//    serves 512 output channels;
//  - PRODUCERS producers: per chunk of 64 depthwise channels they copy the pointwise weight's
//    chunk [TILE_N][64] by cp.async and compute the activated depthwise values of the block's
//    pixels (CUDA cores, fp32; a thread 8 channels of a row at a time, its 9 taps loaded before
//    they are used) into an A tile, both in the 128-byte-swizzled K-major layout that wgmma
//    reads (a row's 16-byte pieces permuted by the row: no bank conflicts).
// The chunks go round STAGES stages of shared memory: named barriers FULL (producers arrive,
// consumers wait) and EMPTY (consumers arrive once a stage's wgmma are done, producers wait),
// so the depthwise of the next chunks runs while the tensor cores work on this one. The
// intermediate never leaves the chip. Multiplier 1 and C a multiple of 8.
//
// With C_SPLIT > 1 (dwsep_wgmma_split) a cluster of C_SPLIT blocks along z shares one output
// tile: block z takes the chunks [z * chunks / C_SPLIT, (z + 1) * chunks / C_SPLIT), its
// consumers' partial sums go into its shared memory once the pipeline is done, and each block
// adds up a share of the tile's rows over the cluster (distributed shared memory) and writes
// them: more blocks, and a shorter chain of chunks each, where few pixels meet many channels.
//
// With STAGED (dwsep_wgmma_staged) the producers no longer read the depthwise's taps from
// global memory: each chunk's input rows under the block's pixels (every column, 64 channels,
// 144 bytes a pixel) are copied by cp.async into one of STAGES - 1 input buffers, LEAD =
// STAGES - 2 chunks ahead of the one being filled, together with that chunk's weight; the
// fill then reads its taps from shared memory. The copies of LEAD chunks are in flight while
// the producers compute one, so the depthwise no longer waits on the latency of its loads.
// 3x3 and 5x5 filters (FILTER 3 and 5) run on the tensor cores (dwsep_staged.cuh). With
// C_SPLIT > 1 too (dwsep_wgmma_split_staged) each block stages its share of the chunks.
//
// Dynamic shared memory (dwsep/families.py): 1024 (alignment) + STAGES * (TILE_P + TILE_N) *
// 128 bytes (with C_SPLIT > 1, at least TILE_P * (TILE_N + 8) floats), and TILE_P row
// descriptors. Macros: TILE_P (64 or 128), TILE_N (64, 128, 256 or 512), STAGES (2 to 4),
// PRODUCERS (1 or 2), WARPS_M = TILE_P / 16 and WARPS_N = 1, KC = 64, FILTER (3: R = S = 3,
// filters held in registers; 5: R = S = 5, STAGED only; 0: any size, the filters read through
// the cache per tap) and
// C_SPLIT (1 when undefined); with STAGED, (STAGES - 1) input buffers of staged_rows(p) *
// W * STAGED_PIXEL bytes after the stages, then the rows' descriptors and a 16-byte zero row.
#define WG_N (TILE_N > 256 ? 256 : TILE_N)
#define M_GROUPS (TILE_P / 64)
#define CONSUMERS (M_GROUPS * (TILE_N / WG_N))
#define THREADS (128 * (CONSUMERS + PRODUCERS))
#define PRODUCER_THREADS (128 * PRODUCERS)
#include "dwsep_tc.cuh"
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "dwsep_wgmma needs sm_90a (wgmma.mma_async)"
#endif
#if KC != 64 || WARPS_N != 1 || WARPS_M * 16 != TILE_P || TILE_P % 64 != 0 || STAGES < 2 || \
    STAGES > 7 || PRODUCERS < 1
#error "dwsep_wgmma: KC = 64, WARPS_N = 1, WARPS_M = TILE_P / 16, TILE_P a multiple of 64, 2 <= STAGES <= 7, PRODUCERS >= 1"
#endif
// Up to 2 blocks a multiprocessor where their registers allow (no 256-column accumulators,
// no 3x3 filter taps held in registers).
#define MIN_BLOCKS ((THREADS <= 256 && WG_N <= 128 && FILTER == 0) ? 2 : 1)
#define FULL_BARRIER 1                    // ids 1 .. STAGES (0 is __syncthreads)
#define EMPTY_BARRIER (1 + STAGES)        // ids STAGES + 1 .. 2 STAGES
#define CONSUMERS_BARRIER (1 + 2 * STAGES)  // the consumers alone

#include "dwsep_wgmma.cuh"

#ifndef C_SPLIT
#define C_SPLIT 1
#endif
#ifndef STAGED
#define STAGED 0
#endif
#if C_SPLIT > 1
#define CLUSTER __cluster_dims__(1, 1, C_SPLIT)
#if STAGED
#define WGMMA_KERNEL dwsep_wgmma_split_staged
#else
#define WGMMA_KERNEL dwsep_wgmma_split
#endif
#define RED_STRIDE (TILE_N + 8)  // floats a row of partial sums: a warp's float2 stores conflict-free
#if TILE_P % C_SPLIT
#error "dwsep_wgmma_split: C_SPLIT must divide TILE_P"
#endif

// A consumer's accumulators (the layout of store_accumulators) into the block's partial sums
// red [TILE_P][RED_STRIDE].
__device__ __forceinline__ void store_partial_sums(const float (&acc)[WG_N / 2], float* red,
                                                   int m_group, int n_group) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  float* r0 = red + (64 * m_group + 16 * warp + (lane >> 2)) * RED_STRIDE + WG_N * n_group +
              2 * (lane & 3);
#pragma unroll
  for (int n = 0; n < WG_N / 8; ++n) {
    *reinterpret_cast<float2*>(r0 + 8 * n) = make_float2(acc[4 * n], acc[4 * n + 1]);
    *reinterpret_cast<float2*>(r0 + 8 * RED_STRIDE + 8 * n) =
        make_float2(acc[4 * n + 2], acc[4 * n + 3]);
  }
}

// Every block of the cluster: rows [rank * TILE_P / C_SPLIT, + TILE_P / C_SPLIT) of the tile
// summed over the cluster's partial sums, the bias added, written to y.
__device__ __forceinline__ void cluster_sum_store(const float* red, elem_t* __restrict__ y,
                                                  const elem_t* __restrict__ b_pw,
                                                  const DwsepParams& p, int pix0, int k0) {
  constexpr int ROWS = TILE_P / C_SPLIT, QUADS = TILE_N / 4;
  cluster_sync();  // every block's partial sums are in place
  const int rank = (int)cluster_rank(), pixels = p.N * p.P * p.Q;
  const bool quads = p.K % 4 == 0;
  for (int e = threadIdx.x; e < ROWS * QUADS; e += THREADS) {
    const int row = rank * ROWS + e / QUADS, col = 4 * (e % QUADS);
    const int pix = pix0 + row, k = k0 + col;
    if (pix >= pixels || k >= p.K) continue;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int r = 0; r < C_SPLIT; ++r) {
      const float4 part = cluster_load4(red + row * RED_STRIDE + col, (u32)r);
      v[0] += part.x, v[1] += part.y, v[2] += part.z, v[3] += part.w;
    }
    if (p.pw_bias)
#pragma unroll
      for (int t = 0; t < 4; ++t)
        if (k + t < p.K) v[t] += to_float(b_pw[k + t]);
    elem_t* out = y + (long)pix * p.K + k;
    if (quads) {
      *reinterpret_cast<uint2*>(out) = make_uint2(pack_pair(v[0], v[1]), pack_pair(v[2], v[3]));
    } else {
#pragma unroll
      for (int t = 0; t < 4; ++t)
        if (k + t < p.K) out[t] = from_float(v[t]);
    }
  }
  cluster_sync();  // the other blocks have read this block's partial sums
}
#else
#define CLUSTER
#if STAGED
#define WGMMA_KERNEL dwsep_wgmma_staged
#else
#define WGMMA_KERNEL dwsep_wgmma
#endif
#endif

#if STAGED
#if STAGES < 3
#error "dwsep_wgmma_staged: STAGES >= 3 (its copies run STAGES - 2 chunks ahead)"
#endif
#define LEAD (STAGES - 2)                    // chunks whose copies run ahead of the fill
#define INPUT_BUFFERS (LEAD + 1)
#define PRODUCERS_BARRIER (2 + 2 * STAGES)  // the producers alone (above CONSUMERS_BARRIER)
#include "dwsep_staged.cuh"
#endif

extern "C" __global__ void CLUSTER __launch_bounds__(THREADS, MIN_BLOCKS)
WGMMA_KERNEL(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
             const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
             const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
             elem_t* __restrict__ y, DwsepParams p) {
#if FILTER > 0
  p.R = FILTER;
  p.S = FILTER;
#endif
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  // [STAGES][A: TILE_P rows | B: TILE_N rows] of 128 bytes, each tile 1024-byte aligned (with
  // C_SPLIT > 1 the partial sums over them once the pipeline is done), then the rows
  unsigned char* stages = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  constexpr int STAGE_BYTES = (TILE_P + TILE_N) * ROW_BYTES;
#if C_SPLIT > 1
  constexpr int RED_BYTES = 4 * TILE_P * RED_STRIDE;
  constexpr int REGION = STAGES * STAGE_BYTES > RED_BYTES ? STAGES * STAGE_BYTES : RED_BYTES;
#else
  constexpr int REGION = STAGES * STAGE_BYTES;
#endif
#if STAGED
  const int in_rows = staged_rows(p), input_bytes = PARAM_BYTES + in_rows * p.W * STAGED_PIXEL;
  unsigned char* inputs = stages + REGION;
  RowTaps* rows = reinterpret_cast<RowTaps*>(inputs + INPUT_BUFFERS * input_bytes);
  unsigned char* zero_row = reinterpret_cast<unsigned char*>(rows + TILE_P);  // 16 bytes of zeros
  if (threadIdx.x < 4) reinterpret_cast<u32*>(zero_row)[threadIdx.x] = 0u;
#else
  RowTaps* rows = reinterpret_cast<RowTaps*>(stages + REGION);
#endif

  const int k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const int linear = blockIdx.y * gridDim.x + blockIdx.x;
  const int k0 = (linear % k_tiles) * TILE_N, pix0 = (linear / k_tiles) * TILE_P;
  const int all_chunks = (p.MC + 63) / 64;
#if C_SPLIT > 1  // this block's chunks: [first, first + chunks)
  const int first = (int)blockIdx.z * all_chunks / C_SPLIT;
  const int chunks = ((int)blockIdx.z + 1) * all_chunks / C_SPLIT - first;
#else
  const int first = 0, chunks = all_chunks;
#endif
  const int wg = threadIdx.x >> 7;

#if STAGED
  const int first_row = first_input_row(p, pix0);
  staged_rows_of(rows, p, pix0, first_row);
#else
  rows_of(rows, p, pix0);
#endif
  __syncthreads();

#if STAGED
  if (wg >= CONSUMERS) {  // a producer: chunk c + LEAD's copies, then chunk c's depthwise
    const int t = threadIdx.x - 128 * CONSUMERS;
    for (int c = 0; c < LEAD; ++c) {  // stages 0 .. LEAD - 1 are free
      if (c < chunks) {
        load_weight(stages + c * STAGE_BYTES + TILE_P * ROW_BYTES, w_pw, p, k0, (first + c) * 64,
                    t);
        load_input(inputs + c * input_bytes, x, w_dw, scale, shift, p, first_row, in_rows,
                   (first + c) * 64, t);
      }
      cp_async_commit();  // one group a chunk, empty past the last
    }
    for (int c = 0; c < chunks; ++c) {
      cp_async_wait<LEAD - 1>();  // this thread's copies of chunk c landed
      // every producer's copies of chunk c landed, and its fill of chunk c - 1 is done
      asm volatile("bar.sync %0, %1;\n" ::"n"(PRODUCERS_BARRIER), "n"(PRODUCER_THREADS)
                   : "memory");
      const int ahead = c + LEAD;
      if (ahead < chunks) {
        if (ahead >= STAGES) barrier_wait(EMPTY_BARRIER + ahead % STAGES);
        load_weight(stages + (ahead % STAGES) * STAGE_BYTES + TILE_P * ROW_BYTES, w_pw, p, k0,
                    (first + ahead) * 64, t);
        // the buffer of chunk c - 1, whose fill every producer has finished
        load_input(inputs + (ahead % INPUT_BUFFERS) * input_bytes, x, w_dw, scale, shift, p,
                   first_row, in_rows, (first + ahead) * 64, t);
      }
      cp_async_commit();
      const int s = c % STAGES;
      fill_staged(stages + s * STAGE_BYTES, t, rows, x, w_dw, scale, shift, p, (first + c) * 64,
                  inputs + (c % INPUT_BUFFERS) * input_bytes, smem_u32(zero_row));
      fence_proxy_async();  // this thread's stores and landed copies, visible to wgmma
      barrier_arrive(FULL_BARRIER + s);
    }
#if C_SPLIT == 1
    return;
#endif
  } else {
#else
  if (wg >= CONSUMERS) {  // a producer: weight copies and the depthwise, chunk after chunk
    const int t = threadIdx.x - 128 * CONSUMERS;
    for (int c = 0; c < chunks; ++c) {
      const int s = c % STAGES;
      if (c >= STAGES) barrier_wait(EMPTY_BARRIER + s);  // chunk c - STAGES's wgmma done
      unsigned char* a = stages + s * STAGE_BYTES;
      load_weight(a + TILE_P * ROW_BYTES, w_pw, p, k0, (first + c) * 64, t);
      cp_async_commit();
      fill_chunk(a, t, rows, x, w_dw, scale, shift, p, (first + c) * 64);
      cp_async_wait<0>();
      fence_proxy_async();  // this thread's stores and copies, visible to wgmma
      barrier_arrive(FULL_BARRIER + s);
    }
#if C_SPLIT == 1
    return;
#endif
  } else {
#endif
    const int m_group = wg % M_GROUPS, n_group = wg / M_GROUPS;  // this consumer's part
    float acc[WG_N / 2];
#pragma unroll
    for (int i = 0; i < WG_N / 2; ++i) acc[i] = 0.0f;
    keep_in_registers(acc);  // nothing but wgmma touches them until the last wait
    for (int c = 0; c < chunks; ++c) {
      const int s = c % STAGES;
      unsigned char* a = stages + s * STAGE_BYTES;
      barrier_wait(FULL_BARRIER + s);
      const u64 da = sw128_desc(a + 64 * m_group * ROW_BYTES);
      const u64 db = sw128_desc(a + (TILE_P + WG_N * n_group) * ROW_BYTES);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_k16(acc, da + 2 * kk, db + 2 * kk);  // 32 bytes a step
      wgmma_commit();
      wgmma_wait<1>();  // chunk c - 1's done: its stage goes back to the producers
      if (c >= 1 && c - 1 + STAGES < chunks) barrier_arrive(EMPTY_BARRIER + (c - 1) % STAGES);
    }
    wgmma_wait<0>();
    keep_in_registers(acc);
#if C_SPLIT > 1
    // every consumer's wgmma done: the stages hold the partial sums from here
    asm volatile("bar.sync %0, %1;\n" ::"n"(CONSUMERS_BARRIER), "n"(128 * CONSUMERS) : "memory");
    store_partial_sums(acc, reinterpret_cast<float*>(stages), m_group, n_group);
#else
    store_accumulators(acc, y, b_pw, p, pix0 + 64 * m_group, k0 + WG_N * n_group);
#endif
  }
#if C_SPLIT > 1
  cluster_sum_store(reinterpret_cast<const float*>(stages), y, b_pw, p, pix0, k0);
#endif
}
