"""The group-normalization backward shape record: x and dy are N x C x H x W in one layout
(nhwc: channels last; nchw), normalized in G groups of C/G channels; the outputs are dx (like
x), dgamma and dbeta (C each), from the forward's saved mean and rstd (N x G, held in fp32)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from farm.problems import DTYPE_BYTES, MAX_TENSOR_ELEMENTS, Problem, ProblemError, as_int

GN_OPERATORS = ("groupnorm_bwd",)
GN_FIELDS = ("N", "C", "H", "W", "G", "layout")
GN_LAYOUTS = ("nhwc", "nchw")  # a layout's number (Problem.numbers) is its index here
MAX_HW = 512 * 512  # the kernels' limit on one plane (H * W)
# A sample (C*H*W) is indexed with 32-bit integers, the samples of a tensor with 64-bit offsets:
# a tensor may hold 2^31 elements or more (the SD VAE decoder at batch 32 does).
STAT_BYTES = 4  # mean and rstd are fp32


@dataclass(frozen=True)
class GroupNormProblem(Problem):
    """One group-normalization backward shape."""

    # op, then the shape fields in GN_FIELDS order, then dtype
    op: str
    N: int
    C: int
    H: int
    W: int
    G: int
    layout: str = "nhwc"
    dtype: str = "bf16"

    FIELDS: ClassVar[tuple[str, ...]] = GN_FIELDS
    DEFAULTS: ClassVar[dict[str, Any]] = {"layout": "nhwc"}
    TEXT_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {"layout": GN_LAYOUTS}
    OPERATORS: ClassVar[tuple[str, ...]] = GN_OPERATORS

    def __post_init__(self) -> None:
        self.check_common()
        for name in ("N", "C", "H", "W", "G"):
            value = getattr(self, name)
            if type(value) is not int:
                value = as_int(name, value)
                object.__setattr__(self, name, value)
            if value < 1:
                raise ProblemError(f"{name}={value} must be at least 1")
        if self.layout not in GN_LAYOUTS:
            raise ProblemError(f"unknown layout {self.layout!r}; known: {', '.join(GN_LAYOUTS)}")
        if self.C % self.G:
            raise ProblemError(f"C={self.C} is not divisible by G={self.G}")
        if self.group_elements == 1:
            raise ProblemError(
                f"C/G * H * W = 1 (C={self.C}, G={self.G}, {self.H}x{self.W}): a group of one "
                "element normalizes to exactly zero, so dx is zero whatever dy is")
        if self.group_elements == 2:
            raise ProblemError(
                f"C/G * H * W = 2 (C={self.C}, G={self.G}, {self.H}x{self.W}): a group of two "
                "elements normalizes to -1 and +1 (but for eps) whatever x is, so dx is only "
                "eps's residue of a cancellation that no fp32 kernel resolves")
        if self.HW > MAX_HW:
            raise ProblemError(f"H*W={self.HW} ({self.H}x{self.W}) is above {MAX_HW} (512x512)")
        if self.C * self.HW > MAX_TENSOR_ELEMENTS:
            raise ProblemError(
                f"one sample of x has C*H*W={self.C * self.HW} elements, over the 2^31-1 limit "
                "(the kernels index within a sample with 32-bit integers)")

    @classmethod
    def from_fields(cls, op: str, dtype: str, fields: Mapping[str, Any]) -> GroupNormProblem:
        """Build from a mapping of shape fields (a CSV line, a YAML mapping, the store's
        JSON): extra keys ignored, layout nhwc when not given."""
        return super().from_fields(op, dtype, fields)  # type: ignore[return-value]

    # Derived sizes ------------------------------------------------------------------------
    @property
    def HW(self) -> int:
        return self.H * self.W

    @property
    def Cg(self) -> int:
        """Channels per group."""
        return self.C // self.G

    @property
    def group_elements(self) -> int:
        """Elements one (n, g) group normalizes over: C/G * H * W."""
        return self.Cg * self.HW

    @property
    def elements(self) -> int:
        """Elements of x (and of dy and dx)."""
        return self.N * self.C * self.HW

    @property
    def flops(self) -> int:
        """Floating-point operations of the backward, per element of x: 3 for the per-channel
        sums ds += dy * x (2) and db += dy (1), 4 for dx = dy * (gamma * rstd) + x * c1 + c2
        (two multiply-adds); per (n, c): 3 for (ds - mean * db) * rstd and 2 for summing it and
        db over the samples into dgamma and dbeta. The per-group coefficients are left out."""
        return 7 * self.elements + 5 * self.N * self.C

    @property
    def min_bytes(self) -> int:
        """x, dy, gamma, mean and rstd read once; dx, dgamma and dbeta written once."""
        elem = DTYPE_BYTES[self.dtype]
        return elem * (3 * self.elements + 3 * self.C) + 2 * STAT_BYTES * self.N * self.G

    def label(self) -> str:
        return f"N{self.N} C{self.C} {self.H}x{self.W} G{self.G} {self.layout}"


__all__ = ["GN_FIELDS", "GN_LAYOUTS", "GN_OPERATORS", "GroupNormProblem", "MAX_HW"]
