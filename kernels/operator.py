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


@dataclass(frozen=True)
class Tolerance:
    """Limits on ||out - ref|| / ||ref|| and on max |out - ref| / max |ref|."""

    rel_l2: float
    rel_max: float


class OperatorSpec(abc.ABC):
    name: str
    reference_source: str  # relative to kernels/, compiled with FARM_REFERENCE (fp32 output)

    @abc.abstractmethod
    def tensors(self, problem: Any) -> list[Tensor]:
        """Inputs first, the single output last."""

    @abc.abstractmethod
    def reference_launches(self, problem: Any) -> list[Launch]:
        """Launches of the reference kernel writing the output in fp32."""

    @abc.abstractmethod
    def reduction_length(self, problem: Any) -> int:
        """How many products are summed into one output element."""

    def reference_defines(self, dtype: str) -> dict[str, int | str]:
        return {"FARM_DTYPE": DTYPE_CODES[dtype], "FARM_REFERENCE": 1}

    def tolerance(self, problem: Any) -> Tolerance:
        """Output rounding of the element type, plus fp32 summation-order error that grows with
        the square root of the reduction length; a 4x margin over what a right kernel shows."""
        eps = OUTPUT_EPS[problem.dtype]
        summation = 2.0**-24 * math.sqrt(self.reduction_length(problem))
        return Tolerance(rel_l2=4 * (eps / 2 + summation), rel_max=4 * (eps + summation))

    def output(self, problem: Any) -> Tensor:
        return self.tensors(problem)[-1]
