"""SYNTHETIC measurements for building and testing the selection models before real sweeps
exist: invented latencies from a toy cost model, never a measurement. The environment says so
("SYNTHETIC cost model (not measured)"), so a model trained on them carries synthetic=true in
its data window and no figure from them may be reported as measured.

The cost model gives the families the structure a model must learn: implicit GEMM wins on
large dense shapes and pays for tile padding, wave quantisation and narrow loads; the direct
convolution is memory-bound and wins on depthwise and narrow groups; the naive kernel is slow.
Rows go through Queries.record_measurements, the path the farm's workers use.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import pandas as pd

from farm.problems import CONV_FIELDS, ConvProblem
from farm.select.catalogue import candidate_families
from farm.select.data import NETWORKS_DIR
from farm.store import Queries
from farm.synthetic import synthetic_shapes
from kernels.family import Instance
from kernels.registry import get_family

GPU_NAME = "SYNTHETIC cost model (not measured)"
ENVIRONMENT = dict(gpu_name=GPU_NAME, arch="sm_90", sm_count=132, driver="synthetic",
                   compiler="synthetic", runtime="synthetic", farm_version="0",
                   details={"l2_bytes": str(50 * 2**20), "synthetic": "true"})
PEAK, BANDWIDTH, SMS = 989e12, 3350e9, 132
_VEC = {8: 1.0, 4: 0.72, 2: 0.48, 1: 0.3}


def _fraction(*parts: object) -> float:
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def _igemm_us(p: ConvProblem, c: dict) -> float:
    m, n, k = p.gemm
    bm, bn, bk = c["block_m"], c["block_n"], c["block_k"]
    tm, tn, tk = -(-m // bm), -(-n // bn), -(-k // bk)
    split = min(c.get("split_k", 1), tk)
    smem = c["stages"] * (bm + bn) * bk * 2
    occ = max(1, min(3, 228 * 1024 // smem, 2048 // (32 * c["warps_m"] * c["warps_n"])))
    blocks = tm * tn * p.G * split
    waves = blocks / (SMS * occ)
    rate = (0.82 * min(1.0, bm * bn / 16384) ** 0.3 * (1 - 0.06 * (4 - c["stages"]))
            * _VEC[c["vec"]] * (0.97 if bk == 64 else 1.0))
    useful = (m * n * k) / (tm * bm * tn * bn * tk * bk)
    compute = p.flops / (PEAK * rate * useful * min(1.0, waves / math.ceil(waves)))
    reads = 2 * p.G * (m * k * tn + n * k * tm) + p.min_bytes
    memory = reads / (BANDWIDTH * 0.8 * min(1.0, blocks / SMS))
    reduce = (8 * split * p.tensor_elements()["weight"] / BANDWIDTH) if split > 1 else 0.0
    return (max(compute, memory) + reduce) * 1e6 + 4.0 + (3.0 if split > 1 else 0.0)


def _direct_us(p: ConvProblem, c: dict) -> float:
    fit = 1.0 if c["fr"] == p.R == p.S else 0.7
    tile = 1.0 if p.Q % c["tile_w"] == 0 else 0.88
    rate = 0.75 * _VEC[c["vec"]] * fit * tile * (1.08 if c.get("smem") else 1.0)
    rate *= 1.0 - 0.05 * abs(c["occ"] - 2) - (0.1 if c.get("rb") == 0 else 0.0)
    memory = p.min_bytes * (1.0 + 0.2 * (p.R * p.S > 9)) / (BANDWIDTH * rate)
    compute = p.flops / (60e12 * 0.6 * (c["kpt"] / 8 + 0.5))
    return max(memory, compute) * 1e6 + 3.0 + (3.0 if p.op == "conv2d_bwd_weight" else 0.0)


def synthetic_us(problem: ConvProblem, instance: Instance) -> float:
    """The toy cost model's latency with +-4% deterministic noise."""
    c = instance.settings
    if instance.family == "conv_igemm":
        base = _igemm_us(problem, c)
    elif instance.family == "conv_direct":
        base = _direct_us(problem, c)
    else:
        base = problem.flops / 1.5e12 * 1e6 + problem.min_bytes / 900e9 * 1e6 + 4.0
    return base * (0.96 + 0.08 * _fraction(instance.name, problem.key))


def synthetic_row(problem: ConvProblem, instance: Instance) -> tuple[str, float | None, str]:
    """(status, median_us, message): unsupported where the family's rules say so, a rare
    wrong result, else the cost model's time; the vendor row trails the best igemm by ~10%."""
    if instance.family == "vendor":
        best = min(synthetic_us(problem, i) for i in
                   get_family("conv_igemm").instances(problem.op, problem.dtype)[:6])
        return "ok", best * (1.05 + 0.1 * _fraction("vendor", problem.key)), "synthetic"
    reason = get_family(instance.family).applicable(instance, problem)
    if reason:
        return "unsupported", None, reason
    if _fraction("fail", instance.name, problem.key) < 0.004:
        return "wrong_result", None, "synthetic wrong result"
    return "ok", synthetic_us(problem, instance), "synthetic"


def network_shapes(networks: Sequence[str] | None = None) -> list[dict[str, int]]:
    """Distinct shapes of jobs/networks/*.csv (of these networks only, if given)."""
    tables = [pd.read_csv(p) for p in sorted(NETWORKS_DIR.glob("*_n*.csv"))]
    table = pd.concat(tables)
    if networks is not None:
        table = table[table["network"].isin(list(networks))]
    rows = table[list(CONV_FIELDS)].drop_duplicates()
    return [{k: int(v) for k, v in r.items()} for r in rows.to_dict("records")]


def synthetic_problems(operator: str, dtype: str, networks: int, random: int,
                       seed: int = 0) -> list[ConvProblem]:
    """`networks` shapes drawn from the network tables (deterministically) plus `random`
    shapes from farm.synthetic, as problems of `operator`."""
    real = sorted(network_shapes(), key=lambda s: _fraction(seed, sorted(s.items())))[:networks]
    shapes = real + synthetic_shapes(random, seed=seed)
    problems = {}
    for shape in shapes:
        problem = ConvProblem.from_fields(operator, dtype, shape)
        problems.setdefault(problem.key, problem)
    return list(problems.values())


def seed_synthetic(queries: Queries, problems: Sequence[ConvProblem], arch: str = "sm_90",
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
