// The split-K reduction's two helpers of backward-weight (conv_igemm, conv_wgmma): the fp32
// workspace zeroed, then converted into dw once every slice has added its partial sums.
#pragma once
// fp32 accumulation of the workspace for bwd_weight's split-K; any element type.
extern "C" __global__ void __launch_bounds__(256) igemm_zero(float* ws, int n) {
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256) ws[i] = 0.0f;
}

extern "C" __global__ void __launch_bounds__(256) igemm_reduce(const float* ws, elem_t* dw,
                                                                int n) {
  for (int i = blockIdx.x * 256 + threadIdx.x; i < n; i += gridDim.x * 256)
    dw[i] = from_float(ws[i]);
}
