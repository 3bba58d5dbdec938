"""Grouped 2D convolution, channels-last, in three directions (conv2d_fwd, conv2d_bwd_data,
conv2d_bwd_weight): the shape record (problem.py), the operators (operator.py) and the
families conv_igemm, conv_naive, conv_direct, conv_wgmma, conv_wgmma_split, conv_grouped_mma,
conv_grouped_mma_bwd_weight, conv_dw_tma, conv_dw_tc_bwd_weight, conv_stem,
conv_stem_bwd_weight, conv_wgmma_im2col, conv_pointwise, conv_pointwise_cluster,
conv_wgmma_cluster, conv_wgmma_red, conv_wgmma_blockdiag, conv_wgmma_planes,
conv_wgmma_blockdiag_weight and conv_grouped_taps, registered in that order (the order of a
selection model's candidates and feature columns)."""

from kernels.conv import operator  # noqa: F401 - registers the operators
from kernels.conv import igemm  # noqa: F401,I001 - the families register on import, in order
from kernels.conv import naive  # noqa: F401
from kernels.conv import direct  # noqa: F401
from kernels.conv import wgmma  # noqa: F401
from kernels.conv import wgmma_split  # noqa: F401
from kernels.conv import grouped_mma  # noqa: F401
from kernels.conv import dw_tma  # noqa: F401
from kernels.conv import dw_tc  # noqa: F401
from kernels.conv import stem  # noqa: F401
from kernels.conv import stem_bwd_weight  # noqa: F401
from kernels.conv import wgmma_im2col  # noqa: F401
from kernels.conv import pointwise  # noqa: F401
from kernels.conv import pointwise_cluster  # noqa: F401
from kernels.conv import wgmma_cluster  # noqa: F401
from kernels.conv import wgmma_red  # noqa: F401
from kernels.conv import wgmma_blockdiag  # noqa: F401
from kernels.conv import wgmma_planes  # noqa: F401
from kernels.conv import wgmma_blockdiag_weight  # noqa: F401
from kernels.conv import grouped_taps  # noqa: F401
