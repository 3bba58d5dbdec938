"""The farm's own cost per measured pair against the kernel's timed time, and repeatability.

For conv_naive instances of about 5, 50 and 500 us: the wall time of one measure() call
(poison, launch, verify, warm up, timed repeats with the L2 flushed) over the summed time of
its timed launches, and the spread of the median when the same pair is measured 10 times.
Usage: python bench/measure_overhead.py [--out DIR]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import write_result
from farm.measure import ProblemBench, measure
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    worker = GpuWorker()
    policy = TimingPolicy()
    figures = {"policy": policy.model_dump(), "pairs": []}
    print(f"{'target':>7} {'median_us':>10} {'samples':>8} {'wall_us':>10} {'timed_us':>10} "
          f"{'overhead':>8} {'spread_of_medians':>17}")
    for target in TARGETS_US:
        problem = calibrate(worker, target, TimingPolicy(min_repeats=5, max_repeats=20))
        rows = run_pair(worker, problem, policy)
        medians = np.array([r.median_us for _, r in rows])
        walls = np.array([w for w, _ in rows])
        timed = np.array([r.median_us * r.samples for _, r in rows])
        entry = {"target_us": target, "problem": problem.label(),
                 "median_us": float(np.median(medians)), "samples": [r.samples for _, r in rows],
                 "wall_us_per_pair": float(np.median(walls)),
                 "timed_us_per_pair": float(np.median(timed)),
                 "overhead_ratio": float(np.median(walls / timed)),
                 "spread_of_medians": float((medians.max() - medians.min()) / np.median(medians)),
                 "within_pair_spread": float(np.median([r.spread for _, r in rows])),
                 "clock_dropped": any(r.telemetry.get("clock_dropped") for _, r in rows)}
        figures["pairs"].append(entry)
        print(f"{target:>7} {entry['median_us']:>10.2f} {int(np.median(entry['samples'])):>8} "
              f"{entry['wall_us_per_pair']:>10.0f} {entry['timed_us_per_pair']:>10.0f} "
              f"{entry['overhead_ratio']:>8.2f} {entry['spread_of_medians']:>17.4f}")
    path = write_result("measure_overhead", worker.fingerprint, figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
