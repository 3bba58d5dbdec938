"""The farm's own cost per measured pair against the kernel's timed time, and repeatability.

Two real kernels (the fastest conv_direct instance on a MobileNetV2 depthwise 3x3, memory-bound,
and the fastest conv_igemm instance on a ResNet-50 3x3, compute-bound), their batch size scaled
so that they take about 5, 50 and 500 us. For each, with each way of keeping the L2 cold
(rotating among tensor copies, or a memset before each launch): the wall time of one measure()
call (poison, launch, verify, warm up, timed repeats) over the summed time of its timed launches,
where that wall time goes (host marks from measure's trace), and the spread of the median when
the same pair is measured 10 times. Also whether each cold-L2 method evicts: a kernel reading
24 MiB (which fits in the L2) timed with no flush, after memsets of 1, 2 and 4 L2 sizes, and
rotating among 2, 3 and 4 copies of its buffers.
Usage: python -m bench.measure_overhead [--out DIR]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np

from bench.common import write_result
from farm.gpu.base import KernelArgs
from farm.measure import ELEMENT_BYTES, ProblemBench, event_pairs, measure, wait
from kernels.conv.problem import ConvProblem
from farm.timing import TimingPolicy
from farm.worker import GpuWorker
from kernels import get_family
from kernels.registry import operator_spec

TARGETS_US = (5, 50, 500)
REPEATS = 10
QUICK = TimingPolicy(min_repeats=5, max_repeats=10, target_ci=0.05)
SERIES = {  # name: (family, shape at batch n)
    "depthwise 3x3 (direct)": ("conv_direct", lambda n: ConvProblem(
        op="conv2d_fwd", dtype="bf16", N=n, C=144, K=144, G=144, H=56, W=56, R=3, S=3,
        pad_h=1, pad_w=1)),
    "dense 3x3 (igemm)": ("conv_igemm", lambda n: ConvProblem(
        op="conv2d_fwd", dtype="bf16", N=n, C=64, K=64, G=1, H=56, W=56, R=3, S=3,
        pad_h=1, pad_w=1)),
}


def measure_pair(worker, family, instance, problem, policy, repeats=REPEATS):
    """(wall us, result, trace) for `repeats` measure() calls of one pair on one bench."""
    module, log = worker.module(instance)
    assert module is not None, log
    bench = ProblemBench(worker.device, problem, worker.support(problem.dtype), worker.target,
                         worker.cache)
    try:
        rows = []
        for _ in range(repeats):
            trace: list[tuple[str, float]] = []
            start = time.perf_counter()
            result = measure(bench, family, instance, module, policy, worker.telemetry, trace)
            wall_us = 1e6 * (time.perf_counter() - start)
            assert result.status == "ok", result.message
            rows.append((wall_us, result, trace))
        return rows
    finally:
        bench.close()


def fastest(worker, family, problem):
    """The family's fastest verified instance on `problem`."""
    best = None
    for instance in family.instances(problem.op, problem.dtype):
        if family.applicable(instance, problem):
            continue
        _, result, _ = measure_pair(worker, family, instance, problem, QUICK, repeats=1)[0]
        if best is None or result.median_us < best[1]:
            best = (instance, result.median_us)
    return best[0]


def calibrate(worker, family, instance, make, target_us):
    """The batch size at which `instance` takes about target_us."""
    n = 1
    while True:
        median = measure_pair(worker, family, instance, make(n), QUICK, 1)[0][1].median_us
        if median >= target_us or n >= 4096:
            return make(max(1, round(n * target_us / median)))
        n = max(n * 2, int(n * target_us / median * 0.8))


def tensor_bytes(problem) -> int:
    return sum(t.elements for t in operator_spec(problem.op).tensors(problem)) \
        * ELEMENT_BYTES[problem.dtype]


def phases(trace: list[tuple[str, float]]) -> dict[str, float]:
    """Microseconds per phase of one measure() call, summed over the timed batches."""
    out: dict[str, float] = defaultdict(float)
    for (_, t0), (label, t1) in zip(trace, trace[1:]):
        out[label] += 1e6 * (t1 - t0)
    return dict(out)


def flush_check(worker) -> dict[str, float]:
    """Median time of a 24 MiB read (the compare kernel) with no flush, after memsets of
    growing size, and rotating among copies of its buffers."""
    support, device = worker.support("bf16"), worker.device
    elements = 4 << 20  # bf16 output + fp32 reference: 24 MiB read per launch
    sets = []
    for copy in range(4):
        out, ref, scratch = device.alloc(2 * elements), device.alloc(4 * elements), \
            device.alloc(32)
        support.fill_random(out, elements, 1 + copy)
        support.fill_random(ref, elements, 11 + copy)  # fp32 buffer read as 2x bf16: any bits
        sets.append((out, ref, scratch, KernelArgs.pack([
            ("ptr", out), ("ptr", ref), ("u64", elements), ("ptr", scratch),
            ("ptr", scratch + 16)])))
    grid, block = (worker.fingerprint.get("sm_count", 132) * 4, 1, 1), (256, 1, 1)

    def timed(flush: int, copies: int) -> float:
        pairs = event_pairs(device, 60)
        for index, (begin, end) in enumerate(pairs):
            if flush:
                device.flush_l2(flush)
            device.event_record(begin)
            device.launch(support.compare_fn, grid, block, 0, sets[index % copies][3])
            device.event_record(end)
        wait(device, 10)
        return float(np.median([1000 * device.event_elapsed_ms(b, e) for b, e in pairs[10:]]))

    result = {"no_flush_us": timed(0, 1)}
    for factor in (1, 2, 4):
        result[f"memset_{factor}x_l2_us"] = timed(factor, 1)
    for copies in (2, 3, 4):
        result[f"rotate_{copies}_copies_us"] = timed(0, copies)
    for out, ref, scratch, _ in sets:
        for ptr in (out, ref, scratch):
            device.free(ptr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    worker = GpuWorker()
    figures = {"policies": {}, "pairs": []}
    methods = {m: TimingPolicy(flush_method=m) for m in ("rotate", "memset")}
    figures["policies"] = {m: p.model_dump() for m, p in methods.items()}
    print(f"{'series':>22} {'flush':>6} {'target':>6} {'median_us':>9} {'copies':>6} "
          f"{'repeats':>7} {'wall_us':>8} {'timed_us':>8} {'overhead':>8} {'spread':>7}  "
          "phases (us)")
    for series, (family_name, make) in SERIES.items():
        family = get_family(family_name)
        instance = fastest(worker, family, make(32))
        problems = {t: calibrate(worker, family, instance, make, t) for t in TARGETS_US}
        for method, policy in methods.items():
            for target, problem in problems.items():
                rows = measure_pair(worker, family, instance, problem, policy)
                medians = np.array([r.median_us for _, r, _ in rows])
                walls = np.array([w for w, _, _ in rows])
                timed = np.array([r.median_us * r.samples for _, r, _ in rows])
                split = [phases(t) for _, _, t in rows]
                entry = {"series": series, "instance": instance.name, "flush_method": method,
                         "target_us": target, "problem": problem.label(),
                         "tensor_mib": tensor_bytes(problem) / 2**20,
                         "l2_copies": rows[0][1].policy.get("l2_copies"),
                         "median_us": float(np.median(medians)),
                         "samples": [r.samples for _, r, _ in rows],
                         "wall_us_per_pair": float(np.median(walls)),
                         "timed_us_per_pair": float(np.median(timed)),
                         "overhead_ratio": float(np.median(walls / timed)),
                         "spread_of_medians": float((medians.max() - medians.min())
                                                    / np.median(medians)),
                         "within_pair_spread": float(np.median([r.spread for _, r, _ in rows])),
                         "phases_us": {k: float(np.median([s.get(k, 0.0) for s in split]))
                                       for k in split[0]},
                         "clock_dropped": any(r.telemetry.get("clock_dropped")
                                              for _, r, _ in rows)}
                figures["pairs"].append(entry)
                print(f"{series:>22} {method:>6} {target:>6} {entry['median_us']:>9.2f} "
                      f"{entry['l2_copies']:>6} {int(np.median(entry['samples'])):>7} "
                      f"{entry['wall_us_per_pair']:>8.0f} {entry['timed_us_per_pair']:>8.0f} "
                      f"{entry['overhead_ratio']:>8.2f} {entry['spread_of_medians']:>7.4f}  "
                      + " ".join(f"{k}={v:.0f}" for k, v in entry["phases_us"].items()))
    figures["flush_check"] = flush_check(worker)
    print("flush check (24 MiB read, median us):", figures["flush_check"])
    path = write_result("measure_overhead", worker.fingerprint, figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
