// dwsep_wgmma: the fused depthwise-separable convolution forward on Hopper's warpgroup matrix
// instructions (sm_90a: wgmma.mma_async, fp32 accumulation), for the wide pairs whose
// pointwise GEMM dominates.
//
// A block owns TILE_P consecutive output pixels (n, p, q flattened; one warpgroup of 128
// threads per 64 of them) and TILE_N output channels. Consecutive blocks take the output-channel
// tiles of one pixel tile, so its input is read from L2 by all of them. The M*C = C depthwise
// channels are streamed in chunks of 64 (128 bytes of a 16-bit row: one 128-byte swizzle atom
// per 8 rows). Per chunk:
//  - each warpgroup computes the activated depthwise values of its 64 pixels (CUDA cores,
//    fp32; each thread 4 channels of 8 pixels) into its rows of an A tile, written in the
//    128-byte-swizzled K-major layout that wgmma reads (no bank conflicts: a row's 16-byte
//    pieces are permuted by the row);
//  - the pointwise weight's chunk [TILE_N][64] arrives by cp.async, STAGES - 2 chunks ahead,
//    in the same layout;
//  - each warpgroup issues four m64nTILE_Nk16 wgmma on its A rows and the chunk's B and goes
//    on to the next chunk's depthwise while they run (two A tiles alternate; wait_group 1).
// The intermediate never leaves the chip. Multiplier 1 and C a multiple of 8.
//
// Dynamic shared memory (dwsep/families.py): 1024 (alignment) + 2 * TILE_P * 128 + STAGES *
// TILE_N * 128 bytes, and TILE_P row descriptors. Macros: TILE_P (64 or 128), TILE_N (64, 128
// or 256), STAGES (at least 3), WARPS_M = TILE_P / 16 and WARPS_N = 1 (the threads: 32 *
// WARPS_M), KC = 64, and FILTER (3: R = S = 3, filters held in registers; 0: any size, the
// filters read through the cache per tap).
#define OCC 1
#include "dwsep_tc.cuh"
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "dwsep_wgmma needs sm_90a (wgmma.mma_async)"
#endif
#if KC != 64 || WARPS_N != 1 || WARPS_M * 16 != TILE_P || TILE_P % 64 != 0 || STAGES < 3
#error "dwsep_wgmma: KC = 64, WARPS_N = 1, WARPS_M = TILE_P / 16, TILE_P a multiple of 64, STAGES >= 3"
#endif

#if FARM_DTYPE == 2
#define WGMMA_AB "bf16.bf16"
#else
#define WGMMA_AB "f16.f16"
#endif
#define ROW_BYTES 128  // one row of a chunk: 64 16-bit channels

// A shared-memory matrix descriptor: K-major rows of 128 bytes, 128-byte swizzle, 8-row groups
// 1024 bytes apart (the tile starts on a 1024-byte boundary).
__device__ __forceinline__ u64 sw128_desc(const void* tile) {
  return (u64)((smem_u32(tile) & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) |
         ((u64)1 << 62);
}

// Byte offset of the 16-byte piece `piece` (0..7) of row `row` in a 128-byte-swizzled tile.
__device__ __forceinline__ int sw128_offset(int row, int piece) {
  return row * ROW_BYTES + ((piece ^ (row & 7)) << 4);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Shared memory written by ordinary stores (and cp.async), read next by wgmma.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void keep_in_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if TILE_N == 64
// D[64 x 64] (+)= A[64 x 16] * B[64 x 16]^T, both K-major in shared memory (SW128).
__device__ __forceinline__ void wgmma_k16(float (&d)[32], u64 da, u64 db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32." WGMMA_AB " "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31},"
      " %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(da), "l"(db), "r"(1));
}
#endif
#if TILE_N == 128
// D[64 x 128] (+)= A[64 x 16] * B[128 x 16]^T, both K-major in shared memory (SW128).
__device__ __forceinline__ void wgmma_k16(float (&d)[64], u64 da, u64 db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." WGMMA_AB " "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63},"
      " %64, %65, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(da), "l"(db), "r"(1));
}
#endif
#if TILE_N == 256
// D[64 x 256] (+)= A[64 x 16] * B[256 x 16]^T, both K-major in shared memory (SW128).
__device__ __forceinline__ void wgmma_k16(float (&d)[128], u64 da, u64 db) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32." WGMMA_AB " "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63,"
      "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,"
      "%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95,"
      "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,"
      "%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127},"
      " %128, %129, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(da), "l"(db), "r"(1));
}
#endif


// Four channels as fp32 from 4 x 16 bits.
__device__ __forceinline__ void unpack4(uint2 v, float (&f)[4]) {
  unpack_pair(v.x, f[0], f[1]);
  unpack_pair(v.y, f[2], f[3]);
}

// The activated depthwise values of this warpgroup's 64 rows (first: the first of them) for
// channels [j0, j0 + 64) into the swizzled A tile `a`: thread t of the warpgroup computes
// channels j0 + 4 * (t % 16) .. + 3 for rows t / 16, + 8, ..., + 56; zeros past MC.
__device__ __forceinline__ void fill_chunk(unsigned char* a, int first, const RowTaps* rows,
                                           const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ w_dw,
                                           const elem_t* __restrict__ scale,
                                           const elem_t* __restrict__ shift,
                                           const DwsepParams& p, int j0) {
  const int t = threadIdx.x & 127, quad = t & 15, pr = t >> 4;
  const int j = j0 + 4 * quad;
  const bool live = j < p.MC;  // MC is a multiple of 8: the quad is whole or absent
  const int wc = p.W * p.C;
  float sc[4], sh[4];
#if FILTER == 3
  float f[9][4];
#endif
  if (live) {
    const uint2 s4 = __ldg(reinterpret_cast<const uint2*>(scale + j));
    const uint2 h4 = __ldg(reinterpret_cast<const uint2*>(shift + j));
    unpack4(s4, sc);
    unpack4(h4, sh);
#if FILTER == 3
    // channels j .. j + 3: 36 consecutive 16-bit taps, 8-byte aligned (j is a multiple of 4)
    const uint2* g = reinterpret_cast<const uint2*>(w_dw + j * 9);
#pragma unroll
    for (int i = 0; i < 9; ++i) {
      float v[4];
      unpack4(__ldg(g + i), v);
#pragma unroll
      for (int e = 0; e < 4; ++e) f[(4 * i + e) % 9][(4 * i + e) / 9] = v[e];
    }
#endif
  } else {
#pragma unroll
    for (int e = 0; e < 4; ++e) sc[e] = sh[e] = 0.0f;
#if FILTER == 3
#pragma unroll
    for (int i = 0; i < 9; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) f[i][e] = 0.0f;
#endif
  }
  const elem_t* xj = x + j;
  const int piece = quad >> 1, half = (quad & 1) * 8;
#pragma unroll 2
  for (int i = 0; i < 8; ++i) {
    const int row = first + pr + 8 * i;
    const RowTaps tap0 = rows[row];
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
#if FILTER == 3
#pragma unroll
      for (int r = 0; r < 3; ++r) {
        const bool row_in = (unsigned)(tap0.h0 + r) < (unsigned)p.H;
#pragma unroll
        for (int s = 0; s < 3; ++s) {
          if (!row_in || (unsigned)(tap0.w0 + s) >= (unsigned)p.W) continue;
          float v[4];
          unpack4(__ldg(reinterpret_cast<const uint2*>(xj + tap0.offset + r * wc + s * p.C)), v);
#pragma unroll
          for (int e = 0; e < 4; ++e) d[e] = fmaf(v[e], f[r * 3 + s][e], d[e]);
        }
      }
#else
      for (int r = 0; r < p.R; ++r) {
        if ((unsigned)(tap0.h0 + r) >= (unsigned)p.H) continue;
        for (int s = 0; s < p.S; ++s) {
          if ((unsigned)(tap0.w0 + s) >= (unsigned)p.W) continue;
          float v[4];
          unpack4(__ldg(reinterpret_cast<const uint2*>(xj + tap0.offset + r * wc + s * p.C)), v);
          const int rs = p.R * p.S;
          const elem_t* g = w_dw + j * rs + r * p.S + s;
#pragma unroll
          for (int e = 0; e < 4; ++e) d[e] = fmaf(v[e], to_float(__ldg(g + e * rs)), d[e]);
        }
      }
#endif
    }
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) v[e] = dwsep_activate(d[e] * sc[e] + sh[e], p.activation);
    const uint2 out = live ? make_uint2(pack_pair(v[0], v[1]), pack_pair(v[2], v[3]))
                           : make_uint2(0u, 0u);
    *reinterpret_cast<uint2*>(a + sw128_offset(row, piece) + half) = out;
  }
}

// The pointwise weight's rows [k0, k0 + TILE_N), channels [j0, j0 + 64) into a swizzled B
// stage by 16-byte cp.async (MC is a multiple of 8); zeros past K and MC.
__device__ __forceinline__ void load_weight(unsigned char* b, const elem_t* __restrict__ w_pw,
                                            const DwsepParams& p, int k0, int j0) {
  for (int e = threadIdx.x; e < TILE_N * 8; e += THREADS) {
    const int row = e >> 3, piece = e & 7;
    const int k = k0 + row, j = j0 + piece * 8;
    const bool valid = k < p.K && j < p.MC;
    cp_async16(b + sw128_offset(row, piece), valid ? w_pw + (long)k * p.MC + j : w_pw, valid);
  }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1)
dwsep_wgmma(const elem_t* __restrict__ x, const elem_t* __restrict__ w_dw,
            const elem_t* __restrict__ scale, const elem_t* __restrict__ shift,
            const elem_t* __restrict__ w_pw, const elem_t* __restrict__ b_pw,
            elem_t* __restrict__ y, DwsepParams p) {
#if FILTER > 0
  p.R = FILTER;
  p.S = FILTER;
#endif
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 raw = smem_u32(smem_raw);
  unsigned char* a_tiles = smem_raw + (((raw + 1023u) & ~1023u) - raw);  // [2][TILE_P][128 B]
  unsigned char* b_tiles = a_tiles + 2 * TILE_P * ROW_BYTES;            // [STAGES][TILE_N][128 B]
  RowTaps* rows = reinterpret_cast<RowTaps*>(b_tiles + STAGES * TILE_N * ROW_BYTES);

  const int k_tiles = (p.K + TILE_N - 1) / TILE_N;
  const int linear = blockIdx.y * gridDim.x + blockIdx.x;
  const int k0 = (linear % k_tiles) * TILE_N, pix0 = (linear / k_tiles) * TILE_P;
  const int pixels = p.N * p.P * p.Q;
  const int chunks = (p.MC + 63) / 64;
  const int wg = threadIdx.x >> 7;

#pragma unroll
  for (int s = 0; s < STAGES - 2; ++s) {
    if (s < chunks) load_weight(b_tiles + s * TILE_N * ROW_BYTES, w_pw, p, k0, s * 64);
    cp_async_commit();
  }
  rows_of(rows, p, pix0);
  __syncthreads();

  float acc[TILE_N / 2];
#pragma unroll
  for (int i = 0; i < TILE_N / 2; ++i) acc[i] = 0.0f;
  keep_in_registers(acc);  // nothing but wgmma touches them until the last wait
  for (int c = 0; c < chunks; ++c) {
    unsigned char* a = a_tiles + (c & 1) * TILE_P * ROW_BYTES;
    fill_chunk(a, 64 * wg, rows, x, w_dw, scale, shift, p, c * 64);
    cp_async_wait<STAGES - 3>();  // chunk c's weight (this thread's copies)
    fence_proxy_async();
    __syncthreads();  // A and chunk c's weight visible; every wgmma up to chunk c - 2 done
    if (c + STAGES - 2 < chunks)
      load_weight(b_tiles + ((c + STAGES - 2) % STAGES) * TILE_N * ROW_BYTES, w_pw, p, k0,
                  (c + STAGES - 2) * 64);
    cp_async_commit();
    const u64 da = sw128_desc(a + 64 * wg * ROW_BYTES);
    const u64 db = sw128_desc(b_tiles + (c % STAGES) * TILE_N * ROW_BYTES);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) wgmma_k16(acc, da + 2 * kk, db + 2 * kk);  // 32 bytes a step
    wgmma_commit();
    wgmma_wait<1>();  // chunk c - 1's done: its A tile is this warpgroup's to fill again
  }
  wgmma_wait<0>();
  keep_in_registers(acc);
  cp_async_wait<0>();

  // The accumulators: warp w of the warpgroup holds rows 16 w .. 16 w + 15; per 8 columns n,
  // acc[4n .. 4n + 1] at (lane / 4, 2 (lane % 4) + {0, 1}) and acc[4n + 2 .. 4n + 3] 8 rows on.
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const bool pairs = p.K % 2 == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int pix = pix0 + 64 * wg + 16 * warp + (lane >> 2) + 8 * half;
    if (pix >= pixels) continue;
    elem_t* out = y + (long)pix * p.K;
#pragma unroll
    for (int n = 0; n < TILE_N / 8; ++n) {
      const int k = k0 + 8 * n + 2 * (lane & 3);
      if (k >= p.K) continue;
      float v0 = acc[4 * n + 2 * half], v1 = acc[4 * n + 2 * half + 1];
      if (p.pw_bias) {
        v0 += to_float(b_pw[k]);
        v1 += k + 1 < p.K ? to_float(b_pw[k + 1]) : 0.0f;
      }
      if (pairs) {
        *reinterpret_cast<u32*>(out + k) = pack_pair(v0, v1);
      } else {
        out[k] = from_float(v0);
        if (k + 1 < p.K) out[k + 1] = from_float(v1);
      }
    }
  }
}
