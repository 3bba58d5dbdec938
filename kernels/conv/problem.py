"""The convolution operators' shape record: a 2D grouped convolution, channels-last, in one
direction. Input NHWGC, weight GKYXC, output NHWGK. C and K count all channels (every group);
each group sees C/G inputs and K/G outputs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter, ge
from typing import Any, ClassVar

from farm.problems import DTYPE_BYTES, MAX_TENSOR_ELEMENTS, Problem, ProblemError, as_int

CONV_OPERATORS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")
CONV_FIELDS = ("N", "C", "K", "G", "H", "W", "R", "S",
               "stride_h", "stride_w", "pad_h", "pad_w", "dil_h", "dil_w")
CONV_DEFAULTS = {"stride_h": 1, "stride_w": 1, "pad_h": 0, "pad_w": 0, "dil_h": 1, "dil_w": 1}
_LOWEST = tuple(0 if f.startswith("pad") else 1 for f in CONV_FIELDS)
_DEFAULTED = tuple((f, CONV_DEFAULTS.get(f)) for f in CONV_FIELDS)
shape_of = attrgetter(*CONV_FIELDS)  # a problem's shape fields as a tuple, in CONV_FIELDS order
_FIELD_SET = frozenset(CONV_FIELDS)
_SPATIAL = _FIELD_SET - {"N", "C", "K", "G"}  # the fields P and Q read


@dataclass(frozen=True)
class ConvProblem(Problem):
    """A 2D grouped convolution, channels-last, in one direction."""

    # op, then the shape fields in CONV_FIELDS order (from_fields passes them by position)
    op: str
    N: int
    C: int
    K: int
    G: int
    H: int
    W: int
    R: int
    S: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    dtype: str = "bf16"
    layout: str = "NHWGC"

    FIELDS: ClassVar[tuple[str, ...]] = CONV_FIELDS
    DEFAULTS: ClassVar[dict[str, Any]] = CONV_DEFAULTS
    OPERATORS: ClassVar[tuple[str, ...]] = CONV_OPERATORS

    def __post_init__(self) -> None:
        self.check_common()
        if self.layout != "NHWGC":
            raise ProblemError(f"unknown layout {self.layout!r}; convolutions are NHWGC")
        values = shape_of(self)
        exact = {*map(type, values)} == {int}
        if not exact or not all(map(ge, values, _LOWEST)):  # else nothing to convert or refuse
            for name, value, low in zip(CONV_FIELDS, values, _LOWEST):
                if not exact:
                    value = as_int(name, value)
                    object.__setattr__(self, name, value)
                if value < low:
                    raise ProblemError(f"{name}={value} must be at least {low}")
        if self.C % self.G:
            raise ProblemError(f"C={self.C} is not divisible by G={self.G}")
        if self.K % self.G:
            raise ProblemError(f"K={self.K} is not divisible by G={self.G}")
        if self.P < 1 or self.Q < 1:
            raise ProblemError(
                f"output size {self.P}x{self.Q} is empty: input {self.H}x{self.W}, filter "
                f"{self.R}x{self.S}, dilation {self.dil_h}x{self.dil_w}, "
                f"padding {self.pad_h}x{self.pad_w}, stride {self.stride_h}x{self.stride_w}")
        for tensor, count in self.tensor_elements().items():
            if count > MAX_TENSOR_ELEMENTS:
                raise ProblemError(f"{tensor} tensor has {count} elements, over the 2^31-1 limit")

    def number_values(self) -> tuple[int, ...]:
        return shape_of(self)  # every field is a number already

    @classmethod
    def from_fields(cls, op: str, dtype: str, fields: Mapping[str, Any]) -> ConvProblem:
        """Build from a mapping of shape fields (extra keys ignored, optional ones defaulted)."""
        given = [fields.get(f, default) for f, default in _DEFAULTED]
        if {*map(type, given)} == {int} and not fields.get("layout"):  # the common case
            return cls(op, *given, dtype=dtype)
        return super().from_fields(op, dtype, fields)  # type: ignore[return-value]

    def view(self, **changes: int) -> ConvProblem:
        """This problem with some shape fields changed, not checked again: a family's view of
        a checked problem (its super-groups as groups, say), asked on every rule key's call,
        where dataclasses.replace would run every check again."""
        unknown = changes.keys() - _FIELD_SET
        if unknown:
            raise ProblemError(f"not a shape field: {', '.join(sorted(unknown))}")
        state = self.__dict__.copy()  # the fields, and the derived sizes computed so far
        for name in _DERIVED_BUT_PQ if _SPATIAL.isdisjoint(changes) else _DERIVED:
            state.pop(name, None)  # those the changes may alter
        state.update(changes)
        made = object.__new__(type(self))
        made.__dict__.update(state)
        return made

    # Derived sizes (computed once: a frozen record's fields never change) ------------------
    @cached_property
    def P(self) -> int:
        return (self.H + 2 * self.pad_h - self.dil_h * (self.R - 1) - 1) // self.stride_h + 1

    @cached_property
    def Q(self) -> int:
        return (self.W + 2 * self.pad_w - self.dil_w * (self.S - 1) - 1) // self.stride_w + 1

    @property
    def c_per_group(self) -> int:
        return self.C // self.G

    @property
    def k_per_group(self) -> int:
        return self.K // self.G

    def tensor_elements(self) -> dict[str, int]:
        return {"input": self.N * self.H * self.W * self.C,
                "weight": self.K * self.c_per_group * self.R * self.S,
                "output": self.N * self.P * self.Q * self.K}

    @property
    def flops(self) -> int:
        """Multiply-adds times two; the same count in every direction."""
        return 2 * self.N * self.P * self.Q * self.K * self.c_per_group * self.R * self.S

    @property
    def min_bytes(self) -> int:
        """Each of the three tensors touched once: two read, one written, in every direction."""
        return DTYPE_BYTES[self.dtype] * sum(self.tensor_elements().values())

    @cached_property
    def gemm(self) -> tuple[int, int, int]:
        """The per-group implicit-GEMM view (M, N, K) of this direction."""
        crs = self.c_per_group * self.R * self.S
        npq = self.N * self.P * self.Q
        if self.op == "conv2d_fwd":
            return npq, self.k_per_group, crs
        if self.op == "conv2d_bwd_data":
            return self.N * self.H * self.W, self.c_per_group, self.k_per_group * self.R * self.S
        return self.k_per_group, crs, npq

    @classmethod
    def from_label(cls, op: str, dtype: str, label: str) -> ConvProblem:
        """The problem whose label() is `label` ("N32 C256 K256 G1 14x14 3x3 s2x2 p1x1")."""
        tokens = label.split()
        sizes = [t for t in tokens if re.fullmatch(r"\d+x\d+", t)]
        if len(sizes) != 2:
            raise ProblemError(f"{label!r} is not a convolution's label: want H x W and R x S")
        fields = dict(zip("HW", map(int, sizes[0].split("x"))))
        fields.update(zip("RS", map(int, sizes[1].split("x"))))
        pairs = {"s": ("stride_h", "stride_w"), "p": ("pad_h", "pad_w"), "d": ("dil_h", "dil_w")}
        for t in tokens:
            if re.fullmatch(r"[NCKG]\d+", t):
                fields[t[0]] = int(t[1:])
            elif re.fullmatch(r"[spd]\d+x\d+", t):
                fields.update(zip(pairs[t[0]], map(int, t[1:].split("x"))))
        return cls.from_fields(op, dtype, fields)

    def label(self) -> str:
        s = self
        text = (f"N{s.N} C{s.C} K{s.K} G{s.G} {s.H}x{s.W} {s.R}x{s.S}")
        if (s.stride_h, s.stride_w) != (1, 1):
            text += f" s{s.stride_h}x{s.stride_w}"
        if (s.pad_h, s.pad_w) != (0, 0):
            text += f" p{s.pad_h}x{s.pad_w}"
        if (s.dil_h, s.dil_w) != (1, 1):
            text += f" d{s.dil_h}x{s.dil_w}"
        return text


# The values a ConvProblem caches on first use (its own and its bases': sizes, key, ...): a view
# drops those its changes may alter, all but P and Q where no field they read changes
_DERIVED = tuple(n for cls in ConvProblem.__mro__ for n, v in vars(cls).items()
                 if isinstance(v, cached_property))
_DERIVED_BUT_PQ = tuple(n for n in _DERIVED if n not in ("P", "Q"))
