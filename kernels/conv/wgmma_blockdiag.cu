// conv_wgmma_blockdiag: a grouped convolution of C/G below 64 channels (a divisor of 64) as
// conv_wgmma_im2col's over C / 64 super-groups of 64 channels (wgmma_im2col.cu, included
// whole), whose filter w' [K][R][S][64] expand_blockdiag writes first: output channel k keeps
// its group's C/G weights at its slot of the super-group's 64 input channels, zeros elsewhere.
#include "wgmma_im2col.cu"

// w' from w [K][R][S][Cg], a grid-stride loop over w''s elements (16-bit, any element type):
// element (k, rs, j) is w's (k, rs, j - slot Cg) where that lies in [0, Cg), slot the place of
// k's group (k / Kg) among its super-group's 64 / Cg groups; else zero.
extern "C" __global__ void expand_blockdiag(const unsigned short* __restrict__ w,
                                            unsigned short* __restrict__ out, int K, int RS,
                                            int Cg, int Kg) {
  const long long total = (long long)K * RS * 64;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    const int krs = (int)(i >> 6), j = (int)(i & 63), k = krs / RS;
    const int c = j - (k / Kg) % (64 / Cg) * Cg;
    out[i] = c >= 0 && c < Cg ? w[(long long)krs * Cg + c] : (unsigned short)0;
  }
}
