"""The descriptor every kernel family provides: configuration space, applicability, and how an
instance is compiled and launched on a problem."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kernels.source import load_source, source_hash

DTYPE_CODES = {"fp32": 0, "fp16": 1, "bf16": 2}
SM_COUNT = 132  # multiprocessors of the GPUs grids are sized for; a smaller GPU runs more waves
Config = Mapping[str, Any]


@dataclass(frozen=True)
class Instance:
    """One compiled variant of a family: operator, element type and configuration."""

    family: str
    operator: str
    dtype: str
    config: tuple[tuple[str, Any], ...]
    name: str
    source_hash: str

    @cached_property
    def settings(self) -> dict[str, Any]:
        """The configuration as a dict, built once (shared: read it, do not change it)."""
        return dict(self.config)

    @cached_property
    def key(self) -> str:
        text = json.dumps([self.family, self.operator, self.dtype, self.config,
                           self.source_hash], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def record(self) -> dict[str, Any]:
        """The row of the kernels table."""
        return {"key": self.key, "family": self.family, "operator": self.operator,
                "name": self.name, "config": {"dtype": self.dtype, **self.settings},
                "source_hash": self.source_hash}


@dataclass(frozen=True)
class Launch:
    """One kernel launch of an instance's work: entry point, geometry, arguments."""

    entry: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[Any, ...]  # buffer names (str) resolve to device pointers, TensorMaps to their
    # descriptors; others pass as is
    shared_bytes: int = 0


@dataclass(frozen=True)
class TensorMap:
    """A Hopper tensor map (TMA descriptor) over a named buffer, built on the host when the
    launch is prepared and passed by value: `dims` innermost first, in 16-bit elements;
    `strides` in bytes, of dims[1:]; `box` the elements one copy moves; `swizzle` 128 (the
    128-byte swizzle) or 0 (none); zeros where the box leaves the tensor. With `im2col` the map
    is of an [N][H][W][C] tensor in im2col mode: `box` is (channels a pixel, pixels a copy)."""

    buffer: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    swizzle: int = 128
    im2col: Im2col | None = None


@dataclass(frozen=True)
class Im2col:
    """A tensor map's im2col mode (Hopper): a copy walks `box[1]` pixels of the bounding box
    of window origins, W fastest, then H, then N, `strides` (W, H) apart, and brings each
    one's `box[0]` channels at the origin plus the copy's filter-tap offsets; zeros outside the
    tensor. The box spans [lower, size - 1 + upper] along W and H (`lower` and `upper` as
    (W, H), each within [-128, 127])."""

    lower: tuple[int, int]
    upper: tuple[int, int]
    strides: tuple[int, int] = (1, 1)


class KernelFamily(abc.ABC):
    """One algorithm for one or more operators, instantiated by configuration."""

    name: str
    operators: tuple[str, ...]
    source_file: str  # under kernels/, an absolute path, or "package:path" (kernels/source.py)
    short: str  # a prefix for instance names

    @abc.abstractmethod
    def configs(self, operator: str) -> list[dict[str, Any]]:
        """Every instance's configuration for `operator`, generated from the family's rules."""

    @abc.abstractmethod
    def launches(self, instance: Instance, problem: Any) -> list[Launch]:
        """The launches that compute `problem`'s output, in order, as one timed unit."""

    compiled = True  # False for families that call a library instead of compiling a source
    # True for a reference-speed family (a simple loop, right on every shape): a selection
    # model picks it only where no safe candidate is predicted close (farm.select.guard)
    reference = False
    # Families with a lower number are measured first on each problem: a fast, dependable time
    # early (the vendor library's) lets the timing policy stop clearly slower instances early.
    measure_order = 1
    # The compile targets the family's source is written for (empty: every one); on another
    # target its pairs are unsupported, never compiled.
    targets: tuple[str, ...] = ()

    def unsupported_target(self, target: str) -> str | None:
        """Why the family cannot run on devices of `target`, or None when it can."""
        if self.targets and target not in self.targets:
            return f"{self.name} runs on {', '.join(self.targets)} only, not on {target}"
        return None

    def refusal(self, instance: Instance, problem: Any, target: str) -> str | None:
        """Why `instance` cannot run `problem` on devices of `target` (the family's targets
        first, then its shape rules), or None when it can."""
        return self.unsupported_target(target) or self.applicable(instance, problem)

    def runnable(self, instance: Instance, problem: Any, device: Any, module: Any,
                 pointers: dict[str, int]) -> Any:
        """The instance's work on `problem` where it is not its launches in the compiled module
        (a library call; farm.launch.Runnable), or None: the farm resolves the launches
        (farm.launch.runnable_of)."""
        return None

    def applicable(self, instance: Instance, problem: Any) -> str | None:
        """Why `instance` cannot serve `problem`, or None when it can."""
        return None

    @staticmethod
    def other_problem(instance: Instance, problem: Any) -> str | None:
        """Why `problem` is not of `instance`'s operator and element type, or None."""
        if problem.op != instance.operator:
            return f"instance is for {instance.operator}, problem is {problem.op}"
        if problem.dtype != instance.dtype:
            return f"instance is for {instance.dtype}, problem is {problem.dtype}"
        return None

    def compiled_case(self, problem: Any) -> dict[str, Any]:
        """The config values an instance needs to serve `problem` where the family compiles
        one instance per case (a filter size, a read path): {} by default. A necessary
        condition only, cheap enough to check against a whole catalogue in bulk before the
        rules (`applicable`) are asked one instance at a time."""
        return {}

    def waves(self, instance: Instance, problem: Any) -> tuple[int, int] | None:
        """(blocks of work, blocks the GPU holds at once) of a persistent schedule on
        `problem`, for bench/wave_fill.py; None where the family does not say."""
        return None

    def workspace_bytes(self, instance: Instance, problem: Any) -> int:
        return 0

    def defines(self, instance: Instance) -> dict[str, int | str]:
        """Compile-time constants: the element type and every config field, upper-cased."""
        values = {"FARM_DTYPE": DTYPE_CODES[instance.dtype]}
        for key, value in instance.config:
            values[key.upper()] = int(value) if isinstance(value, bool) else value
        return values

    def source(self) -> str:
        return load_source(self.source_file)

    def instance_name(self, operator: str, dtype: str, config: Config) -> str:
        parts = [f"{k}{int(v) if isinstance(v, bool) else v}" for k, v in config.items()]
        return "_".join([self.short, operator.removeprefix("conv2d_"), dtype, *parts])

    def hashed_source(self, operator: str) -> str:
        """The text whose hash identifies `operator`'s instances' code (default: the source)."""
        return self.source()

    def instance(self, operator: str, dtype: str, config: Config,
                 digest: str | None = None) -> Instance:
        """The instance of one configuration; digest: its source hash (computed if not given)."""
        return Instance(family=self.name, operator=operator, dtype=dtype,
                        config=tuple(config.items()),
                        name=self.instance_name(operator, dtype, config),
                        source_hash=digest or source_hash(self.hashed_source(operator)))

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        digest = source_hash(self.hashed_source(operator))
        return [self.instance(operator, dtype, config, digest) for config in self.configs(operator)]

    def config_fields(self, operator: str) -> dict[str, tuple[Any, ...]]:
        """Each configuration field and the values its instances take."""
        fields: dict[str, set[Any]] = {}
        for config in self.configs(operator):
            for key, value in config.items():
                fields.setdefault(key, set()).add(value)
        return {k: tuple(sorted(v, key=repr)) for k, v in fields.items()}


def refuse_below_sm(family: str, target: str, minimum: int, needs: str) -> str | None:
    """Why `family`, which needs `needs` (NVIDIA sm_`minimum` and later), cannot run on devices
    of `target`, or None when it can."""
    arch = target.removeprefix("sm_").rstrip("a")
    if not arch.isdigit() or int(arch) < minimum:
        return f"{family} needs {needs} (sm_{minimum} and later), not {target}"
    return None


def grid_stride_blocks(elements: int, block: int, sm_count: int = 132, per_sm: int = 8) -> int:
    """Blocks for a grid-stride loop over `elements`: enough to fill the GPU, no more."""
    return max(1, min((elements + block - 1) // block, sm_count * per_sm))


__all__ = ["Config", "Im2col", "Instance", "KernelFamily", "Launch", "TensorMap",
           "grid_stride_blocks", "refuse_below_sm"]
