"""The vendor library's convolution (cuDNN on NVIDIA, MIOpen on AMD) through PyTorch, on the
farm's channels-last tensors (kernels/vendor.py measures it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.operator import VendorCall


def conv_call(op: str, p: ConvProblem, flat: Mapping[str, Any]) -> VendorCall:
    """One convolution call on `flat` (1-D tensors by name), NCHW views of channels-last
    memory as PyTorch expects."""
    import torch

    shapes = {"x": (p.N, p.H, p.W, p.C), "w": (p.K, p.R, p.S, p.c_per_group),
              "y": (p.N, p.P, p.Q, p.K), "dx": (p.N, p.H, p.W, p.C),
              "dw": (p.K, p.R, p.S, p.c_per_group), "dy": (p.N, p.P, p.Q, p.K)}
    t = {name: flat[name].view(*shapes[name]).permute(0, 3, 1, 2) for name in flat}
    geometry = dict(stride=(p.stride_h, p.stride_w), padding=(p.pad_h, p.pad_w),
                    dilation=(p.dil_h, p.dil_w), groups=p.G)
    if op == "conv2d_fwd":
        return VendorCall(lambda: {"y": torch.nn.functional.conv2d(t["x"], t["w"], None,
                                                                   **geometry)}, {"y": t["y"]})
    data = op == "conv2d_bwd_data"
    mask = [True, False, False] if data else [False, True, False]
    x, w = (t["dx"], t["w"]) if data else (t["x"], t["dw"])

    def run() -> dict[str, Any]:
        grads = torch.ops.aten.convolution_backward(
            t["dy"], x, w, None, geometry["stride"], geometry["padding"], geometry["dilation"],
            False, [0, 0], p.G, mask)
        return {"dx": grads[0]} if data else {"dw": grads[1]}
    out = "dx" if data else "dw"
    return VendorCall(run, {out: t[out]})
