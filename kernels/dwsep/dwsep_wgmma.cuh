// What the dwsep wgmma kernels share (wgmma.cu, wgmma_resident.cu): shared-memory matrix
// descriptors of 128-byte-swizzled K-major tiles, the wgmma instructions m64n{64,128,256}k16
// with fp32 accumulators, named barriers, and the producers' two jobs: a chunk of 64
// activated depthwise values per row into a swizzled A tile (fill_chunk) and the pointwise
// weight's chunk into a swizzled B tile by cp.async (load_weight). The including kernel
// defines TILE_P, TILE_N, WG_N, THREADS, PRODUCER_THREADS and FILTER, and includes
// dwsep_tc.cuh first.
#pragma once
#if TILE_P % (PRODUCER_THREADS / 8) || TILE_N % (PRODUCER_THREADS / 8)
#error "the producers' rows (PRODUCER_THREADS / 8 a pass) must divide TILE_P and TILE_N"
#endif
#if FARM_DTYPE == 2
#define WGMMA_AB "bf16.bf16"
#else
#define WGMMA_AB "f16.f16"
#endif
#define ROW_BYTES 128  // one row of a chunk: 64 16-bit channels
// a staged input pixel (dwsep_wgmma_staged): its 64 channels and 16 bytes more, so that the
// 8 pixels an ldmatrix reads fall in distinct banks
#define STAGED_PIXEL 144

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
// Named barriers over all THREADS: some warps arrive, the others wait.
__device__ __forceinline__ void barrier_arrive(int id) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}
__device__ __forceinline__ void barrier_wait(int id) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "n"(THREADS) : "memory");
}
template <int N>
__device__ __forceinline__ void keep_in_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#if WG_N == 64
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
#if WG_N == 128
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
#if WG_N == 256
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


// Eight channels as fp32 from 8 x 16 bits.
__device__ __forceinline__ void unpack8(uint4 v, float (&f)[8]) {
  unpack_pair(v.x, f[0], f[1]);
  unpack_pair(v.y, f[2], f[3]);
  unpack_pair(v.z, f[4], f[5]);
  unpack_pair(v.w, f[6], f[7]);
}

// The activation on 8 values, one branch for all of them.
__device__ __forceinline__ void activate8(float (&o)[8], int activation) {
  switch (activation) {
#define DWSEP_EACH(CASE) \
  case CASE:             \
    _Pragma("unroll") for (int e = 0; e < 8; ++e) o[e] = dwsep_activate(o[e], CASE); break;
    DWSEP_EACH(DWSEP_RELU)
    DWSEP_EACH(DWSEP_RELU6)
    DWSEP_EACH(DWSEP_SILU)
    DWSEP_EACH(DWSEP_HARDSWISH)
#undef DWSEP_EACH
    default: break;
  }
}

// The activated depthwise values of the block's TILE_P rows for channels [j0, j0 + 64) into
// the swizzled A tile `a`: producer thread t computes channels j0 + 8 * (t % 8) .. + 7 (one
// 16-byte piece of a row) for rows t / 8, + PRODUCER_THREADS / 8, ...; zeros past MC.
// STAGED_INPUT: the taps are read from the chunk's input rows staged in shared memory
// (`staged`, STAGED_PIXEL bytes a pixel, the rows' offsets in pixels of it) instead of from x.
template <bool STAGED_INPUT = false>
__device__ __forceinline__ void fill_chunk(unsigned char* a, int t, const RowTaps* rows,
                                           const elem_t* __restrict__ x,
                                           const elem_t* __restrict__ w_dw,
                                           const elem_t* __restrict__ scale,
                                           const elem_t* __restrict__ shift,
                                           const DwsepParams& p, int j0,
                                           const unsigned char* staged = nullptr) {
  const int piece = t & 7, pr = t >> 3;
  constexpr int row_step = PRODUCER_THREADS / 8, passes = TILE_P / row_step;
  const int j = j0 + 8 * piece;
  const bool live = j < p.MC;  // MC is a multiple of 8: the piece is whole or absent
  float sc[8], sh[8];
#if FILTER == 3
  float f[9][8];
#endif
  if (live) {
    unpack8(__ldg(reinterpret_cast<const uint4*>(scale + j)), sc);
    unpack8(__ldg(reinterpret_cast<const uint4*>(shift + j)), sh);
#if FILTER == 3
    // channels j .. j + 7: 72 consecutive 16-bit taps, 16-byte aligned (j is a multiple of 8)
    const uint4* g = reinterpret_cast<const uint4*>(w_dw + j * 9);
#pragma unroll
    for (int i = 0; i < 9; ++i) {
      float v[8];
      unpack8(__ldg(g + i), v);
#pragma unroll
      for (int e = 0; e < 8; ++e) f[(8 * i + e) % 9][(8 * i + e) / 9] = v[e];
    }
#endif
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) sc[e] = sh[e] = 0.0f;
#if FILTER == 3
#pragma unroll
    for (int i = 0; i < 9; ++i)
#pragma unroll
      for (int e = 0; e < 8; ++e) f[i][e] = 0.0f;
#endif
  }
  const int wc = p.W * p.C;
#pragma unroll 2
  for (int i = 0; i < passes; ++i) {
    const int row = pr + row_step * i;
    const RowTaps tap0 = rows[row];
    float d[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) d[e] = 0.0f;
    if (live) {
      const elem_t* base = x + tap0.offset + j;  // the window's top-left tap, maybe outside x
      const unsigned char* sbase = staged + tap0.offset * STAGED_PIXEL + 16 * piece;
#if FILTER == 3
      uint4 v[9];  // the 9 taps' loads first, then their products
#pragma unroll
      for (int r = 0; r < 3; ++r) {
        const bool row_in = (unsigned)(tap0.h0 + r) < (unsigned)p.H;
#pragma unroll
        for (int s = 0; s < 3; ++s) {
          const bool in = row_in && (unsigned)(tap0.w0 + s) < (unsigned)p.W;
          if (STAGED_INPUT)
            v[3 * r + s] = in ? *reinterpret_cast<const uint4*>(
                                    sbase + (r * p.W + s) * STAGED_PIXEL)
                              : make_uint4(0u, 0u, 0u, 0u);
          else
            v[3 * r + s] = in ? __ldg(reinterpret_cast<const uint4*>(base + r * wc + s * p.C))
                              : make_uint4(0u, 0u, 0u, 0u);
        }
      }
#pragma unroll
      for (int k = 0; k < 9; ++k) {
        float u[8];
        unpack8(v[k], u);
#pragma unroll
        for (int e = 0; e < 8; ++e) d[e] = fmaf(u[e], f[k][e], d[e]);
      }
#else
      const int rs = p.R * p.S;
      for (int r = 0; r < p.R; ++r) {
        if ((unsigned)(tap0.h0 + r) >= (unsigned)p.H) continue;
        for (int s = 0; s < p.S; ++s) {
          if ((unsigned)(tap0.w0 + s) >= (unsigned)p.W) continue;
          float u[8];
          unpack8(STAGED_INPUT ? *reinterpret_cast<const uint4*>(
                                     sbase + (r * p.W + s) * STAGED_PIXEL)
                               : __ldg(reinterpret_cast<const uint4*>(base + r * wc + s * p.C)),
                  u);
          const elem_t* g = w_dw + j * rs + r * p.S + s;
#pragma unroll
          for (int e = 0; e < 8; ++e) d[e] = fmaf(u[e], to_float(__ldg(g + e * rs)), d[e]);
        }
      }
#endif
    }
    float o[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) o[e] = d[e] * sc[e] + sh[e];
    activate8(o, p.activation);
    const uint4 out = live ? make_uint4(pack_pair(o[0], o[1]), pack_pair(o[2], o[3]),
                                        pack_pair(o[4], o[5]), pack_pair(o[6], o[7]))
                           : make_uint4(0u, 0u, 0u, 0u);
    *reinterpret_cast<uint4*>(a + sw128_offset(row, piece)) = out;
  }
}

// The pointwise weight's rows [k0, k0 + TILE_N), channels [j0, j0 + 64) into a swizzled B
// stage by 16-byte cp.async from producer thread t (MC is a multiple of 8); zeros past K and MC.
__device__ __forceinline__ void load_weight(unsigned char* b, const elem_t* __restrict__ w_pw,
                                            const DwsepParams& p, int k0, int j0, int t) {
  // a thread's piece is the same in every row it copies, and so is the row's swizzle (the rows
  // step by PRODUCER_THREADS / 8, a multiple of 8)
  constexpr int rows_step = PRODUCER_THREADS / 8;
  const int piece = t & 7, j = j0 + piece * 8, first = t >> 3;
  // rows i * rows_step < live are inside K (none where the piece lies past MC)
  const int live = j < p.MC ? p.K - k0 - first : 0;
  const u32 dst = smem_u32(b + sw128_offset(first, piece));
  const elem_t* src = w_pw + (long)(k0 + first) * p.MC + j;
  const long src_step = (long)rows_step * p.MC;
#pragma unroll 4
  for (int i = 0; i < TILE_N / rows_step; ++i) {
    const bool valid = i * rows_step < live;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(
                     dst + i * rows_step * ROW_BYTES),
                 "l"(valid ? src + i * src_step : w_pw), "r"(valid ? 16 : 0));
  }
}

// A consumer's accumulators (rows 64 m of the block's pixels from pix0, columns [k0, k0 +
// WG_N)) with the pointwise bias into y: warp w of the warpgroup holds rows 16 w .. 16 w + 15;
// per 8 columns n, acc[4n .. 4n + 1] at (lane / 4, 2 (lane % 4) + {0, 1}) and acc[4n + 2 ..
// 4n + 3] 8 rows on. The bias of column pair i (columns k0 + 2 i, k0 + 2 i + 1) is loaded
// by lane i % 32 (its held[i / 32]), all in one round, and shuffled to the lanes that add it:
// a load per 8 columns, each behind the last one's store, made the epilogue wait on the
// cache's latency WG_N / 8 times.
__device__ __forceinline__ void store_accumulators(const float (&acc)[WG_N / 2],
                                                   elem_t* __restrict__ y,
                                                   const elem_t* __restrict__ b_pw,
                                                   const DwsepParams& p, int pix0, int k0) {
  const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3;
  const int pixels = p.N * p.P * p.Q;
  const int pix = pix0 + 16 * warp + (lane >> 2);
  const bool in0 = pix < pixels, in1 = pix + 8 < pixels, pairs = p.K % 2 == 0;
  elem_t* out0 = y + (long)min(pix, pixels - 1) * p.K;
  elem_t* out1 = y + (long)min(pix + 8, pixels - 1) * p.K;
  constexpr int HELD = WG_N / 64;  // WG_N / 2 column pairs over 32 lanes
  const u16* bias = reinterpret_cast<const u16*>(b_pw);
  u32 held[HELD];
#pragma unroll
  for (int h = 0; h < HELD; ++h) {
    const int k = k0 + 2 * (lane + 32 * h);
    held[h] = 0u;  // zeros past K and without a bias
    if (p.pw_bias && k < p.K)
      held[h] = pairs ? __ldg(reinterpret_cast<const u32*>(b_pw + k))
                      : (u32)__ldg(bias + k) |
                            (k + 1 < p.K ? (u32)__ldg(bias + k + 1) << 16 : 0u);
  }
#pragma unroll
  for (int n = 0; n < WG_N / 8; ++n) {
    const int k = k0 + 8 * n + 2 * (lane & 3);
    float b0, b1;  // every lane shuffles, so that the lanes past K do not leave early
    unpack_pair(__shfl_sync(0xffffffffu, held[n >> 3], (4 * n + (lane & 3)) & 31), b0, b1);
    if (k >= p.K) continue;
    const float v00 = acc[4 * n] + b0, v01 = acc[4 * n + 1] + b1;
    const float v10 = acc[4 * n + 2] + b0, v11 = acc[4 * n + 3] + b1;
    if (pairs) {
      if (in0) *reinterpret_cast<u32*>(out0 + k) = pack_pair(v00, v01);
      if (in1) *reinterpret_cast<u32*>(out1 + k) = pack_pair(v10, v11);
    } else {
      if (in0) out0[k] = from_float(v00);
      if (in1) out1[k] = from_float(v10);
      if (k + 1 < p.K) {
        if (in0) out0[k + 1] = from_float(v01);
        if (in1) out1[k + 1] = from_float(v11);
      }
    }
  }
}
