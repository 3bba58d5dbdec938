// conv_wgmma_blockdiag: a grouped convolution whose groups are not whole k-tiles of 64 channels
// as conv_wgmma_im2col's over super-groups of `per` groups each (wgmma_im2col.cu, included
// whole, PADDED_GROUPS): super-group g's per Cg channels from g per Cg on are read as whole
// k-tiles of 64 a tap, and its per Kg outputs take the filter w' [K][R][S][width] (width: per
// Cg rounded up to 64) that expand_blockdiag writes first: output channel k keeps its group's
// C/G weights at its slot of the super-group's channels, zeros elsewhere (over the next
// super-group's channels, or those past C, that the copies bring).
#define PADDED_GROUPS 1
#include "wgmma_im2col.cu"

// The forward over super-groups of `per` groups (p: G' super-groups, per Cg channels and per
// Kg outputs each); B by the expanded filter's 2D map, or with FUSED_FILTER w's 4D map.
#if FARM_DTYPE == 0 || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __global__ void wgmma_fwd_blockdiag(const elem_t*, const elem_t*, elem_t*, ConvParams,
                                               int) {}
#else
extern "C" __global__ void __launch_bounds__(WG_THREADS, 1)
wgmma_fwd_blockdiag(const elem_t* __restrict__ x, const elem_t* __restrict__ w,
                    elem_t* __restrict__ y, ConvParams p, int per MAPS) {
  ig::im2col_tiles<false>(y, nullptr, p, 0, 1, 0, tmap_a, tmap_b, per);
}
#endif

// w' from w [K][R][S][Cg], a grid-stride loop over w''s 16-byte chunks (8 16-bit elements, any
// element type; width / 8 chunks a row): element (k, rs, j) is w's (k, rs, j - slot Cg) where
// that lies in [0, Cg), slot the place of k's group (k / Kg) among its super-group's `per`
// groups; else zero. Groups of 8 channels or more copy whole chunks (16-byte loads and stores).
extern "C" __global__ void expand_blockdiag(const unsigned short* __restrict__ w,
                                            unsigned short* __restrict__ out, int K, int RS,
                                            int Cg, int Kg, int per, int width) {
  const int row = width / 8, chunks = K * RS * row;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < chunks; i += gridDim.x * blockDim.x) {
    const int krs = i / row, k = krs / RS, c0 = (i - krs * row) * 8 - (k / Kg) % per * Cg;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (Cg % 8 == 0) {
      if (c0 >= 0 && c0 < Cg) v = *reinterpret_cast<const uint4*>(w + (long long)krs * Cg + c0);
    } else {
      unsigned short e[8];
#pragma unroll
      for (int t = 0; t < 8; ++t)
        e[t] = c0 + t >= 0 && c0 + t < Cg ? w[(long long)krs * Cg + c0 + t] : (unsigned short)0;
      v = make_uint4(e[0] | (unsigned)e[1] << 16, e[2] | (unsigned)e[3] << 16,
                     e[4] | (unsigned)e[5] << 16, e[6] | (unsigned)e[7] << 16);
    }
    reinterpret_cast<uint4*>(out)[i] = v;
  }
}
