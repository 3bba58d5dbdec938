"""One GPU in this process, measuring kernel instances on problems (the body of a measure actor).

Modules and support kernels are loaded once and kept; each problem's inputs and reference are
made once for all the instances measured on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from farm.compile import CodeCache, FolderCache, compile_source
from farm.environment import Environment, device_environment
from farm.gpu import get_compiler, open_device
from farm.gpu.base import Device, GpuError
from farm.measure import DeviceLost, PairResult, ProblemBench, SupportKernels, measure
from farm.telemetry import Telemetry
from farm.timing import TimingPolicy
from kernels.family import Instance
from kernels.registry import get_family


def target_of(fingerprint: dict) -> str:
    """The compile target of a device: sm_90 -> sm_90a (Hopper's arch-specific features)."""
    arch = str(fingerprint["arch"])
    return f"{arch}a" if arch in ("sm_90", "sm_100", "sm_120") else arch


class GpuWorker:
    def __init__(self, device: Device | None = None, ordinal: int = 0,
                 cache: CodeCache | None = None) -> None:
        self.device = device or open_device(ordinal=ordinal)
        self.fingerprint = self.device.fingerprint()
        self.target = target_of(self.fingerprint)
        self.cache = cache if cache is not None else FolderCache()
        self.telemetry = Telemetry(ordinal)
        self.environment: Environment = device_environment(
            self.fingerprint, get_compiler(self.target).version())
        self._modules: dict[str, Any] = {}
        self._support: dict[str, SupportKernels] = {}

    def support(self, dtype: str) -> SupportKernels:
        if dtype not in self._support:
            self._support[dtype] = SupportKernels(self.device, dtype, self.target, self.cache)
        return self._support[dtype]

    def module(self, instance: Instance) -> tuple[Any | None, str | None]:
        """The loaded module of an instance, or None and the compiler's log."""
        family = get_family(instance.family)
        if not family.compiled:
            return family, None  # a library call: nothing to compile or load
        if instance.key in self._modules:
            return self._modules[instance.key], None
        compiled = compile_source(family.source(), family.defines(instance), self.target,
                                  self.cache)
        if not compiled.result.ok:
            return None, compiled.result.log
        try:
            module = self.device.load_module(compiled.result.code)
        except GpuError as exc:
            return None, f"module load failed: {exc}"
        self._modules[instance.key] = module
        return module, None

    def measure_problem(self, problem: Any, instances: Iterable[Instance],
                        policy: TimingPolicy = TimingPolicy(),
                        seed: int = 1) -> Iterator[tuple[Instance, PairResult]]:
        """Measure each instance on `problem`; yields as it goes. DeviceLost propagates after
        the pair that caused it has been yielded as a launch_error or timeout. Each measured
        row's telemetry carries wall_ms, the host time of its measure() call, and the first
        one's setup_ms, the time to make the problem's inputs and reference."""
        begin = time.perf_counter()
        bench = ProblemBench(self.device, problem, self.support(problem.dtype), self.target,
                             self.cache, seed=seed, support_for=self.support)
        setup_ms: float | None = 1000.0 * (time.perf_counter() - begin)
        lost = False
        best: float | None = None  # the fastest median so far (the policy's stop_slower_than)
        try:
            for instance in instances:
                family = get_family(instance.family)
                reason = family.refusal(instance, problem, self.target)
                if reason:
                    yield instance, PairResult("unsupported", message=reason,
                                               policy=policy.model_dump())
                    continue
                module, log = self.module(instance)
                if module is None:
                    yield instance, PairResult("compile_error", message=log,
                                               policy=policy.model_dump())
                    continue
                try:
                    begin = time.perf_counter()
                    result = measure(bench, family, instance, module, policy, self.telemetry,
                                     best_us=best)
                    costs = {"wall_ms": round(1000.0 * (time.perf_counter() - begin), 3)}
                    if setup_ms is not None:
                        costs["setup_ms"], setup_ms = round(setup_ms, 3), None
                    result = replace(result, telemetry={**result.telemetry, **costs})
                except DeviceLost as exc:
                    status = "timeout" if str(exc).startswith("timeout") else "launch_error"
                    lost = True
                    yield instance, PairResult(status, message=str(exc),
                                               policy=policy.model_dump())
                    raise
                if result.status == "ok":
                    best = min(best or result.median_us, result.median_us)
                yield instance, result
        finally:
            if not lost:  # a lost context cannot free (a hung kernel would block the free)
                bench.close()
