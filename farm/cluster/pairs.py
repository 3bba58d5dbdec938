"""A job's pairs: every selected kernel instance on every problem, with the store's ids, and
which of them are finished already in the environments that serve the job."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from farm.problems import Problem
from farm.specs import JobSpec, matches
from farm.store import SETTLED_STATES, Queries
from farm.timing import TimingPolicy
from kernels import families_for, get_family
from kernels.family import Instance

Pair = tuple[int, int]  # (problem id, kernel id)


@dataclass(frozen=True)
class JobPlan:
    """What one job measures: its problems and instances by store id, and its pairs in order."""

    job_id: int
    name: str
    operator: str
    dtype: str
    policy: TimingPolicy
    problems: dict[int, Problem]
    instances: dict[int, Instance]
    pairs: tuple[Pair, ...]


@dataclass(frozen=True)
class Progress:
    """Pairs of some problems of a job that are finished already: measured by this job before
    (done, failed: a resumed problem) or by another job in the same environment (cached, per
    problem); `todo` is the rest, in job order."""

    done: int
    failed: int
    cached: dict[int, int]
    todo: tuple[Pair, ...]


def is_testing_family(family: Any) -> bool:
    return type(family).__module__.startswith("kernels.testing")


def select_instances(spec: JobSpec) -> list[Instance]:
    """The spec's kernel selections for its operator and dtype; by default every family that
    serves the operator (the vendor library included, the farm's test families not)."""
    if spec.kernels:
        chosen = []
        for selection in spec.kernels:
            family = get_family(selection.family)
            chosen += [i for i in family.instances(spec.operator, spec.dtype)
                       if matches(i.settings, selection.where)]
    else:
        chosen = [i for f in families_for(spec.operator) if not is_testing_family(f)
                  for i in f.instances(spec.operator, spec.dtype)]
    return list({i.key: i for i in chosen}.values())


def plan_job(store: Queries, job_id: int) -> JobPlan:
    """Expand a queued job into its pairs (kernel rows are created for new instances)."""
    job = store.job(job_id)
    spec = JobSpec.model_validate(store.job_spec(job_id)["spec"])
    problems = dict(store.job_problem_ids(job_id))
    instances = select_instances(spec)
    ids = store.kernel_ids(i.record() for i in instances)
    by_id = {ids[i.key]: i for i in instances}
    pairs = tuple((p, k) for p in problems for k in by_id)
    return JobPlan(job_id=job_id, name=job.name, operator=spec.operator, dtype=spec.dtype,
                   policy=spec.timing, problems=problems, instances=by_id, pairs=pairs)


def finished(store: Queries, plan: JobPlan, environment_ids: Iterable[int],
             problem_ids: Iterable[int] | None = None) -> Progress:
    """Split the pairs of these problems (default: all the plan's) into finished and to do. A
    pair this job measured earlier counts as done or failed; one another job measured counts as
    cached, unless it was `not_recorded` by a replay (a newer recording may have it)."""
    problems = list(plan.problems if problem_ids is None else problem_ids)
    own: dict[Pair, str] = {}
    other: set[Pair] = set()
    for kernel_id, problem_id, status, job_id in store.finished_pairs(problems, environment_ids):
        if job_id == plan.job_id:
            own[(problem_id, kernel_id)] = status
        elif status != "not_recorded":
            other.add((problem_id, kernel_id))
    done = failed = 0
    cached = dict.fromkeys(problems, 0)
    todo = []
    for problem_id in problems:
        for kernel_id in plan.instances:
            pair = (problem_id, kernel_id)
            if pair in own:
                if own[pair] in SETTLED_STATES:
                    done += 1
                else:
                    failed += 1
            elif pair in other:
                cached[problem_id] += 1
            else:
                todo.append(pair)
    return Progress(done=done, failed=failed, cached=cached, todo=tuple(todo))
