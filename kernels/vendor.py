"""vendor: the vendor library's convolution (cuDNN on NVIDIA, MIOpen on AMD) through PyTorch,
measured by the same policy as every family so each sweep carries the baseline side by side.
Needs the `vendor` extra (torch) on the worker; selection models never pick it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from farm.problems import CONV_OPERATORS, ConvProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

_TYPESTR = {"bf16": "<i2", "fp16": "<f2", "fp32": "<f4"}


@functools.cache
def _torch() -> Any:
    import torch

    torch.backends.cudnn.benchmark = True
    return torch


def _why_not_torch() -> str | None:
    try:
        torch = _torch()
    except ImportError:
        return "PyTorch is not installed on this worker (pip install 'kernel-farm[vendor]')"
    if not torch.cuda.is_available():
        return "PyTorch sees no GPU on this worker"
    return None


class _DeviceArray:
    """A raw device pointer as a CUDA array (no copy), for torch.as_tensor."""

    def __init__(self, ptr: int, elements: int, dtype: str) -> None:
        self.__cuda_array_interface__ = {"shape": (elements,), "typestr": _TYPESTR[dtype],
                                         "data": (ptr, False), "version": 3}


def _tensor(ptr: int, elements: int, dtype: str, shape: tuple[int, ...]) -> Any:
    torch = _torch()
    flat = torch.as_tensor(_DeviceArray(ptr, elements, dtype), device="cuda")
    if dtype == "bf16":
        flat = flat.view(torch.bfloat16)
    return flat.view(*shape).permute(0, 3, 1, 2)  # channels-last memory, NCHW logical


@dataclass
class VendorRun:
    """One convolution call; its result lands in a tensor that publish() copies to the output."""

    problem: ConvProblem
    tensors: dict[str, Any]
    result: Any = None

    def enqueue(self) -> None:
        torch, p = _torch(), self.problem
        geometry = dict(stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w),
                        dilation=(p.dil_h, p.dil_w), groups=p.G)
        t = self.tensors
        if p.op == "conv2d_fwd":
            self.result = torch.nn.functional.conv2d(t["x"], t["w"], None, **geometry)
            return
        mask = [True, False, False] if p.op == "conv2d_bwd_data" else [False, True, False]
        x = t["dx"] if p.op == "conv2d_bwd_data" else t["x"]
        w = t["w"] if p.op == "conv2d_bwd_data" else t["dw"]
        grads = torch.ops.aten.convolution_backward(
            t["dy"], x, w, None, geometry["stride"], geometry["padding"], geometry["dilation"],
            False, [0, 0], p.G, mask)
        self.result = grads[0] if p.op == "conv2d_bwd_data" else grads[1]

    def publish(self) -> None:
        out = {"conv2d_fwd": "y", "conv2d_bwd_data": "dx", "conv2d_bwd_weight": "dw"}[
            self.problem.op]
        self.tensors[out].copy_(self.result)


class VendorConv(KernelFamily):
    name = "vendor"
    short = "vendor"
    operators = CONV_OPERATORS
    source_file = ""
    compiled = False
    measure_order = 0

    def configs(self, operator: str) -> list[dict]:
        return [{"library": "torch"}]

    def source(self) -> str:
        return "vendor: torch.nn.functional.conv2d / aten.convolution_backward"

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        raise TypeError("the vendor family calls a library; it has no launches")

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        return _why_not_torch()

    def runnable(self, instance: Instance, problem: ConvProblem, device: Any, module: Any,
                 pointers: dict[str, int]) -> VendorRun:
        p, dt = problem, problem.dtype
        shapes = {"x": (p.N, p.H, p.W, p.C), "dx": (p.N, p.H, p.W, p.C),
                  "w": (p.K, p.R, p.S, p.c_per_group), "dw": (p.K, p.R, p.S, p.c_per_group),
                  "y": (p.N, p.P, p.Q, p.K), "dy": (p.N, p.P, p.Q, p.K)}
        tensors = {}
        for name, shape in shapes.items():
            if name in pointers:
                elements = 1
                for size in shape:
                    elements *= size
                tensors[name] = _tensor(pointers[name], elements, dt, shape)
        return VendorRun(problem, tensors)


FAMILY = register(VendorConv())
