"""The three grouped-convolution directions as operators: tensors, reference and parameters."""

from __future__ import annotations

import ctypes

from farm.problems import CONV_OPERATORS, ConvProblem
from kernels.family import Launch, grid_stride_blocks
from kernels.operator import OperatorSpec, Tensor

REFERENCE_BLOCK = 256


class ConvParams(ctypes.Structure):
    """The ConvParams struct of kernels/common.cuh, passed by value."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "N", "C", "K", "G", "H", "W", "R", "S", "P", "Q", "stride_h", "stride_w", "pad_h",
        "pad_w", "dil_h", "dil_w", "Cg", "Kg")]


def conv_params(p: ConvProblem) -> ConvParams:
    return ConvParams(p.N, p.C, p.K, p.G, p.H, p.W, p.R, p.S, p.P, p.Q, p.stride_h, p.stride_w,
                      p.pad_h, p.pad_w, p.dil_h, p.dil_w, p.c_per_group, p.k_per_group)


class ConvOperator(OperatorSpec):
    reference_source = "conv/naive.cu"

    def __init__(self, name: str) -> None:
        if name not in CONV_OPERATORS:
            raise ValueError(f"not a convolution operator: {name}")
        self.name = name

    def tensors(self, p: ConvProblem) -> list[Tensor]:
        sizes = p.tensor_elements()
        x, w, y = (Tensor(n, sizes[k], "input") for n, k in
                   (("x", "input"), ("w", "weight"), ("y", "output")))
        dy = Tensor("dy", sizes["output"], "input")
        if self.name == "conv2d_fwd":
            return [x, w, Tensor("y", y.elements, "output")]
        if self.name == "conv2d_bwd_data":
            return [dy, w, Tensor("dx", x.elements, "output")]
        return [x, dy, Tensor("dw", w.elements, "output")]

    def reduction_length(self, p: ConvProblem, output: str | None = None) -> int:
        return p.gemm[2]

    def reference_launches(self, p: ConvProblem) -> list[Launch]:
        names = [t.name for t in self.tensors(p)]
        blocks = grid_stride_blocks(self.output(p).elements, REFERENCE_BLOCK, per_sm=32)
        return [Launch(entry=self.name, grid=(blocks, 1, 1), block=(REFERENCE_BLOCK, 1, 1),
                       args=(*names, conv_params(p)))]


OPERATORS = {name: ConvOperator(name) for name in CONV_OPERATORS}
