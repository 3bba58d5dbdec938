"""Verifying every instance of some families on edge shapes through the farm's measuring path
(the GPU tests of the operators beyond the convolutions)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from farm.timing import TimingPolicy
from kernels.registry import get_family

VERIFY_ONLY = TimingPolicy(warmup=0, min_repeats=1, max_repeats=1, flush_l2=False, timeout_s=30)


def verify_on_edges(worker: Any, op: str, dtype: str, families: Sequence[str],
                    problems: Iterable[Any],
                    must_serve: Callable[[str, Any], bool] = lambda family, problem: True
                    ) -> list[str]:
    """Every instance of `families` (the vendor's included) on each problem: the failures, as
    lines; a wrong, crashing or timed-out instance fails, as does a vendor row that is not ok
    and a family with no instance that serves a problem it must serve (`must_serve(family,
    problem)`). Prints the statuses and each family's worst verification error."""
    instances = [i for name in families for i in get_family(name).instances(op, dtype)]
    failures: list[str] = []
    statuses: Counter = Counter()
    worst: dict[str, tuple[float, str]] = {}
    for problem in problems:
        served: Counter = Counter()
        for instance, result in worker.measure_problem(problem, instances, VERIFY_ONLY):
            statuses[instance.family, result.status] += 1
            if result.status == "ok":
                served[instance.family] += 1
                previous = worst.get(instance.family, (0.0, ""))
                if (result.verify_error or 0.0) > previous[0]:
                    worst[instance.family] = (result.verify_error, problem.label())
            elif result.status != "unsupported" or instance.family == "vendor":
                failures.append(f"{instance.name} on {problem.label()}: {result.status} "
                                f"{result.message}")
        for family in families:
            if not served[family] and must_serve(family, problem):
                failures.append(f"no {family} instance serves {problem.label()} {dtype}")
    print(dtype, dict(statuses), "worst relative L2 error:", worst)
    return failures
