"""The fused depthwise-separable convolution forward's shape record (`dwsep_fwd`).

Channels-last throughout. The operator, per image n and output pixel (p, q):

    d[j]  = sum_{r,s} x[n, p*stride - pad + r, q*stride - pad + s, j / M] * w_dw[j, r, s]
    a[j]  = act(d[j] * scale[j] + shift[j])                    j < M*C (M: multiplier)
    y[k]  = sum_j a[j] * w_pw[k, j]  (+ b_pw[k] when pw_bias)  k < K

a depthwise R x S convolution (groups = C, M outputs per input channel: depthwise channel j reads
input channel j / M, PyTorch's order), a per-channel scale and shift (a folded BatchNorm), an
activation, then a 1x1 convolution to K channels with an optional bias (a folded BatchNorm after
it). Tensors: x N x H x W x C; w_dw M*C x R x S (a grouped convolution's weight with C groups
of M outputs and one input each); scale, shift M*C; w_pw K x M*C; b_pw K; y N x P x Q x K.
Every tensor is in the problem's element type; accumulation is fp32 or wider.

Fields: N, C, H, W (the depthwise's input), K, R, S (its filter), stride (1 or 2, both axes),
pad (zero padding on every side, both axes), multiplier (1 or 2), activation (none, relu,
relu6, silu, hardswish: x * relu6(x + 3) / 6) and pw_bias (0 or 1). Defaults: stride 1,
multiplier 1, activation none, pw_bias 0. `pad` has none: every network pads a depthwise by
(R-1)//2, which a constant default cannot say for every R (DEFAULTS are values, filled in as
they are by the spec and network-table readers), and a default of 0 would quietly describe a
different layer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

from farm.problems import DTYPE_BYTES, MAX_TENSOR_ELEMENTS, Problem, ProblemError, as_int

DWSEP_OPERATORS = ("dwsep_fwd",)
DWSEP_FIELDS = ("N", "C", "H", "W", "K", "R", "S", "stride", "pad", "multiplier",
                "activation", "pw_bias")
DWSEP_DEFAULTS: dict[str, Any] = {"stride": 1, "multiplier": 1, "activation": "none",
                                  "pw_bias": 0}
# An activation's number (Problem.numbers) is its index here, and so is its code in the kernels
# (dwsep_common.cuh's DwsepActivation).
DWSEP_ACTIVATIONS = ("none", "relu", "relu6", "silu", "hardswish")
DWSEP_LAYOUT = "NHWC"
STRIDES = (1, 2)
MULTIPLIERS = (1, 2)
_POSITIVE = ("N", "C", "H", "W", "K", "R", "S")
_INTEGERS = _POSITIVE + ("stride", "pad", "multiplier", "pw_bias")


@dataclass(frozen=True, kw_only=True)
class DwsepProblem(Problem):
    """One fused depthwise-separable convolution forward shape (fields by name: pad has no
    default but follows fields that have one)."""

    op: str
    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int = 1
    pad: int
    multiplier: int = 1
    activation: str = "none"
    pw_bias: int = 0
    dtype: str = "bf16"
    layout: str = DWSEP_LAYOUT

    FIELDS: ClassVar[tuple[str, ...]] = DWSEP_FIELDS
    DEFAULTS: ClassVar[dict[str, Any]] = DWSEP_DEFAULTS
    TEXT_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {"activation": DWSEP_ACTIVATIONS}
    OPERATORS: ClassVar[tuple[str, ...]] = DWSEP_OPERATORS

    def __post_init__(self) -> None:
        self.check_common()
        if self.layout != DWSEP_LAYOUT:
            raise ProblemError(f"unknown layout {self.layout!r}; {self.op} is {DWSEP_LAYOUT}")
        for name in _INTEGERS:
            value = getattr(self, name)
            if type(value) is not int:
                value = as_int(name, value)
                object.__setattr__(self, name, value)
            low = 1 if name in _POSITIVE else 0
            if value < low:
                raise ProblemError(f"{name}={value} must be at least {low}")
        if self.stride not in STRIDES:
            raise ProblemError(f"stride={self.stride} is not supported: the stride is 1 or 2")
        if self.multiplier not in MULTIPLIERS:
            raise ProblemError(f"multiplier={self.multiplier} is not supported: the depthwise "
                               "makes 1 or 2 channels of each input channel")
        if self.pw_bias not in (0, 1):
            raise ProblemError(f"pw_bias={self.pw_bias} must be 0 (no bias) or 1")
        if self.activation not in DWSEP_ACTIVATIONS:
            raise ProblemError(f"unknown activation {self.activation!r}; known: "
                               f"{', '.join(DWSEP_ACTIVATIONS)}")
        for name, size in (("R", self.R), ("S", self.S)):
            if self.pad >= size:
                raise ProblemError(f"pad={self.pad} is not below the filter's {name}={size}: "
                                   "a border output would read padding only")
        if self.P < 1 or self.Q < 1:
            raise ProblemError(
                f"output size {self.P}x{self.Q} is empty: input {self.H}x{self.W}, filter "
                f"{self.R}x{self.S}, pad {self.pad}, stride {self.stride}")
        for tensor, count in self.tensor_elements().items():
            if count > MAX_TENSOR_ELEMENTS:
                raise ProblemError(f"{tensor} has {count} elements, over the 2^31-1 limit")

    @classmethod
    def from_fields(cls, op: str, dtype: str, fields: Mapping[str, Any]) -> DwsepProblem:
        """Build from a mapping of shape fields (a CSV line, a YAML mapping, the store's JSON):
        extra keys ignored, stride, multiplier, activation and pw_bias defaulted."""
        return super().from_fields(op, dtype, fields)  # type: ignore[return-value]

    # Derived sizes -------------------------------------------------------------------------
    @cached_property
    def P(self) -> int:
        """Output rows."""
        return (self.H + 2 * self.pad - self.R) // self.stride + 1

    @cached_property
    def Q(self) -> int:
        """Output columns."""
        return (self.W + 2 * self.pad - self.S) // self.stride + 1

    @property
    def MC(self) -> int:
        """Channels of the depthwise's output (multiplier x C): the pointwise's input."""
        return self.multiplier * self.C

    def tensor_elements(self) -> dict[str, int]:
        """Elements of each tensor, inputs then the output (b_pw only with pw_bias)."""
        sizes = {"x": self.N * self.H * self.W * self.C, "w_dw": self.MC * self.R * self.S,
                 "scale": self.MC, "shift": self.MC, "w_pw": self.K * self.MC}
        if self.pw_bias:
            sizes["b_pw"] = self.K
        sizes["y"] = self.N * self.P * self.Q * self.K
        return sizes

    @property
    def flops(self) -> int:
        """Multiply-adds times two of both convolutions: the depthwise's N*P*Q*M*C*R*S and the
        pointwise's N*P*Q*K*M*C. The scale and shift, the activation and the bias (a few
        operations per intermediate or output element) are left out, as a convolution's
        count leaves out its epilogue."""
        return 2 * self.N * self.P * self.Q * self.MC * (self.R * self.S + self.K)

    @property
    def min_bytes(self) -> int:
        """x, both weights and the per-channel vectors read once, y written once; the
        intermediate never leaves the chip."""
        return DTYPE_BYTES[self.dtype] * sum(self.tensor_elements().values())

    def label(self) -> str:
        text = f"N{self.N} C{self.C} {self.H}x{self.W} K{self.K} {self.R}x{self.S}"
        if self.stride != 1:
            text += f" s{self.stride}"
        if self.pad:
            text += f" p{self.pad}"
        if self.multiplier != 1:
            text += f" M{self.multiplier}"
        if self.activation != "none":
            text += f" {self.activation}"
        if self.pw_bias:
            text += " bias"
        return text


__all__ = ["DWSEP_ACTIVATIONS", "DWSEP_DEFAULTS", "DWSEP_FIELDS", "DWSEP_LAYOUT",
           "DWSEP_OPERATORS", "DwsepProblem"]
