"""The timing policy: how one kernel instance is verified and timed on one problem.

Per problem (ProblemBench): random inputs drawn on the GPU (never zeros), an fp32 reference of
each output from the operator's reference kernel. Per instance (measure): poison the outputs,
launch once, compare each output with its reference, within its own tolerance (NaN and
unwritten elements fail), warm up, then time repeated
launches between device events with a cold L2 cache for each, until the spread is small
enough, the time budget is spent, or the repeat limit is reached.

A cold L2 costs nothing per launch where the problem's tensors are large enough: the timed
launches rotate among copies of them (ProblemBench.copies), enough that the traffic of the other
copies evicts each one before its next use. Small problems, which would need too many copies,
get a memset of the L2's size before each launch instead.
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from farm.compile import CodeCache, compile_source
from farm.gpu.base import Device, GpuError
from farm.launch import Runnable, pack_args, runnable_of
from farm.telemetry import Telemetry
from farm.timing import TimingPolicy
from kernels.family import DTYPE_CODES, Instance, KernelFamily, grid_stride_blocks
from kernels.registry import operator_spec
from kernels.source import load_source

ELEMENT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
POISON_BYTE = 0xFF  # all-ones is NaN in fp32, fp16 and bf16
MAX_COPIES = 16  # more tensor copies than this to keep the L2 cold: flush with a memset instead
LOOKAHEAD_US = 150.0  # GPU work kept queued past a timing checkpoint (covers the host's check)
HOST_LAUNCH_US = 50.0  # the host's time to queue one timed launch, until measured
HOLD_BELOW = 0.7  # hold the GPU before a batch when host time per launch > this x GPU time
HOLD_LIMIT_S = 2.0  # a hold the host never released (it died) ends on its own after this


class DeviceLost(RuntimeError):
    """The context cannot be used again (illegal address, hang): restart the process."""


@dataclass(frozen=True)
class PairResult:
    """The outcome of one instance on one problem: a status and, if it ran, its timings."""

    status: str
    median_us: float | None = None
    min_us: float | None = None
    max_us: float | None = None
    p90_us: float | None = None
    samples: int = 0
    spread: float | None = None
    tflops: float | None = None
    gbps: float | None = None
    verify_error: float | None = None
    message: str | None = None
    policy: dict = field(default_factory=dict)
    telemetry: dict = field(default_factory=dict)

    def row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def summarize(times_us: list[float]) -> dict[str, float]:
    """Median, min, max, p90, spread = (p90 - min) / median."""
    arr = np.sort(np.asarray(times_us))
    median = float(np.median(arr))
    p90 = float(np.percentile(arr, 90))
    return {"median_us": median, "min_us": float(arr[0]), "max_us": float(arr[-1]),
            "p90_us": p90, "spread": (p90 - float(arr[0])) / median if median > 0 else 0.0}


def median_ci(times_us: list[float]) -> float:
    """Half-width of the median's 95% confidence interval relative to the median, from the
    order statistics n/2 -+ 0.98 sqrt(n) (no assumption about the distribution)."""
    arr = np.sort(np.asarray(times_us))
    n = len(arr)
    low = max(0, int(np.floor(n / 2 - 0.98 * np.sqrt(n))))
    high = min(n - 1, int(np.ceil(n / 2 + 0.98 * np.sqrt(n))))
    median = float(np.median(arr))
    return (float(arr[high]) - float(arr[low])) / 2 / median if median > 0 else 0.0


def wait(device: Device, timeout_s: float, event: Any = None) -> None:
    """Return once the device is idle (or `event` has completed); raise DeviceLost if that has
    not happened after timeout_s. Polls with sleeps of at most 0.2 ms, so a hung kernel cannot
    block us and finished work is noticed promptly."""
    done = device.idle if event is None else (lambda: device.event_done(event))
    start = time.perf_counter()
    pause = 0.0
    while not done():
        waited = time.perf_counter() - start
        if waited > timeout_s:
            raise DeviceLost(f"timeout: the kernel did not finish within {timeout_s:g} s")
        time.sleep(pause)
        pause = min(0.0002, waited / 20)


class SupportKernels:
    """fill_random, compare and hold, compiled for one element type and loaded on one device."""

    def __init__(self, device: Device, dtype: str, target: str, cache: CodeCache | None):
        compiled = compile_source(load_source("support.cu"), {"FARM_DTYPE": DTYPE_CODES[dtype]},
                                  target, cache)
        if not compiled.result.ok:
            raise RuntimeError(f"support kernels failed to compile:\n{compiled.result.log}")
        module = device.load_module(compiled.result.code)
        self.device, self.sm_count = device, int(device.fingerprint().get("sm_count", 132))
        self.fill = device.function(module, "fill_random")
        self.compare_fn = device.function(module, "compare")
        self.hold_fn = device.function(module, "hold")
        self.scratch = device.alloc(32)
        self.gate_host, self.gate = device.host_mapped(4)
        self.gate_value = ctypes.c_uint32.from_address(self.gate_host)
        self.gate_value.value = 0

    def hold(self) -> int:
        """Queue a kernel that holds the GPU until release() (see `hold` in support.cu)."""
        value = (self.gate_value.value + 1) & 0xFFFFFFFF
        self.device.launch(self.hold_fn, (1, 1, 1), (1, 1, 1), 0,
                           [("ptr", self.gate), ("u32", value),
                            ("u64", int(HOLD_LIMIT_S * 1e9))])
        return value

    def release(self, value: int) -> None:
        self.gate_value.value = value

    def fill_random(self, ptr: int, elements: int, seed: int) -> None:
        blocks = grid_stride_blocks(elements, 256, self.sm_count, 8)
        self.device.launch(self.fill, (blocks, 1, 1), (256, 1, 1), 0,
                           [("ptr", ptr), ("u64", elements), ("u32", seed), ("f32", 1.0)])

    def compare(self, out: int, ref: int, elements: int) -> tuple[float, float, int, float]:
        """(||out-ref||^2, ||ref||^2, non-finite count, max|out-ref|, max|ref|) on the GPU."""
        self.device.memset(self.scratch, 0, 32)
        blocks = grid_stride_blocks(elements, 256, self.sm_count, 4)
        self.device.launch(self.compare_fn, (blocks, 1, 1), (256, 1, 1), 0,
                           [("ptr", out), ("ptr", ref), ("u64", elements),
                            ("ptr", self.scratch), ("ptr", self.scratch + 16)])
        raw = self.device.copy_from_device(self.scratch, 32).tobytes()
        d2, r2 = np.frombuffer(raw[:16], dtype=np.float64)
        worst, bad, peak = np.frombuffer(raw[16:28], dtype=np.uint32)
        as_float = lambda bits: float(np.array([bits], np.uint32).view(np.float32)[0])  # noqa: E731
        return float(d2), float(r2), int(bad), as_float(worst), as_float(peak)


class ProblemBench:
    """One problem on one device: inputs, outputs, workspace and the fp32 reference of every
    output, made once."""

    def __init__(self, device: Device, problem: Any, support: SupportKernels, target: str,
                 cache: CodeCache | None, seed: int = 1, timeout_s: float = 60.0,
                 support_for: Callable[[str], SupportKernels] | None = None):
        """support: the problem's element type's kernels; support_for: those of another type
        (an operator's tensors may differ: fp32 statistics beside bf16 data)."""
        self.device, self.problem, self.support = device, problem, support
        self.support_for = support_for or (lambda dtype: support)
        self.spec = operator_spec(problem.op)
        self.tensors = self.spec.tensors(problem)
        self.outputs = [t for t in self.tensors if t.role == "output"]
        self.tolerances = {t.name: self.spec.tolerance(problem, t.name) for t in self.outputs}
        self.pointers: dict[str, int] = {}
        self.references: dict[str, int] = {}
        self.workspace_bytes = 0
        self.seed = seed
        self._copies: list[dict[str, int]] = []
        self.reference_module = None
        try:
            self._load_reference(target, cache)
            self._allocate(self.pointers, seed)
            for tensor in self.outputs:
                self.references[tensor.name] = device.alloc(tensor.elements * 4)
            self._run_reference(timeout_s)
        except BaseException:
            self.close()
            raise

    def nbytes(self, tensor: Any) -> int:
        return tensor.elements * ELEMENT_BYTES[tensor.element_type(self.problem)]

    def _allocate(self, pointers: dict[str, int], seed: int) -> None:
        """Every tensor into `pointers` (freed by close() even if one fails); inputs random,
        then the operator's derived inputs computed from them (OperatorSpec.input_launches)."""
        for index, tensor in enumerate(self.tensors):
            pointers[tensor.name] = self.device.alloc(self.nbytes(tensor))
            if tensor.role == "input":
                self.support_for(tensor.element_type(self.problem)).fill_random(
                    pointers[tensor.name], tensor.elements, seed * 7919 + index)
        self._launch_reference(self.spec.input_launches(self.problem), pointers)

    def _load_reference(self, target: str, cache: CodeCache | None) -> None:
        compiled = compile_source(load_source(self.spec.reference_source),
                                  self.spec.reference_defines(self.problem.dtype), target, cache)
        if not compiled.result.ok:
            raise RuntimeError(f"reference kernel failed to compile:\n{compiled.result.log}")
        self.reference_module = self.device.load_module(compiled.result.code)

    def _launch_reference(self, launches: list, pointers: dict[str, int]) -> None:
        for launch in launches:
            self.device.launch(self.device.function(self.reference_module, launch.entry),
                               launch.grid, launch.block, launch.shared_bytes,
                               pack_args(launch, pointers))

    def _run_reference(self, timeout_s: float) -> None:
        """The fp32 reference of every output, with the reference's own scratch (if any)."""
        scratch = self.spec.reference_workspace_bytes(self.problem)
        pointers = {**self.pointers, **self.references}
        if scratch:
            pointers["workspace"] = self.device.alloc(scratch)
        try:
            self._launch_reference(self.spec.reference_launches(self.problem), pointers)
            wait(self.device, timeout_s)
        finally:
            if scratch:
                self.device.free(pointers["workspace"])

    def poison_outputs(self) -> None:
        for tensor in self.outputs:
            self.device.memset(self.pointers[tensor.name], POISON_BYTE, self.nbytes(tensor))

    def verify(self) -> tuple[float, str | None]:
        """Compare every output with its reference: (the worst relative L2 error, why it is
        wrong or None). NaN, infinite or unwritten elements always fail."""
        worst_l2, why = 0.0, None
        for tensor in self.outputs:
            support = self.support_for(tensor.element_type(self.problem))
            d2, r2, bad, worst, peak = support.compare(self.pointers[tensor.name],
                                                       self.references[tensor.name],
                                                       tensor.elements)
            rel_l2 = math.sqrt(d2 / r2) if r2 > 0 else (0.0 if d2 == 0 else math.inf)
            rel_max = worst / peak if peak > 0 else (0.0 if worst == 0 else math.inf)
            limit = self.tolerances[tensor.name]
            name = f"{tensor.name}: " if len(self.outputs) > 1 else ""
            if bad:
                worst_l2 = math.inf
                why = why or (f"{name}{bad} of {tensor.elements} output elements are NaN or "
                              "infinite (unwritten or overflowed)")
                continue
            worst_l2 = max(worst_l2, rel_l2)
            if rel_l2 > limit.rel_l2 or rel_max > limit.rel_max:
                why = why or (f"{name}relative L2 error {rel_l2:.3g} (limit {limit.rel_l2:.3g}), "
                              f"max error {rel_max:.3g} of max |ref| (limit "
                              f"{limit.rel_max:.3g})")
        return worst_l2, why

    def ensure_workspace(self, nbytes: int) -> None:
        if nbytes > self.workspace_bytes:
            if self.workspace_bytes:
                self.device.free(self.pointers.pop("workspace"))
            self.pointers["workspace"] = self.device.alloc(nbytes)
            self.device.memset(self.pointers["workspace"], 0, nbytes)
            self.workspace_bytes = nbytes

    @property
    def tensor_bytes(self) -> int:
        return sum(self.nbytes(tensor) for tensor in self.tensors)

    def copies(self, policy: TimingPolicy) -> list[dict[str, int]]:
        """Pointer sets to rotate the timed launches among: the problem's own tensors first,
        then copies (inputs drawn at random, the workspace shared), as many as it takes for the
        others to move flush_factor L2 sizes through the cache between two uses of one set.
        Empty when that takes more than MAX_COPIES sets: flush with a memset then."""
        l2_bytes = getattr(self.device, "l2_bytes", 0)
        if not l2_bytes:
            return []
        count = math.ceil(policy.flush_factor * l2_bytes / self.tensor_bytes) + 1
        if count > MAX_COPIES:
            return []
        while len(self._copies) < count - 1:
            copy: dict[str, int] = {}
            self._copies.append(copy)  # freed by close() even if an allocation fails
            self._allocate(copy, self.seed + len(self._copies))
        return [self.pointers, *({**self.pointers, **copy} for copy in self._copies[:count - 1])]

    def close(self) -> None:
        copied = [ptr for copy in getattr(self, "_copies", []) for ptr in copy.values()]
        for ptr in [*self.pointers.values(), *getattr(self, "references", {}).values(),
                    *copied]:
            if ptr:
                self.device.free(ptr)
        self.pointers, self.references, self._copies = {}, {}, []


def event_pairs(device: Device, count: int) -> list[tuple[Any, Any]]:
    """`count` (start, stop) event pairs, created once per device and reused."""
    pool = device.__dict__.setdefault("_event_pool", [])
    while len(pool) < count:
        pool.append((device.event_create(), device.event_create()))
    return pool[:count]


def _rates(problem: Any, median_us: float) -> dict[str, float]:
    seconds = median_us * 1e-6
    return {"tflops": problem.flops / seconds / 1e12, "gbps": problem.min_bytes / seconds / 1e9}


def _mark(trace: list[tuple[str, float]] | None, label: str) -> None:
    if trace is not None:
        trace.append((label, time.perf_counter()))


def measure(bench: ProblemBench, family: KernelFamily, instance: Instance, module: Any,
            policy: TimingPolicy, telemetry: Telemetry | None = None,
            trace: list[tuple[str, float]] | None = None,
            best_us: float | None = None) -> PairResult:
    """Verify, then time, one instance on the bench's problem. Raises DeviceLost when the
    context is gone (the caller records the pair and restarts the process). `best_us`: the
    fastest median measured on this problem so far (policy.stop_slower_than). `trace`, when
    given, collects (phase, host clock) marks for profiling the harness itself."""
    _mark(trace, "start")
    device, problem = bench.device, bench.problem
    policy_record = policy.model_dump()
    bench.ensure_workspace(family.workspace_bytes(instance, problem))
    try:
        runnable = runnable_of(family, instance, problem, device, module, bench.pointers)
        bench.poison_outputs()
        runnable.enqueue()
        runnable.publish()
        wait(device, policy.timeout_s)
        rel_l2, why = bench.verify()
        _mark(trace, "verified")
        runnables = _rotation(bench, family, instance, module, policy, runnable)
    except GpuError as exc:
        if exc.context_lost:
            raise DeviceLost(f"launch_error: {exc}") from exc
        return PairResult("launch_error", message=str(exc), policy=policy_record)
    if why is not None:
        return PairResult("wrong_result", verify_error=rel_l2, message=why,
                          policy=policy_record)
    policy_record["l2_copies"] = len(runnables) if policy.flush_l2 else 0
    _mark(trace, "copies")
    return _time(bench, runnables, policy, policy_record, rel_l2, telemetry, trace, best_us)


def _rotation(bench: ProblemBench, family: KernelFamily, instance: Instance, module: Any,
              policy: TimingPolicy, runnable: Runnable) -> list[Runnable]:
    """The runnables the timed launches cycle through: one per tensor copy when rotating keeps
    the L2 cold, else just `runnable` (then each launch follows a memset flush)."""
    if not policy.flush_l2 or policy.flush_method != "rotate":
        return [runnable]
    copies = bench.copies(policy)
    return [runnable, *(runnable_of(family, instance, bench.problem, bench.device, module,
                                    pointers) for pointers in copies[1:])]


class _LaunchQueue:
    """Queues the timed launches, each between its event pair. Where the host cannot queue
    launches faster than the GPU runs them (small kernels, library calls), a batch is preceded
    by a hold on the GPU that the host releases once it has queued all of it, so that a timed
    interval never contains the host's launch overhead."""

    def __init__(self, bench: ProblemBench, runnables: list[Runnable], events: list,
                 policy: TimingPolicy) -> None:
        self.bench, self.runnables, self.events = bench, runnables, events
        self.limit, self.flush_factor = policy.max_repeats, policy.flush_factor
        self.memset_flush = policy.flush_l2 and len(runnables) == 1
        self.queued = 0
        self.host_us = HOST_LAUNCH_US  # the host's time to queue one timed launch (measured)

    def past(self, checkpoint: int, gpu_us: float | None) -> None:
        """Queue launches up to `checkpoint` and about LOOKAHEAD_US of GPU work beyond it;
        `gpu_us`: the GPU's time for one launch so far (None: not known yet)."""
        stop = min(checkpoint + _lookahead(gpu_us), self.limit)
        if stop <= self.queued:
            return
        count = stop - self.queued
        held = (self.bench.support.hold()
                if gpu_us is None or self.host_us > HOLD_BELOW * gpu_us else None)
        device, begin_at = self.bench.device, time.perf_counter()
        for index in range(self.queued, stop):
            begin, end = self.events[index]
            if self.memset_flush:
                device.flush_l2(self.flush_factor)
            device.event_record(begin)
            self.runnables[index % len(self.runnables)].enqueue()
            device.event_record(end)
        self.host_us = 1e6 * (time.perf_counter() - begin_at) / count
        if held is not None:
            self.bench.support.release(held)
        self.queued = stop


def _time(bench: ProblemBench, runnables: list[Runnable], policy: TimingPolicy,
          policy_record: dict, rel_l2: float, telemetry: Telemetry | None,
          trace: list[tuple[str, float]] | None, best_us: float | None) -> PairResult:
    """Timed launches in batches, checked after each batch (stop on the confidence interval,
    the budget, the repeat limit, or a median far above `best_us`). The GPU never waits for
    these checks: launches worth about LOOKAHEAD_US stay queued past each checkpoint, and are
    read as samples when timing stops."""
    device = bench.device
    before = telemetry.sample() if telemetry else {}
    _mark(trace, "telemetry")
    limit = policy.max_repeats
    events = event_pairs(device, limit + 1)
    launches = _LaunchQueue(bench, runnables, events, policy)
    warm_begin, warm_end = events[limit]
    begin_at = time.perf_counter()
    device.event_record(warm_begin)
    for _ in range(policy.warmup):
        runnables[0].enqueue()
    device.event_record(warm_end)
    if policy.warmup:
        launches.host_us = 1e6 * (time.perf_counter() - begin_at) / policy.warmup
    if policy.flush_l2 and not launches.memset_flush:
        device.flush_l2(policy.flush_factor)  # once: the verified and warm-up launches' tensors
    warm_us = None
    if policy.warmup:  # the warm-up's time decides the hold and the look-ahead
        wait(device, policy.timeout_s, warm_end)
        warm_us = 1000.0 * device.event_elapsed_ms(warm_begin, warm_end) / policy.warmup
    early = bool(best_us and policy.far_slower_than and policy.early_look < policy.min_repeats)
    checkpoint = policy.early_look if early else policy.min_repeats
    launches.past(checkpoint, warm_us)
    _mark(trace, "warmed")
    times: list[float] = []
    start = time.perf_counter()
    while True:
        while len(times) < checkpoint:
            begin, end = events[len(times)]
            wait(device, policy.timeout_s, end)  # read each repeat while later ones still run
            times.append(1000.0 * device.event_elapsed_ms(begin, end))
        _mark(trace, "timed")
        stats = summarize(times)
        spent_ms = 1000.0 * (time.perf_counter() - start)
        if len(times) < policy.min_repeats:  # the early check: only a far slower one stops
            stop = "slower" if stats["median_us"] > policy.far_slower_than * best_us else None
            following = policy.min_repeats
        else:
            stop = ("max_repeats" if len(times) >= limit else
                    "confident" if median_ci(times) <= policy.target_ci else
                    "budget" if spent_ms >= policy.budget_ms else
                    "slower" if (best_us and policy.stop_slower_than and
                                 stats["median_us"] > policy.stop_slower_than * best_us) else None)
            per_launch_ms = max(spent_ms / len(times), stats["median_us"] / 1000.0, 1e-3)
            room = int((policy.budget_ms - spent_ms) / per_launch_ms)
            following = len(times) + max(1, min(len(times), room, limit - len(times)))
        if stop:
            break
        checkpoint = following
        launches.past(checkpoint, stats["median_us"])
    for begin, end in events[len(times):launches.queued]:  # the look-ahead: samples too
        wait(device, policy.timeout_s, end)
        times.append(1000.0 * device.event_elapsed_ms(begin, end))
    stats = summarize(times)
    after = telemetry.sample() if telemetry else {}
    _mark(trace, "done")
    return PairResult("ok", samples=len(times), verify_error=rel_l2,
                      policy={**policy_record, "stop": stop},
                      telemetry=Telemetry.compare(before, after) if telemetry else {},
                      **stats, **_rates(bench.problem, stats["median_us"]))


def _lookahead(median_us: float | None) -> int:
    """Launches that keep the GPU busy for about LOOKAHEAD_US while the host checks."""
    return max(1, math.ceil(LOOKAHEAD_US / max(median_us or HOST_LAUNCH_US, 0.1)))
