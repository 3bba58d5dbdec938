// dwsep_wgmma_ring: the fused depthwise-separable convolution forward on Hopper's warpgroup
// matrix instructions (sm_90a), for wide pairs: the K_SHARE blocks of a thread-block cluster
// (grid y) own one tile of TILE_P output pixels (n, p, q flattened) and K_SHARE consecutive
// tiles of TILE_N output channels, one each, and compute the tile's depthwise once between
// them, chunk by chunk, while their tensor cores work on the chunks before.
//
// Every block runs the chunks of 64 depthwise channels through two rings of its shared
// memory, 128-byte swizzled and K-major: A_STAGES stages of a chunk's A tile (TILE_P rows)
// and STAGES stages of its pointwise weight tile (TILE_N rows). Its warpgroups:
//  - PRODUCERS producers: chunk c is computed by the cluster's block c % K_SHARE, from the
//    chunk's input rows staged in shared memory (dwsep_staged.cuh, the copies INPUT_LEAD of
//    its chunks ahead; 3x3 and 5x5 on the tensor cores) into its own A stage; one thread then
//    sends the tile to the same stage of every other block by bulk copies (the TMA engine,
//    shared memory to shared memory), each signalled on that block's FULL_A mbarrier, and
//    signals its own. Before it computes chunk c the block waits on its own EMPTY_A mbarrier
//    of the stage, on which the consumers of every block of the cluster arrive once chunk
//    c - A_STAGES's wgmma are done with it;
//  - consumers, one per 64 pixels and WG_N (at most 256) channels: per chunk they wait on
//    FULL_A and FULL_B, issue the m64nWG_Nk16 wgmma, and once the chunk before is done they
//    give its stages back: an arrival on the EMPTY_A mbarrier of the block that computes the
//    A stage's next chunk, and (thread 0) the A bytes that stage expects next and the bulk
//    copy of the next weight tile into the freed B stage, from the weight packed by
//    dwsep_wgmma_ring_pack (dwsep_bulk.cuh).
// So no stage holds every channel (any C fits), the depthwise runs beside the GEMM,
// A_STAGES - 2 chunks ahead, and a block computes 1 / K_SHARE of it. The blocks of the last
// cluster past K (the K tiles rounded up to K_SHARE) compute their chunks and write no
// outputs.
//
// Dynamic shared memory (dwsep/families.py): 1024 (alignment) + (STAGES * TILE_N + A_STAGES *
// TILE_P) * 128 bytes, TILE_P row descriptors, 2 * A_STAGES + STAGES mbarriers (8-byte
// aligned), INPUT_BUFFERS input buffers of PARAM_BYTES + staged_rows(p) * W * STAGED_PIXEL
// bytes (16-byte aligned) and a 16-byte zero row. Macros: TILE_P (64 or 128), TILE_N (128 or
// 256), STAGES (2 to 8), A_STAGES (2 to 16), PRODUCERS (1 or 2), WARPS_M = TILE_P / 16,
// WARPS_N = 1, KC = 64, FILTER (3 or 5: R = S on the tensor cores; 0: any size on the CUDA
// cores) and K_SHARE (2 to 8).
#define WG_N (TILE_N > 256 ? 256 : TILE_N)
#define M_GROUPS (TILE_P / 64)
#define CONSUMERS (M_GROUPS * (TILE_N / WG_N))
#define THREADS (128 * (CONSUMERS + PRODUCERS))
#define PRODUCER_THREADS (128 * PRODUCERS)
#include "dwsep_tc.cuh"
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "dwsep_wgmma_ring needs sm_90a (wgmma.mma_async)"
#endif
#if KC != 64 || WARPS_N != 1 || WARPS_M * 16 != TILE_P || TILE_P % 64 != 0 || STAGES < 2 || \
    STAGES > 8 || A_STAGES < 2 || A_STAGES > 16 || PRODUCERS < 1 || K_SHARE < 2 || K_SHARE > 8
#error "dwsep_wgmma_ring: KC = 64, WARPS_N = 1, WARPS_M = TILE_P / 16, TILE_P a multiple of 64, 2 <= STAGES <= 8, 2 <= A_STAGES <= 16, PRODUCERS >= 1, 2 <= K_SHARE <= 8"
#endif
#include "dwsep_wgmma.cuh"
#include "dwsep_bulk.cuh"
#define INPUT_LEAD 2  // a block's chunks whose input copies run ahead of its fill
#define INPUT_BUFFERS (INPUT_LEAD + 1)
#define PRODUCERS_BARRIER 1  // the producers alone
#define CONSUMERS_BARRIER 2  // the consumers alone
#include "dwsep_staged.cuh"

#define A_BYTES (TILE_P * ROW_BYTES)
#define B_BYTES (TILE_N * ROW_BYTES)

extern "C" __global__ void dwsep_wgmma_ring_pack(const elem_t* __restrict__ w_pw,
                                                 unsigned char* __restrict__ packed,
                                                 DwsepParams p) {
  pack_stages(w_pw, packed, p);
}

// A wait on an mbarrier that other blocks of the cluster arrive on: their accesses before
// their arrivals are ordered before this thread's after it.
__device__ __forceinline__ void mbar_wait_cluster(u64* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nwait:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait;\n}\n" ::"r"(smem_u32(bar)),
      "r"(parity)
      : "memory");
}
// An arrival on the mbarrier at `remote` (cluster_address), released to the cluster.
__device__ __forceinline__ void mbar_arrive_cluster(u32 remote) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote)
               : "memory");
}
// The A tile of this block's shared memory at `a` into the same place of the cluster's block
// `rank` by a bulk copy (the TMA engine), its bytes signalled on that block's `bar`.
__device__ __forceinline__ void send_tile(const unsigned char* a, u64* bar, u32 rank) {
  asm volatile(
      "cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, "
      "[%3];\n" ::"r"(cluster_address(a, rank)), "r"(smem_u32(a)), "n"(A_BYTES),
      "r"(cluster_address(bar, rank))
      : "memory");
}

// The weight tile of chunk c into its stage, awaited on the stage's FULL_B mbarrier (thread 0
// of the consumers); a plain arrival in a block past K.
__device__ __forceinline__ void load_stage_weight(unsigned char* b_stages,
                                                  const unsigned char* packed, u64* full_b,
                                                  int c, bool computes) {
  const int s = c % STAGES;
  if (computes)
    bulk_copy(b_stages + s * B_BYTES, packed + (long)c * B_BYTES, B_BYTES, full_b + s);
  else
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(full_b + s))
                 : "memory");
}

extern "C" __global__ void __cluster_dims__(1, K_SHARE, 1) __launch_bounds__(THREADS, 1)
dwsep_wgmma_ring(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
                 const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
                 const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
                 elem_t* __restrict__ y, DwsepParams p) {
#if FILTER > 0
  p.R = FILTER;
  p.S = FILTER;
#endif
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  unsigned char* b_stages = smem_raw + (((raw + 1023u) & ~1023u) - raw);
  unsigned char* a_stages = b_stages + STAGES * B_BYTES;
  RowTaps* rows = reinterpret_cast<RowTaps*>(a_stages + A_STAGES * A_BYTES);
  u64* full_a = reinterpret_cast<u64*>(
      (reinterpret_cast<unsigned long long>(rows + TILE_P) + 7ull) & ~7ull);
  u64* empty_a = full_a + A_STAGES;
  u64* full_b = empty_a + A_STAGES;
  unsigned char* inputs = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<unsigned long long>(full_b + STAGES) + 15ull) & ~15ull);
  const int in_rows = staged_rows(p), input_bytes = PARAM_BYTES + in_rows * p.W * STAGED_PIXEL;
  unsigned char* zero_row = inputs + INPUT_BUFFERS * input_bytes;

  const int chunks = (p.MC + 63) / 64;
  const int k0 = (int)blockIdx.y * TILE_N, pix0 = (int)blockIdx.x * TILE_P;
  const bool computes = k0 < p.K;
  const int rank = (int)cluster_rank(), wg = threadIdx.x >> 7;
  const int first_row = first_input_row(p, pix0);
  if (threadIdx.x < 4) reinterpret_cast<u32*>(zero_row)[threadIdx.x] = 0u;
  if (threadIdx.x == 0) {
    for (int s = 0; s < A_STAGES; ++s) {
      sm90_mbar_init(full_a + s, 1);  // the consumers' expectation of the tile's bytes
      sm90_mbar_init(empty_a + s, K_SHARE * CONSUMERS);
    }
    for (int s = 0; s < STAGES; ++s) sm90_mbar_init(full_b + s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  staged_rows_of(rows, p, pix0, first_row);
  __syncthreads();
  cluster_sync();  // every block's mbarriers are set before any other block signals them

  if (wg >= CONSUMERS) {  // a producer: this block's chunks rank, rank + K_SHARE, ...
    const int t = threadIdx.x - 128 * CONSUMERS;
    const int mine = (chunks - rank + K_SHARE - 1) / K_SHARE;
    for (int i = 0; i < INPUT_LEAD; ++i) {  // one cp.async group a chunk, empty past the last
      if (i < mine)
        load_input(inputs + i * input_bytes, x, w_dw, scale, shift, p, first_row, in_rows,
                   (rank + i * K_SHARE) * 64, t);
      cp_async_commit();
    }
    unsigned parity = 0u;  // bit s: the phase of empty_a[s] this block awaits next
    for (int i = 0; i < mine; ++i) {
      const int c = rank + i * K_SHARE, s = c % A_STAGES;
      cp_async_wait<INPUT_LEAD - 1>();  // this thread's copies of chunk c landed
      // every producer's copies of chunk c landed, and the chunk before is computed
      asm volatile("bar.sync %0, %1;\n" ::"n"(PRODUCERS_BARRIER), "n"(PRODUCER_THREADS)
                   : "memory");
      if (i + INPUT_LEAD < mine)  // into the buffer of the chunk before
        load_input(inputs + ((i + INPUT_LEAD) % INPUT_BUFFERS) * input_bytes, x, w_dw, scale,
                   shift, p, first_row, in_rows, (c + INPUT_LEAD * K_SHARE) * 64, t);
      cp_async_commit();
      if (c >= A_STAGES) {  // every block's consumers are done with chunk c - A_STAGES
        mbar_wait_cluster(empty_a + s, (parity >> s) & 1u);
        parity ^= 1u << s;
      }
      unsigned char* a = a_stages + s * A_BYTES;
      const unsigned char* staged = inputs + (i % INPUT_BUFFERS) * input_bytes;
      fill_staged(a, t, rows, x, w_dw, scale, shift, p, c * 64, staged, smem_u32(zero_row));
      // this thread's stores, visible to the bulk copies and wgmma
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync %0, %1;\n" ::"n"(PRODUCERS_BARRIER), "n"(PRODUCER_THREADS)
                   : "memory");  // the tile is whole
      if (t == 0) {
#pragma unroll
        for (int r = 1; r < K_SHARE; ++r) send_tile(a, full_a + s, (u32)((rank + r) % K_SHARE));
        asm volatile(
            "fence.acq_rel.cta;\n"
            "mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;\n" ::"r"(
                smem_u32(full_a + s)),
            "n"(A_BYTES)
            : "memory");
      }
    }
    cp_async_wait<0>();
  } else {
    const int m_group = wg % M_GROUPS, n_group = wg / M_GROUPS;  // this consumer's part
    const unsigned char* packed =
        reinterpret_cast<const unsigned char*>(w_pw) + (long)blockIdx.y * chunks * B_BYTES;
    if (threadIdx.x == 0) {
      for (int c = 0; c < min(STAGES, chunks); ++c)
        load_stage_weight(b_stages, packed, full_b, c, computes);
      for (int c = 0; c < min(A_STAGES, chunks); ++c) sm90_mbar_expect(full_a + c, A_BYTES);
    }
    float acc[WG_N / 2];
#pragma unroll
    for (int i = 0; i < WG_N / 2; ++i) acc[i] = 0.0f;
    keep_in_registers(acc);  // nothing but wgmma touches them until the last wait
    for (int c = 0; c < chunks; ++c) {
      const int sa = c % A_STAGES, sb = c % STAGES;
      sm90_mbar_wait(full_a + sa, (c / A_STAGES) & 1);
      sm90_mbar_wait(full_b + sb, (c / STAGES) & 1);
      // (a block past K multiplies whatever its weight tiles hold: a wgmma under a branch
      // would be serialized)
      const u64 da = sw128_desc(a_stages + sa * A_BYTES + 64 * m_group * ROW_BYTES);
      const u64 db = sw128_desc(b_stages + sb * B_BYTES + WG_N * n_group * ROW_BYTES);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) wgmma_k16(acc, da + 2 * kk, db + 2 * kk);  // 32 bytes a step
      wgmma_commit();
      wgmma_wait<1>();  // chunk c - 1's wgmma are done: its stages go back
      const int done = c - 1;
      if (done >= 0 && done + A_STAGES < chunks) {
        if (threadIdx.x % 128 == 0)
          mbar_arrive_cluster(cluster_address(empty_a + done % A_STAGES,
                                              (u32)((done + A_STAGES) % K_SHARE)));
        if (threadIdx.x == 0) sm90_mbar_expect(full_a + done % A_STAGES, A_BYTES);
      }
      if (done >= 0 && done + STAGES < chunks) {
#if CONSUMERS > 1
        asm volatile("bar.sync %0, %1;\n" ::"n"(CONSUMERS_BARRIER), "n"(128 * CONSUMERS)
                     : "memory");  // every consumer is done with the weight tile
#endif
        if (threadIdx.x == 0) load_stage_weight(b_stages, packed, full_b, done + STAGES, computes);
      }
    }
    wgmma_wait<0>();
    keep_in_registers(acc);
    if (computes) store_accumulators(acc, y, b_pw, p, pix0 + 64 * m_group, k0 + WG_N * n_group);
  }
  cluster_sync();  // no block leaves while another may still reach its shared memory
}
