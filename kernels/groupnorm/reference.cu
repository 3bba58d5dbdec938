// Group-normalization backward, the farm's GPU reference: simple loops, one thread per result,
// sums in fp64, every output in fp32. The layout is read at run time (GnParams.layout: 0 NHWC,
// 1 NCHW), so one code object per element type serves both. Launch in this order:
//   groupnorm_bwd_ref_stats    one thread per (n, g): coef[2 * (n*G + g)] = {c1, c2}
//   groupnorm_bwd_ref_dx       one thread per element of x (grid-stride): dx (fp32)
//   groupnorm_bwd_ref_dparams  one thread per channel: dgamma, dbeta (fp32); independent of
//                              the other two
// Every entry is a grid-stride loop: any grid is right; see plan.reference_launches.
// groupnorm_fwd_stats makes the backward's inputs consistent (plan.stats_launches): the
// forward's mean and rstd of x (in the element type's precision), one block per (n, g),
// launched once x is filled.
#include "gn_common.cuh"

// Any block size up to REF_BLOCK threads (plan.reference_launches uses 64 for the per-group and
// per-channel loops, so that they spread over more multiprocessors, and 256 for dx).
#ifndef REF_BLOCK
#define REF_BLOCK 256
#endif

// Element (n, c, hw) of an N x C x HW tensor in the problem's layout.
__device__ __forceinline__ long ref_index(const GnParams& p, int n, int c, int hw) {
  return p.layout == 0 ? ((long)n * p.HW + hw) * p.C + c : ((long)n * p.C + c) * p.HW + hw;
}

extern "C" __global__ void __launch_bounds__(REF_BLOCK)
groupnorm_bwd_ref_stats(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                        const elem_t* __restrict__ gamma, const float* __restrict__ mean,
                        const float* __restrict__ rstd, float* __restrict__ coef, GnParams p) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (long)p.N * p.G;
       i += (long)gridDim.x * blockDim.x) {
    const int n = (int)(i / p.G), g = (int)(i % p.G);
    double sum1 = 0.0, sum2 = 0.0;  // sum gamma * dy * x, sum gamma * dy over the group
    for (int c = g * p.Cg; c < (g + 1) * p.Cg; ++c) {
      const double gm = to_float(gamma[c]);
      double ds = 0.0, db = 0.0;
      for (int hw = 0; hw < p.HW; ++hw) {
        const long e = ref_index(p, n, c, hw);
        const double d = to_float(dy[e]);
        ds += d * (double)to_float(x[e]);
        db += d;
      }
      sum1 += ds * gm;
      sum2 += db * gm;
    }
    const double m = mean[i], r = rstd[i], count = (double)p.Cg * p.HW;
    const double c1 = (sum2 * m - sum1) * r * r * r / count;
    const double c2 = -c1 * m - sum2 * r / count;
    coef[2 * i] = (float)c1;
    coef[2 * i + 1] = (float)c2;
  }
}

extern "C" __global__ void __launch_bounds__(REF_BLOCK)
groupnorm_bwd_ref_dx(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                     const elem_t* __restrict__ gamma, const float* __restrict__ rstd,
                     const float* __restrict__ coef, float* __restrict__ dx, GnParams p) {
  const long total = (long)p.N * p.C * p.HW;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
       i += (long)gridDim.x * blockDim.x) {
    int n, c;
    if (p.layout == 0) {
      c = (int)(i % p.C);
      n = (int)(i / ((long)p.HW * p.C));
    } else {
      const long row = i / p.HW;  // n * C + c
      c = (int)(row % p.C);
      n = (int)(row / p.C);
    }
    const long ng = (long)n * p.G + c / p.Cg;
    const float c1 = coef[2 * ng], c2 = coef[2 * ng + 1];
    dx[i] = to_float(dy[i]) * to_float(gamma[c]) * rstd[ng] + to_float(x[i]) * c1 + c2;
  }
}

extern "C" __global__ void __launch_bounds__(REF_BLOCK)
groupnorm_bwd_ref_dparams(const elem_t* __restrict__ x, const elem_t* __restrict__ dy,
                          const float* __restrict__ mean, const float* __restrict__ rstd,
                          float* __restrict__ dgamma, float* __restrict__ dbeta, GnParams p) {
  for (long c = blockIdx.x * (long)blockDim.x + threadIdx.x; c < p.C;
       c += (long)gridDim.x * blockDim.x) {
    const int g = (int)c / p.Cg;
    double dg = 0.0, db = 0.0;
    for (int n = 0; n < p.N; ++n) {
      const double m = mean[n * p.G + g], r = rstd[n * p.G + g];
      for (int hw = 0; hw < p.HW; ++hw) {
        const long e = ref_index(p, n, (int)c, hw);
        const double d = to_float(dy[e]);
        dg += d * ((double)to_float(x[e]) - m) * r;
        db += d;
      }
    }
    dgamma[c] = (float)dg;
    dbeta[c] = (float)db;
  }
}

// The sum over a block of REF_BLOCK threads (blockDim.x == REF_BLOCK), in every thread.
__device__ double ref_block_sum(double v, double* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int half = REF_BLOCK / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  const double total = shared[0];
  __syncthreads();  // shared is reused by the next call
  return total;
}

// mean[n*G+g] = the group's mean of x, rstd[n*G+g] = 1 / sqrt(biased variance + eps), both
// summed in fp64 (two passes: the mean, then the squared deviations from it), then rounded to
// the element type, as a forward pass in that type saves them (PyTorch's does), and stored as
// fp32: every implementation, the vendor's included, reads the same statistics.
// Launch with REF_BLOCK threads per block; any number of blocks (a grid-stride loop over the
// N * G groups).
extern "C" __global__ void __launch_bounds__(REF_BLOCK)
groupnorm_fwd_stats(const elem_t* __restrict__ x, float* __restrict__ mean,
                    float* __restrict__ rstd, GnParams p, float eps) {
  __shared__ double shared[REF_BLOCK];
  const long count = (long)p.Cg * p.HW;
  for (long i = blockIdx.x; i < (long)p.N * p.G; i += gridDim.x) {
    const int n = (int)(i / p.G), g = (int)(i % p.G);
    // Element j of the group: NHWC walks the group's Cg channels of each row, NCHW its Cg
    // contiguous planes.
    double sum = 0.0;
    for (long j = threadIdx.x; j < count; j += REF_BLOCK) {
      const int c = g * p.Cg + (int)(p.layout == 0 ? j % p.Cg : j / p.HW);
      const int hw = (int)(p.layout == 0 ? j / p.Cg : j % p.HW);
      sum += (double)to_float(x[ref_index(p, n, c, hw)]);
    }
    const double m = ref_block_sum(sum, shared) / (double)count;
    double squares = 0.0;
    for (long j = threadIdx.x; j < count; j += REF_BLOCK) {
      const int c = g * p.Cg + (int)(p.layout == 0 ? j % p.Cg : j / p.HW);
      const int hw = (int)(p.layout == 0 ? j / p.Cg : j % p.HW);
      const double d = (double)to_float(x[ref_index(p, n, c, hw)]) - m;
      squares += d * d;
    }
    const double var = ref_block_sum(squares, shared) / (double)count;
    if (threadIdx.x == 0) {  // rounded to the element type (a no-op for fp32), kept in fp32
      mean[i] = to_float(from_float((float)m));
      rstd[i] = to_float(from_float((float)(1.0 / sqrt(var + (double)eps))));
    }
  }
}
