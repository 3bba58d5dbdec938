// conv_wgmma_red: conv_wgmma's split backward-weight (wgmma.cu, included whole) with the
// slices' fp32 sums added into the workspace by reductions that return nothing
// (red_sums.cuh), where conv_wgmma's own code has returning atomics; the same tiles,
// pipelines, splits and endings (fused_reduce or igemm_reduce) otherwise.
#include "red_sums.cuh"
#include "wgmma.cu"
