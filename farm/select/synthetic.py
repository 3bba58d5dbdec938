"""SYNTHETIC measurements for building and testing the selection models before real sweeps
exist: invented latencies from a toy cost model, never a measurement. The environment says so
("SYNTHETIC cost model (not measured)"), so a model trained on them carries synthetic=true in
its data window and no figure from them may be reported as measured.

Each operator's cost model (OperatorSpec.synthetic_us) gives its families the structure a
model must learn.
Rows go through Queries.record_measurements, the path the farm's workers use.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import pandas as pd

from farm.select.catalogue import candidate_families
from farm.store import Queries
from kernels.family import Instance
from kernels.registry import get_family, operator_spec

GPU_NAME = "SYNTHETIC cost model (not measured)"
ENVIRONMENT = dict(gpu_name=GPU_NAME, arch="sm_90", sm_count=132, driver="synthetic",
                   compiler="synthetic", runtime="synthetic", farm_version="0",
                   details={"l2_bytes": str(50 * 2**20), "synthetic": "true"})


def _fraction(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def synthetic_us(problem: Any, instance: Instance) -> float:
    """The operator's toy cost model's latency with +-4% deterministic noise."""
    base = operator_spec(problem.op).synthetic_us(problem, instance)
    return base * (0.96 + 0.08 * _fraction(instance.name, problem.key))


def synthetic_row(problem: Any, instance: Instance) -> tuple[str, float | None, str]:
    """(status, median_us, message): unsupported where the family's rules say so, a rare
    wrong result, else the cost model's time; the vendor row trails the best applicable
    candidate by 5 to 15%."""
    if instance.family == "vendor":
        tried = [i for f in candidate_families(problem.op)
                 for i in f.instances(problem.op, problem.dtype) if f.applicable(i, problem) is None]
        best = min((synthetic_us(problem, i) for i in tried), default=1e3)
        return "ok", best * (1.05 + 0.1 * _fraction("vendor", problem.key)), "synthetic"
    reason = get_family(instance.family).applicable(instance, problem)
    if reason:
        return "unsupported", None, reason
    if _fraction("fail", instance.name, problem.key) < 0.004:
        return "wrong_result", None, "synthetic wrong result"
    return "ok", synthetic_us(problem, instance), "synthetic"


def network_shapes(operator: str, networks: Sequence[str] | None = None
                   ) -> list[dict[str, Any]]:
    """Distinct shapes of the operator's network tables (of these networks only, if given)."""
    spec = operator_spec(operator)
    folder = spec.networks_dir
    paths = sorted(folder.glob("*_n*.csv")) if folder else []
    if not paths:
        return []
    tables = [pd.read_csv(p) for p in paths]
    if networks is not None:  # only the tables that name their networks can be filtered
        tables = [t[t["network"].isin(list(networks))] for t in tables if "network" in t]
    if not tables:
        return []
    table = pd.concat(tables)
    columns = [f for f in spec.fields if f in table.columns]
    rows = table[columns].drop_duplicates()
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}
            for r in rows.to_dict("records")]


def synthetic_problems(operator: str, dtype: str, networks: int, random: int,
                       seed: int = 0) -> list[Any]:
    """`networks` shapes drawn from the network tables (deterministically) plus `random`
    shapes from the operator's generator, as problems of `operator`."""
    spec = operator_spec(operator)
    real = sorted(network_shapes(operator),
                  key=lambda s: _fraction(seed, sorted(s.items())))[:networks]
    shapes = real + spec.synthetic_shapes(random, seed=seed)
    problems = {}
    for shape in shapes:
        problem = spec.problem(dtype, shape)
        problems.setdefault(problem.key, problem)
    return list(problems.values())


def seed_synthetic(queries: Queries, problems: Sequence[Any], arch: str = "sm_90",
                   batch: int = 5000) -> int:
    """Write a SYNTHETIC measurement for every candidate instance (and the vendor) on every
    problem, as a job of its own; returns the number of rows written."""
    if not problems:
        return 0
    op, dtype = problems[0].op, problems[0].dtype
    instances = [i for f in candidate_families(op) for i in f.instances(op, dtype)]
    instances += get_family("vendor").instances(op, dtype)
    job = queries.create_job(f"SYNTHETIC {op} {dtype}", op, dtype, 0,
                             {"synthetic": True}, problems)
    env = queries.environment_id(f"synthetic-select-{arch}", **{**ENVIRONMENT, "arch": arch})
    kernels = queries.kernel_ids(i.record() for i in instances)
    rows = []
    for problem_id, problem in queries.job_problem_ids(job):
        for instance in instances:
            status, median, message = synthetic_row(problem, instance)
            timed = median is not None
            rows.append({"kernel_id": kernels[instance.key], "problem_id": problem_id,
                         "environment_id": env, "job_id": job, "status": status,
                         "median_us": median, "min_us": median * 0.98 if timed else None,
                         "samples": 20 if timed else 0, "message": message,
                         "policy": {"synthetic": True}, "telemetry": {}})
    for start in range(0, len(rows), batch):
        queries.record_measurements(rows[start:start + batch])
    queries.set_job_state(job, "done", total_pairs=len(rows), done_pairs=len(rows))
    return len(rows)
