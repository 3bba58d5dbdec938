"""The fused depthwise-separable convolution forward in NumPy float64, for small shapes: the
result `dwsep_fwd` computes (kernels/dwsep/problem.py gives the formula and the tensors).

Arrays are channels-last: x (N, H, W, C), w_dw (M*C, R, S) with depthwise channel j reading
input channel j // M, scale and shift (M*C,), w_pw (K, M*C), b_pw (K,) or None; the result y is
(N, P, Q, K). Flat tensors in the farm's buffers have the same element order.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kernels.dwsep.problem import DWSEP_ACTIVATIONS, DwsepProblem


def activate(v: np.ndarray, activation: str) -> np.ndarray:
    """none: v; relu: max(v, 0); relu6: min(max(v, 0), 6); silu: v * sigmoid(v);
    hardswish: v * relu6(v + 3) / 6."""
    if activation == "none":
        return v
    if activation == "relu":
        return np.maximum(v, 0.0)
    if activation == "relu6":
        return np.clip(v, 0.0, 6.0)
    if activation == "silu":
        e = np.exp(-np.abs(v))  # in (0, 1]: no overflow
        return v * np.where(v >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
    if activation == "hardswish":
        return v * np.clip(v + 3.0, 0.0, 6.0) / 6.0
    raise ValueError(f"unknown activation {activation!r}; known: {', '.join(DWSEP_ACTIVATIONS)}")


def depthwise(x: np.ndarray, w_dw: np.ndarray, stride: int = 1, pad: int = 0) -> np.ndarray:
    """The depthwise convolution alone: (N, P, Q, M*C) float64."""
    x, w = np.asarray(x, np.float64), np.asarray(w_dw, np.float64)
    if x.ndim != 4 or w.ndim != 3:
        raise ValueError(f"expected x (N, H, W, C) and w_dw (M*C, R, S), got {x.shape}, "
                         f"{w.shape}")
    N, H, W, C = x.shape
    MC, R, S = w.shape
    if MC % C:
        raise ValueError(f"w_dw has {MC} channels, not a multiple of C={C}")
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    if P < 1 or Q < 1:
        raise ValueError(f"empty output {P}x{Q}")
    padded = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    padded = np.repeat(padded, MC // C, axis=3)  # channel j = c * M + m holds input channel c
    out = np.zeros((N, P, Q, MC))
    for r in range(R):
        for s in range(S):
            window = padded[:, r:r + stride * (P - 1) + 1:stride, s:s + stride * (Q - 1) + 1:stride]
            out += window * w[:, r, s]
    return out


def dwsep_fwd(x: np.ndarray, w_dw: np.ndarray, scale: np.ndarray, shift: np.ndarray,
              w_pw: np.ndarray, b_pw: np.ndarray | None = None, *, stride: int = 1, pad: int = 0,
              activation: str = "none") -> np.ndarray:
    """y (N, P, Q, K) float64 = act(depthwise(x) * scale + shift) @ w_pw.T (+ b_pw)."""
    mid = depthwise(x, w_dw, stride, pad)
    mid = activate(mid * np.asarray(scale, np.float64) + np.asarray(shift, np.float64),
                   activation)
    y = mid @ np.asarray(w_pw, np.float64).T
    return y if b_pw is None else y + np.asarray(b_pw, np.float64)


def tensor_shapes(p: DwsepProblem) -> dict[str, tuple[int, ...]]:
    """Each tensor's array shape, inputs then the output (b_pw only with pw_bias); the element
    counts are DwsepProblem.tensor_elements()."""
    shapes = {"x": (p.N, p.H, p.W, p.C), "w_dw": (p.MC, p.R, p.S), "scale": (p.MC,),
              "shift": (p.MC,), "w_pw": (p.K, p.MC)}
    if p.pw_bias:
        shapes["b_pw"] = (p.K,)
    shapes["y"] = (p.N, p.P, p.Q, p.K)
    return shapes


def reference(p: DwsepProblem, tensors: Mapping[str, np.ndarray]) -> np.ndarray:
    """y for problem p from its input tensors by name (flat or shaped)."""
    shapes = tensor_shapes(p)
    t = {name: np.asarray(tensors[name]).reshape(shapes[name]) for name in shapes if name != "y"}
    return dwsep_fwd(t["x"], t["w_dw"], t["scale"], t["shift"], t["w_pw"], t.get("b_pw"),
                     stride=p.stride, pad=p.pad, activation=p.activation)


__all__ = ["activate", "depthwise", "dwsep_fwd", "reference", "tensor_shapes"]
