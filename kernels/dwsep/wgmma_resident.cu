// dwsep_wgmma_resident: the fused depthwise-separable convolution forward on Hopper's
// warpgroup matrix instructions (sm_90a), the depthwise output of a block's pixels resident in
// shared memory for every channel, so that it is computed once per pixel tile however many
// output channels there are.
//
// A block owns TILE_P consecutive output pixels (n, p, q flattened) and the output-channel
// passes blockIdx.y, blockIdx.y + gridDim.y, ... (TILE_N channels each). Its warpgroups:
//  - consumers, one per 64 pixels and WG_N (at most 256) channels of a pass: each issues the
//    m64nWG_Nk16 wgmma of its part over the channel chunks, then writes its outputs (bias
//    added) at the end of the pass and starts the next one;
//  - PRODUCERS producers walk the same (pass, chunk) steps: each step's pointwise weight chunk
//    [TILE_N][64] by cp.async into one of STAGES stages; in the first pass also the chunk's
//    activated depthwise values (dwsep_wgmma.cuh's fill_chunk) into the resident A tile of
//    that chunk. Later passes read A as it stands.
// Named barriers FULL (producers arrive, consumers wait) and EMPTY (the reverse) per stage.
// A producer hands a step over LAG = STAGES - 2 steps late, so that the weight copies of
// LAG + 1 steps are in flight at once (a later hand-over could wait on a stage that the
// consumers free only after that very step: STAGES - 2 is the most that cannot deadlock).
//
// Dynamic shared memory (dwsep/families.py): 1024 (alignment) + STAGES * TILE_N * 128 + chunks
// * TILE_P * 128 bytes (chunks = MC / 64 rounded up) and TILE_P row descriptors (with BULK,
// the stages' mbarriers after them: 8 + 8 * STAGES bytes more). Macros:
// TILE_P (64 or 128), TILE_N (64 to 256), STAGES (2 to 7), PRODUCERS (1 or 2), WARPS_M =
// TILE_P / 16, WARPS_N = 1, KC = 64, FILTER (3: R = S = 3 in registers; 0: any size).
//
// With STAGED and K_SHARE 1 (dwsep_wgmma_bulk_staged, BULK) the first pass's depthwise reads each
// chunk's input rows staged in shared memory (dwsep_staged.cuh: copied by cp.async INPUT_LEAD
// chunks ahead, with the chunk's taps, scales and shifts; 3x3 and 5x5 on the tensor cores), not x: INPUT_LEAD +
// 1 input buffers after the stages' mbarriers, then a 16-byte zero row.
//
// With K_SHARE > 1 (dwsep_wgmma_cluster) the K_SHARE blocks of a pixel tile (grid y) form a
// thread-block cluster that computes the tile's depthwise once between them: before the
// passes, the producers of cluster block r compute chunks r, r + K_SHARE, ... and store each
// into the resident A of every block of the cluster (distributed shared memory); one cluster
// barrier later every block holds every chunk and runs its passes as above. With STAGED
// (`staged` 1) those chunks are computed from input rows staged as dwsep_wgmma_bulk_staged
// stages them, in INPUT_LEAD + 1 input buffers laid over the weight's stages (the passes have
// not begun), and a 16-byte zero row after the rows' descriptors (and mbarriers).
#define WG_N (TILE_N > 256 ? 256 : TILE_N)
#define M_GROUPS (TILE_P / 64)
#define CONSUMERS (M_GROUPS * (TILE_N / WG_N))
#define THREADS (128 * (CONSUMERS + PRODUCERS))
#define PRODUCER_THREADS (128 * PRODUCERS)
#include "dwsep_tc.cuh"
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "dwsep_wgmma_resident needs sm_90a (wgmma.mma_async)"
#endif
#if KC != 64 || WARPS_N != 1 || WARPS_M * 16 != TILE_P || TILE_P % 64 != 0 || STAGES < 2 || \
    STAGES > 7 || PRODUCERS < 1
#error "dwsep_wgmma_resident: KC = 64, WARPS_N = 1, WARPS_M = TILE_P / 16, TILE_P a multiple of 64, 2 <= STAGES <= 7, PRODUCERS >= 1"
#endif
#define FULL_BARRIER 1              // ids 1 .. STAGES (0 is __syncthreads)
#define EMPTY_BARRIER (1 + STAGES)  // ids STAGES + 1 .. 2 STAGES
#define LAG (STAGES - 2)            // steps a producer's hand-over trails its copies
#ifndef K_SHARE
#define K_SHARE 1
#endif

#include "dwsep_wgmma.cuh"
#include "dwsep_bulk.cuh"

#ifndef BULK
#define BULK 0
#endif
#if BULK
// dwsep_wgmma_bulk: the pointwise weight packed beforehand (dwsep_wgmma_bulk_pack) into the
// stages' own image, [K tiles][chunks][TILE_N rows of 128 bytes, swizzled], so that a stage
// arrives by one bulk copy (the TMA engine) issued by one producer thread and signalled on the
// stage's mbarrier, instead of TILE_N * 8 cp.async spread over the producers.
#ifndef STAGED
#define STAGED 0
#endif
#if K_SHARE > 1
#define RESIDENT_KERNEL dwsep_wgmma_cluster
#define PACK_KERNEL dwsep_wgmma_cluster_pack
#elif STAGED
#define RESIDENT_KERNEL dwsep_wgmma_bulk_staged
#define PACK_KERNEL dwsep_wgmma_bulk_staged_pack
#else
#define RESIDENT_KERNEL dwsep_wgmma_bulk
#define PACK_KERNEL dwsep_wgmma_bulk_pack
#endif

extern "C" __global__ void PACK_KERNEL(const elem_t* __restrict__ w_pw,
                                                 unsigned char* __restrict__ packed,
                                                 DwsepParams p) {
  pack_stages(w_pw, packed, p);
}
#elif K_SHARE > 1
#define RESIDENT_KERNEL dwsep_wgmma_cluster
#else
#define RESIDENT_KERNEL dwsep_wgmma_resident
#endif

#if STAGED
#if !BULK && K_SHARE == 1
#error "dwsep_wgmma_bulk_staged: BULK (its weight's copies are not cp.async)"
#endif
#define INPUT_LEAD 2  // chunks whose input copies run ahead of the fill
#define INPUT_BUFFERS (INPUT_LEAD + 1)
#define PRODUCERS_BARRIER 15  // the producers alone (above the stages' 2 * STAGES ids)
#include "dwsep_staged.cuh"
#endif

#if K_SHARE > 1
#define CLUSTER __cluster_dims__(1, K_SHARE, 1)
#define SHARE_BARRIER 15  // the producers alone, between their chunks and sharing them
#if 2 * STAGES + 1 >= SHARE_BARRIER
#error "dwsep_wgmma_cluster: the producers' barrier id must lie above the stages' (STAGES <= 6)"
#endif
// This block's chunks (rank, rank + K_SHARE, ...), computed by the producers (thread t of
// PRODUCER_THREADS) into this block's resident A and copied, 16 bytes at a time, to the same
// place in the other blocks of the cluster.
__device__ __forceinline__ void fill_and_share(unsigned char* resident, int chunks, int t,
                                               const RowTaps* rows, const elem_t* __restrict__ x,
                                               const elem_t* __restrict__ w_dw,
                                               const elem_t* __restrict__ scale,
                                               const elem_t* __restrict__ shift,
                                               const DwsepParams& p, int rank
#if STAGED
                                               , unsigned char* inputs, int input_bytes,
                                               int first_row, int in_rows, u32 zero_row
#endif
) {
  constexpr int CHUNK_BYTES = TILE_P * ROW_BYTES;
#if STAGED
  // chunk rank + i K_SHARE from input buffer i % INPUT_BUFFERS, whose copies run INPUT_LEAD
  // chunks ahead (one cp.async group a chunk, empty past the last), as in the passes of
  // dwsep_wgmma_bulk_staged
  const int mine = (chunks - rank + K_SHARE - 1) / K_SHARE;
  for (int i = 0; i < INPUT_LEAD; ++i) {
    if (i < mine)
      load_input(inputs + i * input_bytes, x, w_dw, scale, shift, p, first_row, in_rows,
                 (rank + i * K_SHARE) * 64, t);
    cp_async_commit();
  }
  for (int i = 0; i < mine; ++i) {
    const int c = rank + i * K_SHARE;
    cp_async_wait<INPUT_LEAD - 1>();  // this thread's copies of chunk c landed
    // every producer's copies of chunk c landed, and its fill of the chunk before is done
    asm volatile("bar.sync %0, %1;\n" ::"n"(SHARE_BARRIER), "n"(PRODUCER_THREADS) : "memory");
    if (i + INPUT_LEAD < mine)  // into the buffer of the chunk before
      load_input(inputs + ((i + INPUT_LEAD) % INPUT_BUFFERS) * input_bytes, x, w_dw, scale,
                 shift, p, first_row, in_rows, (c + INPUT_LEAD * K_SHARE) * 64, t);
    cp_async_commit();
    const unsigned char* staged = inputs + (i % INPUT_BUFFERS) * input_bytes;
    fill_staged(resident + c * CHUNK_BYTES, t, rows, x, w_dw, scale, shift, p, c * 64, staged,
                zero_row);
  }
  cp_async_wait<0>();
#else
  for (int c = rank; c < chunks; c += K_SHARE)
    fill_chunk(resident + c * CHUNK_BYTES, t, rows, x, w_dw, scale, shift, p, c * 64);
#endif
  asm volatile("bar.sync %0, %1;\n" ::"n"(SHARE_BARRIER), "n"(PRODUCER_THREADS) : "memory");
  for (int c = rank; c < chunks; c += K_SHARE) {
    for (int off = 16 * t; off < CHUNK_BYTES; off += 16 * PRODUCER_THREADS) {
      unsigned char* piece = resident + c * CHUNK_BYTES + off;
      const uint4 v = *reinterpret_cast<const uint4*>(piece);
#pragma unroll
      for (int r = 1; r < K_SHARE; ++r)
        cluster_store16(cluster_address(piece, (u32)((rank + r) % K_SHARE)), v);
    }
  }
}
#else
#define CLUSTER
#endif

// The producer's end of a step: its copies landed (all but the newest `pending` groups), its
// stores and copies made visible to wgmma, the stage handed to the consumers.
template <int PENDING>
__device__ __forceinline__ void hand_over(int step) {
  cp_async_wait<PENDING>();
  fence_proxy_async();
  barrier_arrive(FULL_BARRIER + step % STAGES);
}
#if BULK
// hand_over with the step's stage awaited on its mbarrier.
__device__ __forceinline__ void hand_over_bulk(int step, u64* bars) {
  sm90_mbar_wait(bars + step % STAGES, (step / STAGES) & 1);
  fence_proxy_async();
  barrier_arrive(FULL_BARRIER + step % STAGES);
}
#endif

extern "C" __global__ void CLUSTER __launch_bounds__(THREADS, 1)
RESIDENT_KERNEL(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
                     const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
                     const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
                     elem_t* __restrict__ y, DwsepParams p) {
#if FILTER > 0
  p.R = FILTER;
  p.S = FILTER;
#endif
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  // [STAGES][TILE_N rows] of weight, then [chunks][TILE_P rows] of A, 128 bytes a row; every
  // tile 1024-byte aligned
  unsigned char* stages = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  constexpr int STAGE_BYTES = TILE_N * ROW_BYTES, CHUNK_BYTES = TILE_P * ROW_BYTES;
  const int chunks = (p.MC + 63) / 64;
  unsigned char* resident = stages + STAGES * STAGE_BYTES;
  RowTaps* rows = reinterpret_cast<RowTaps*>(resident + chunks * CHUNK_BYTES);

  const int k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const int passes = (k_tiles - (int)blockIdx.y + (int)gridDim.y - 1) / (int)gridDim.y;
  const int steps = passes * chunks;
  const int pix0 = blockIdx.x * TILE_P;
  const int wg = threadIdx.x >> 7;

  rows_of(rows, p, pix0);
#if BULK
  // the stages' mbarriers after the rows' descriptors (8-byte aligned)
  u64* bars = reinterpret_cast<u64*>(
      (reinterpret_cast<unsigned long long>(rows + TILE_P) + 7ull) & ~7ull);
  if (threadIdx.x == 0) {
    for (int s = 0; s < STAGES; ++s) sm90_mbar_init(bars + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
#endif
#if STAGED
  const int in_rows = staged_rows(p), input_bytes = PARAM_BYTES + in_rows * p.W * STAGED_PIXEL;
#if K_SHARE > 1
  // the input buffers over the weight's stages, the zero row after the rows' descriptors (and
  // mbarriers), 16-byte aligned
  unsigned char* inputs = stages;
#if BULK
  unsigned char* zero_row = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(bars + STAGES) + 15ull) & ~15ull);
#else
  unsigned char* zero_row = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(rows + TILE_P) + 15ull) & ~15ull);
#endif
#else
  // the input buffers after the mbarriers (16-byte aligned), then the zero row
  unsigned char* inputs = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(bars + STAGES) + 15ull) & ~15ull);
  unsigned char* zero_row = inputs + INPUT_BUFFERS * input_bytes;
#endif
  if (threadIdx.x < 4) reinterpret_cast<u32*>(zero_row)[threadIdx.x] = 0u;
  const int first_row = first_input_row(p, pix0);
  __syncthreads();
  staged_rows_of(rows, p, pix0, first_row);
#endif
  __syncthreads();
#if K_SHARE > 1
  cluster_sync();  // every block of the cluster runs: its shared memory takes stores
  if (wg >= CONSUMERS)
    fill_and_share(resident, chunks, threadIdx.x - 128 * CONSUMERS, rows, x, w_dw, scale, shift,
                   p, (int)cluster_rank()
#if STAGED
                   , inputs, input_bytes, first_row, in_rows, smem_u32(zero_row)
#endif
    );
  fence_proxy_async_all();
  cluster_sync();  // every chunk in every block of the cluster
  fence_proxy_async_all();
#endif

  if (wg >= CONSUMERS) {  // a producer: the weight's chunks, and in the first pass A's
    const int t = threadIdx.x - 128 * CONSUMERS;
    int c = 0, pass = 0;
#if STAGED && K_SHARE == 1
    for (int i = 0; i < INPUT_LEAD; ++i) {  // one cp.async group a chunk, empty past the last
      if (i < chunks)
        load_input(inputs + i * input_bytes, x, w_dw, scale, shift, p, first_row, in_rows,
                   i * 64, t);
      cp_async_commit();
    }
#endif
    for (int step = 0; step < steps; ++step) {
      const int s = step % STAGES;
      if (step >= STAGES) barrier_wait(EMPTY_BARRIER + s);  // step - STAGES's wgmma done
      const int k0 = ((int)blockIdx.y + pass * (int)gridDim.y) * TILE_N;
#if BULK
      if (t == 0)  // the packed stage of (k tile, chunk), STAGE_BYTES in one piece
        bulk_copy(stages + s * STAGE_BYTES,
                  reinterpret_cast<const unsigned char*>(w_pw) +
                      ((long)(k0 / TILE_N) * chunks + c) * STAGE_BYTES,
                  STAGE_BYTES, bars + s);
#else
      load_weight(stages + s * STAGE_BYTES, w_pw, p, k0, c * 64, t);
      cp_async_commit();
#endif
#if STAGED && K_SHARE == 1
      if (pass == 0) {
        cp_async_wait<INPUT_LEAD - 1>();  // this thread's copies of chunk c landed
        // every producer's copies of chunk c landed, and its fill of chunk c - 1 is done
        asm volatile("bar.sync %0, %1;\n" ::"n"(PRODUCERS_BARRIER), "n"(PRODUCER_THREADS)
                     : "memory");
        const int ahead = c + INPUT_LEAD;  // into the buffer of chunk c - 1
        if (ahead < chunks)
          load_input(inputs + (ahead % INPUT_BUFFERS) * input_bytes, x, w_dw, scale, shift, p,
                     first_row, in_rows, ahead * 64, t);
        cp_async_commit();
        const unsigned char* staged = inputs + (c % INPUT_BUFFERS) * input_bytes;
        fill_staged(resident + c * CHUNK_BYTES, t, rows, x, w_dw, scale, shift, p, c * 64,
                    staged, smem_u32(zero_row));
      }
#else
      if (K_SHARE == 1 && pass == 0)
        fill_chunk(resident + c * CHUNK_BYTES, t, rows, x, w_dw, scale, shift, p, c * 64);
#endif
#if BULK
      if (step >= LAG) hand_over_bulk(step - LAG, bars);
#else
      if (step >= LAG) hand_over<LAG>(step - LAG);
#endif
      if (++c == chunks) c = 0, ++pass;
    }
#if BULK
    for (int step = max(steps - LAG, 0); step < steps; ++step) hand_over_bulk(step, bars);
#else
    for (int step = max(steps - LAG, 0); step < steps; ++step) hand_over<0>(step);
#endif
    return;
  }

  const int m_group = wg % M_GROUPS, n_group = wg / M_GROUPS;  // this consumer's part
  float acc[WG_N / 2];
  for (int pass = 0, step = 0; pass < passes; ++pass) {
#pragma unroll
    for (int i = 0; i < WG_N / 2; ++i) acc[i] = 0.0f;
    keep_in_registers(acc);
    for (int c = 0; c < chunks; ++c, ++step) {
      const int s = step % STAGES;
      barrier_wait(FULL_BARRIER + s);
      const u64 da = sw128_desc(resident + c * CHUNK_BYTES + 64 * m_group * ROW_BYTES);
      const u64 db = sw128_desc(stages + s * STAGE_BYTES + WG_N * n_group * ROW_BYTES);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_k16(acc, da + 2 * kk, db + 2 * kk);  // 32 bytes a step
      wgmma_commit();
      wgmma_wait<1>();  // the pass's previous step is done: its stage goes back
      if (c >= 1 && step - 1 + STAGES < steps)
        barrier_arrive(EMPTY_BARRIER + (step - 1) % STAGES);
    }
    wgmma_wait<0>();  // the pass's last step too
    keep_in_registers(acc);
    if (step - 1 + STAGES < steps) barrier_arrive(EMPTY_BARRIER + (step - 1) % STAGES);
    store_accumulators(acc, y, b_pw, p, pix0 + 64 * m_group,
                       ((int)blockIdx.y + pass * (int)gridDim.y) * TILE_N + WG_N * n_group);
  }
}
