"""The convolution kernels' ConvParams (kernels/common.cuh), passed by value, from a shape."""

from __future__ import annotations

import ctypes

from kernels.conv.problem import ConvProblem


class ConvParams(ctypes.Structure):
    """The ConvParams struct of kernels/common.cuh, passed by value."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "N", "C", "K", "G", "H", "W", "R", "S", "P", "Q", "stride_h", "stride_w", "pad_h",
        "pad_w", "dil_h", "dil_w", "Cg", "Kg")]


def conv_params(p: ConvProblem) -> ConvParams:
    return ConvParams(p.N, p.C, p.K, p.G, p.H, p.W, p.R, p.S, p.P, p.Q, p.stride_h, p.stride_w,
                      p.pad_h, p.pad_w, p.dil_h, p.dil_w, p.c_per_group, p.k_per_group)
