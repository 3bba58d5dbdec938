"""The farm's own cost per measured pair against the kernel's timed time, and repeatability.

For conv_naive instances of about 5, 50 and 500 us: the wall time of one measure() call
(poison, launch, verify, warm up, timed repeats with the L2 flushed) over the summed time of
its timed launches, and the spread of the median when the same pair is measured 10 times.
Also whether a flush of one L2 size evicts as well as larger ones: a kernel that reads 24 MB
(which fits in L2) timed after no flush and after flushes of 1, 2 and 4 L2 sizes.
Usage: python -m bench.measure_overhead [--out DIR]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import write_result
from farm.gpu.base import KernelArgs
from farm.measure import ProblemBench, event_pairs, measure, wait
from farm.problems import ConvProblem
from farm.timing import TimingPolicy
from farm.worker import GpuWorker
from kernels import get_family

TARGETS_US = (5, 50, 500)
REPEATS = 10


def shape(n: int) -> ConvProblem:
    return ConvProblem(op="conv2d_fwd", dtype="bf16", N=n, C=64, K=64, G=8, H=28, W=28, R=3, S=3,
                       pad_h=1, pad_w=1)


def run_pair(worker, problem, policy):
    family = get_family("conv_naive")
    instance = family.instances("conv2d_fwd", "bf16")[1]
    module, _ = worker.module(instance)
    bench = ProblemBench(worker.device, problem, worker.support("bf16"), worker.target,
                         worker.cache)
    try:
        rows = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            result = measure(bench, family, instance, module, policy, worker.telemetry)
            wall_us = 1e6 * (time.perf_counter() - start)
            assert result.status == "ok", result.message
            rows.append((wall_us, result))
        return rows
    finally:
        bench.close()


def calibrate(worker, target_us, policy):
    n = 1
    while True:
        median = run_pair(worker, shape(n), policy)[0][1].median_us
        if median >= target_us or n >= 4096:
            return shape(max(1, round(n * target_us / median)))
        n = max(n * 2, int(n * target_us / median * 0.8))


def flush_check(worker) -> dict[str, float]:
    """Median time of a 24 MB read (the compare kernel) after flushes of growing size."""
    support, device = worker.support("bf16"), worker.device
    elements = 4 << 20  # bf16 output + fp32 reference: 24 MiB read per launch
    out, ref, scratch = device.alloc(2 * elements), device.alloc(4 * elements), device.alloc(32)
    support.fill_random(out, elements, 1)
    args = KernelArgs.pack([("ptr", out), ("ptr", ref), ("u64", elements), ("ptr", scratch),
                            ("ptr", scratch + 16)])
    result = {}
    for factor in (0, 1, 2, 4):
        pairs = event_pairs(device, 50)
        for begin, end in pairs:
            if factor:
                device.flush_l2(factor)
            device.event_record(begin)
            device.launch(support.compare_fn, (132 * 4, 1, 1), (256, 1, 1), 0, args)
            device.event_record(end)
        wait(device, 10)
        result[f"flush_{factor}x_l2_us"] = float(np.median(
            [1000 * device.event_elapsed_ms(b, e) for b, e in pairs]))
    for ptr in (out, ref, scratch):
        device.free(ptr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    worker = GpuWorker()
    figures = {"policies": {}, "pairs": []}
    print(f"{'flush':>5} {'target':>7} {'median_us':>10} {'samples':>8} {'wall_us':>10} "
          f"{'timed_us':>10} {'overhead':>8} {'spread_of_medians':>17}")
    problems = {t: calibrate(worker, t, TimingPolicy(min_repeats=5, max_repeats=20))
                for t in TARGETS_US}
    for factor in (2.0, 1.0):
        policy = TimingPolicy(flush_factor=factor)
        figures["policies"][str(factor)] = policy.model_dump()
        for target, problem in problems.items():
            rows = run_pair(worker, problem, policy)
            medians = np.array([r.median_us for _, r in rows])
            walls = np.array([w for w, _ in rows])
            timed = np.array([r.median_us * r.samples for _, r in rows])
            entry = {"flush_factor": factor, "target_us": target, "problem": problem.label(),
                     "median_us": float(np.median(medians)),
                     "samples": [r.samples for _, r in rows],
                     "wall_us_per_pair": float(np.median(walls)),
                     "timed_us_per_pair": float(np.median(timed)),
                     "overhead_ratio": float(np.median(walls / timed)),
                     "spread_of_medians": float((medians.max() - medians.min())
                                                / np.median(medians)),
                     "within_pair_spread": float(np.median([r.spread for _, r in rows])),
                     "clock_dropped": any(r.telemetry.get("clock_dropped") for _, r in rows)}
            figures["pairs"].append(entry)
            print(f"{factor:>5} {target:>7} {entry['median_us']:>10.2f} "
                  f"{int(np.median(entry['samples'])):>8} {entry['wall_us_per_pair']:>10.0f} "
                  f"{entry['timed_us_per_pair']:>10.0f} {entry['overhead_ratio']:>8.2f} "
                  f"{entry['spread_of_medians']:>17.4f}")
    figures["flush_check"] = flush_check(worker)
    print("flush check (24 MiB read, median us):", figures["flush_check"])
    path = write_result("measure_overhead", worker.fingerprint, figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
