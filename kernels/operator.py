"""What an operator is, independently of any kernel: its shape record, its tensors, its reference
and how close an instance's output must come to it, the shapes a sweep can generate, the inputs
of the selection models' features, and the vendor library's call. One OperatorSpec per operator;
an operator's package registers its specs with kernels.registry."""

from __future__ import annotations

import abc
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

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


def distinct_shapes(count: int, seed: int,
                    draw: Callable[[random.Random], dict[str, Any] | None]) -> list[dict[str, Any]]:
    """`count` distinct shapes from `draw(rng)` (None: a draw to throw away), in the order first
    drawn; fewer only if 50 * count draws do not find them. The same (count, seed, draw)
    always gives the same shapes."""
    rng = random.Random(seed)
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for _ in range(50 * count):
        if len(shapes) >= count:
            break
        shape = draw(rng)
        if shape is not None:
            shapes.setdefault(tuple(shape.values()), shape)
    return list(shapes.values())


def tolerance_for(dtype: str, reduction_length: int) -> Tolerance:
    """The rounding of the output's element type, plus fp32 summation-order error that grows
    with the square root of the reduction length; a 4x margin over what a right kernel shows."""
    eps = OUTPUT_EPS[dtype]
    summation = 2.0**-24 * math.sqrt(reduction_length)
    return Tolerance(rel_l2=4 * (eps / 2 + summation), rel_max=4 * (eps + summation))


@dataclass(frozen=True)
class VendorCall:
    """The vendor library's work on one problem: `run` computes every output and returns them
    by name; `outputs` are views of the output buffers, shaped as run's results."""

    run: Callable[[], dict[str, Any]]
    outputs: Mapping[str, Any]


class OperatorSpec(abc.ABC):
    name: str
    problem_type: type  # the shape record: a frozen dataclass deriving from farm.problems.Problem
    reference_source: str  # named as KernelFamily.source_file; built with FARM_REFERENCE (fp32 out)
    networks_dir: Path | None = None  # CSV problem sets of real networks (column `network`)
    keep_within = 0.97  # a selection model's candidates: those within this fraction of the
    # fastest on some training problem (farm/select/train.py); 0 keeps every one. On the H100
    # recordings 0.97 is as good on held-out networks as every candidate, and better on
    # generated shapes of another distribution (docs/BENCHMARKS.md)
    # A selection model's boosting settings where they differ from farm/select/train.py's
    # BOOSTING (rounds, learning_rate, hybrid_rounds, num_leaves) and the model kinds trained
    # (`kinds`, default every one); an explicit TrainConfig value (farm train --rounds ...)
    # overrides them.
    training: ClassVar[Mapping[str, Any]] = {}
    # The networks a selection model is scored on and never trained on, by default; with none
    # of them among the measured problems, a hash of the shape holds out a share instead.
    holdout_networks: tuple[str, ...] = ()
    # The selection models' features of a shape: (name, formula) pairs over the shape's
    # numbers (farm.problems.Problem.numbers) and the device constants, then interactions
    # with the instance columns (farm/select/features.py evaluates both, in NumPy and in C).
    shape_formulas: ClassVar[tuple[tuple[str, str], ...]] = ()
    interactions: ClassVar[tuple[tuple[str, str], ...]] = ()

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

    def reference_workspace_bytes(self, problem: Any) -> int:
        """fp32 scratch the reference launches use (as the tensor named "workspace")."""
        return 0

    def input_launches(self, problem: Any) -> list[Launch]:
        """Launches of the reference source that derive inputs from the random ones (the
        forward's statistics of a normalization), run after every random fill."""
        return []

    # Shapes ----------------------------------------------------------------------------------
    @property
    def fields(self) -> tuple[str, ...]:
        return self.problem_type.FIELDS

    @property
    def shape_columns(self) -> tuple[str, ...]:
        """The fields that the dashboard and `farm query timings` show and filter on."""
        return self.problem_type.FIELDS

    def problem(self, dtype: str, fields: Mapping[str, Any]) -> Any:
        return self.problem_type.from_fields(self.name, dtype, fields)

    def problem_from_label(self, dtype: str, label: str) -> Any:
        """The problem whose label() is `label`, for tools that read results written by label
        (the benches' JSON); an operator that cannot read its labels says so."""
        raise NotImplementedError(f"{self.name} cannot read a problem from its label")

    generate_order: tuple[str, ...] = ()  # the order a sweep's `generate` resolves fields in

    def generate_value(self, name: str, word: str, partial: Mapping[str, Any]) -> Any:
        """A word a sweep's `generate` may give for a field, beyond an earlier field's name
        (a convolution's padding: same); None when the word means nothing for `name`."""
        return None

    def synthetic_shapes(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` shapes that cover the space real networks draw from, the same for a seed."""
        raise NotImplementedError(f"{self.name} has no synthetic shape generator")

    def coverage_shapes(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` shapes drawn over a wider space than synthetic_shapes (training that covers
        the space, active sampling's pool); by default the same as synthetic_shapes."""
        return self.synthetic_shapes(count, seed)

    def shape_spaces(self) -> dict[str, Callable[[int, int], list[dict[str, Any]]]]:
        """The generated spaces a spec's `synthetic: {space: NAME}` draws (count, seed) shapes
        from: training (synthetic_shapes), coverage (coverage_shapes) and any the operator
        adds."""
        return {"training": self.synthetic_shapes, "coverage": self.coverage_shapes}

    def shape_class(self, problem: Any) -> str:
        """A coarse class of the shape, for grouping in reports (a convolution's: dense,
        grouped or depthwise)."""
        return "all"

    # Features ------------------------------------------------------------------------------------
    def instance_features(self, config: Mapping[str, Any]) -> dict[str, float]:
        """The generic instance columns (farm.select.features.INSTANCE) that a configuration
        gives; what is missing is NaN."""
        return {}

    # Vendor baseline -----------------------------------------------------------------------------
    # What the vendor call runs, in words: its hash is the vendor instance's source hash, so a
    # recording's vendor rows replay only while the call stays the same.
    vendor_source: str = "vendor: the operator's PyTorch call (OperatorSpec.vendor_call)"

    def vendor_call(self, problem: Any, tensors: Mapping[str, Any]) -> VendorCall | None:
        """With 1-D PyTorch tensors over every tensor's memory by name (kernels/vendor.py makes
        them), the vendor library's call; None when this operator has no vendor baseline."""
        return None
