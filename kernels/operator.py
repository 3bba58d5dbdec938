"""What an operator means independently of any kernel: its tensors, its reference and how close
an instance's output must come to it."""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from typing import Any

from kernels.family import DTYPE_CODES, Launch

OUTPUT_EPS = {"bf16": 2.0**-8, "fp16": 2.0**-10, "fp32": 2.0**-22}


@dataclass(frozen=True)
class Tensor:
    name: str
    elements: int
    role: str  # "input" | "output"
    dtype: str | None = None  # its element type; None: the problem's

    def element_type(self, problem: Any) -> str:
        return self.dtype or problem.dtype


@dataclass(frozen=True)
class Tolerance:
    """Limits on ||out - ref|| / ||ref|| and on max |out - ref| / max |ref|."""

    rel_l2: float
    rel_max: float


def tolerance_for(dtype: str, reduction_length: int) -> Tolerance:
    """The rounding of the output's element type, plus fp32 summation-order error that grows
    with the square root of the reduction length; a 4x margin over what a right kernel shows."""
    eps = OUTPUT_EPS[dtype]
    summation = 2.0**-24 * math.sqrt(reduction_length)
    return Tolerance(rel_l2=4 * (eps / 2 + summation), rel_max=4 * (eps + summation))


class OperatorSpec(abc.ABC):
    name: str
    reference_source: str  # relative to kernels/, compiled with FARM_REFERENCE (fp32 output)

    @abc.abstractmethod
    def tensors(self, problem: Any) -> list[Tensor]:
        """Inputs first, then the outputs (one or more)."""

    @abc.abstractmethod
    def reference_launches(self, problem: Any) -> list[Launch]:
        """Launches of the reference kernel writing every output in fp32."""

    @abc.abstractmethod
    def reduction_length(self, problem: Any, output: str | None = None) -> int:
        """How many products are summed into one element of an output (default: the first)."""

    def reference_defines(self, dtype: str) -> dict[str, int | str]:
        return {"FARM_DTYPE": DTYPE_CODES[dtype], "FARM_REFERENCE": 1}

    def tolerance(self, problem: Any, output: str | None = None) -> Tolerance:
        """For one output (default: the first), by its element type and reduction length."""
        tensor = next(t for t in self.outputs(problem) if output in (None, t.name))
        return tolerance_for(tensor.element_type(problem),
                             self.reduction_length(problem, tensor.name))

    def outputs(self, problem: Any) -> list[Tensor]:
        return [t for t in self.tensors(problem) if t.role == "output"]

    def output(self, problem: Any) -> Tensor:
        """The first output."""
        return self.outputs(problem)[0]
