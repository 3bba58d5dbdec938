"""The rowsum_fwd shape record: a rows x cols matrix x, row-major; the output y has rows
elements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from farm.problems import DTYPE_BYTES, MAX_TENSOR_ELEMENTS, Problem, ProblemError, as_int

OPERATORS = ("rowsum_fwd",)
FIELDS = ("rows", "cols")
LAYOUT = "row_major"


@dataclass(frozen=True)
class RowSumProblem(Problem):
    """One row-sum shape."""

    op: str
    rows: int
    cols: int
    dtype: str = "bf16"
    layout: str = LAYOUT

    FIELDS: ClassVar[tuple[str, ...]] = FIELDS
    OPERATORS: ClassVar[tuple[str, ...]] = OPERATORS

    def __post_init__(self) -> None:
        self.check_common()
        for name in FIELDS:
            value = getattr(self, name)
            if type(value) is not int:
                value = as_int(name, value)
                object.__setattr__(self, name, value)
            if value < 1:
                raise ProblemError(f"{name}={value} must be at least 1")
        if self.layout != LAYOUT:
            raise ProblemError(f"unknown layout {self.layout!r}; rowsum_fwd is {LAYOUT}")
        if self.elements > MAX_TENSOR_ELEMENTS:
            raise ProblemError(f"rows*cols={self.elements} is above the 2^31-1 elements the "
                               "kernels index with 32-bit integers")

    @property
    def elements(self) -> int:
        return self.rows * self.cols

    @property
    def flops(self) -> int:
        """One addition per element of x."""
        return self.elements

    @property
    def min_bytes(self) -> int:
        """x read once, y written once."""
        return DTYPE_BYTES[self.dtype] * (self.elements + self.rows)

    def label(self) -> str:
        return f"{self.rows}x{self.cols}"
