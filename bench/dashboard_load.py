"""Time to render each dashboard page on a database of one million measurements.

Builds (or reuses) a SQLite database shaped like a busy farm: the three convolution directions
and group-normalization backward on two architectures, network and generated shapes of each
(the operator's network tables and synthetic_shapes), their families with about 280
instances per convolution direction (a library at scale) and group-norm's 131, plus the vendor
baseline, latencies from a roofline of each shape's FLOPs and bytes with noise, 3%
failures, a running job with its workers, and three model versions per operator and
architecture with per-problem choices. Then renders every page with Streamlit's AppTest: cold
(caches cleared) and warm; the target is under 2 s cold. Writes
bench/results/dashboard_load.json.
Usage: python -m bench.dashboard_load [--db PATH] [--rows 1000000] [--rebuild] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import time
from pathlib import Path

import numpy as np
from sqlalchemy import func, insert, select

from bench.common import cpu_name, write_result
from farm.problems import ProblemError
from farm.select.synthetic import network_shapes
from farm.store import open_store
from farm.store.models import (Artifact, Environment, Job, JobProblem, Kernel, Measurement, Model,
                               Problem, Worker)
from kernels.registry import operator_spec

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "dashboard" / "app.py"
PAGES = ["screens/overview.py", "screens/efficiency.py", "screens/vs_vendor.py",
         "screens/timings.py", "screens/models.py"]
# arch, GPU, multiprocessors, peak dense bf16 TFLOP/s, memory GB/s (roofline of the latencies)
ARCHS = [("sm_90", "NVIDIA H100 80GB HBM3", 132, 990.0, 3350.0),
         ("gfx90a", "AMD Instinct MI250X", 110, 383.0, 1600.0)]
CONV_FAMILIES = [("conv_igemm", 200, 1.0), ("conv_direct", 70, 1.6), ("conv_naive", 10, 6.0)]
FAMILIES = {"conv2d_fwd": CONV_FAMILIES, "conv2d_bwd_data": CONV_FAMILIES,  # name, count, slowness
            "conv2d_bwd_weight": CONV_FAMILIES,
            "groupnorm_bwd": [("gn_onepass", 35, 1.0), ("gn_twopass", 96, 1.3)]}
OPERATORS = tuple(FAMILIES)
FAILURES = {"compile_error": "nvrtc: error: too many resources requested for launch",
            "launch_error": "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
            "timeout": "no result within 10.0 s", "wrong_result": "max error 0.31 > 0.02",
            "unsupported": "the shape is outside the family's rules"}


def _problems(operator: str, count: int) -> list:
    """`count` distinct bf16 problems of the operator: its network shapes first, then generated
    ones."""
    spec = operator_spec(operator)
    found: dict[str, object] = {}
    for shape in network_shapes(operator) + spec.synthetic_shapes(count * 2, seed=7):
        if len(found) >= count:
            break
        try:
            problem = spec.problem("bf16", shape)
        except ProblemError:
            continue
        found.setdefault(problem.key, problem)
    return list(found.values())


def build(url: str, rows: int, seed: int = 0) -> dict:
    """Fill an empty, migrated database; returns what it made."""
    rng = np.random.default_rng(seed)
    store = open_store(url, migrate=True)
    engine = store.engine
    now = dt.datetime.now(dt.timezone.utc)
    with engine.begin() as conn:
        env_ids = []
        for i, (arch, gpu, sms, _, _) in enumerate(ARCHS):
            env_ids.append(conn.execute(insert(Environment).values(
                fingerprint=f"bench-{arch}", gpu_name=gpu, arch=arch, sm_count=sms,
                driver="580", compiler="nvrtc 13.0" if i == 0 else "hiprtc 6.4",
                runtime="cuda 13.0" if i == 0 else "hip 6.4", farm_version="0.1.0",
                details={}, created_at=now)).inserted_primary_key[0])
        counts = {"measurements": 0, "problems": 0, "kernels": 0}
        for op_index, op in enumerate(OPERATORS):
            families = FAMILIES[op]
            kernels_per_op = sum(n for _, n, _ in families) + 1
            per_op = max(1, math.ceil(rows / (len(OPERATORS) * len(ARCHS) * kernels_per_op)))
            problems = _problems(op, per_op)
            pids = [conn.execute(insert(Problem).values(
                key=p.key, operator=op, dtype=p.dtype, layout=p.layout, shape=p.shape(),
                flops=p.flops, min_bytes=p.min_bytes)).inserted_primary_key[0]
                for p in problems]
            kernels = [(fam, f"{fam}_{op}_{i:03d}", slow) for fam, n, slow in families
                       for i in range(n)] + [("vendor", f"vendor_{op}", 1.0)]
            kids = [conn.execute(insert(Kernel).values(
                key=f"{name}-key", family=fam, operator=op, name=name, config={"i": i},
                source_hash="bench", created_at=now)).inserted_primary_key[0]
                for i, (fam, name, _) in enumerate(kernels)]
            status = "running" if op_index == len(OPERATORS) - 1 else "done"
            pairs = len(pids) * len(kids) * len(ARCHS)
            job_id = conn.execute(insert(Job).values(
                name=f"networks-{op}", operator=op, dtype="bf16", spec={}, status=status,
                priority=op_index, total_pairs=pairs,
                done_pairs=int(pairs * (0.8 if status == "running" else 0.97)),
                failed_pairs=int(pairs * 0.03), cached_pairs=0,
                claimed_by="coordinator-a" if status == "running" else None,
                created_at=now - dt.timedelta(hours=3), started_at=now - dt.timedelta(hours=3),
                updated_at=now)).inserted_primary_key[0]
            conn.execute(insert(JobProblem), [{"job_id": job_id, "problem_id": p, "position": i}
                                              for i, p in enumerate(pids)])
            flops = np.array([p.flops for p in problems], dtype=float)
            moved = np.array([p.min_bytes for p in problems], dtype=float)
            slowness = np.array([s for _, _, s in kernels])
            for env_index, env_id in enumerate(env_ids):
                _, _, _, tflops, gbps = ARCHS[env_index]
                base = np.maximum(flops / (tflops * 1e6), moved / (gbps * 1e3)) + 3.0  # µs
                times = (base[:, None] * slowness[None, :]
                         * np.exp(rng.normal(0.4, 0.35, (len(pids), len(kids)))))
                times[:, -1] = times[:, :-1].min(axis=1) * np.exp(rng.normal(0.05, 0.3,
                                                                              len(pids)))
                failed = rng.random(times.shape) < 0.03
                ages = rng.random(times.shape) * 3 * 3600.0  # seconds before now
                batch = []
                for pi, pid in enumerate(pids):
                    for ki, kid in enumerate(kids):
                        t = float(times[pi, ki])
                        state = (list(FAILURES)[int(rng.integers(len(FAILURES)))]
                                 if failed[pi, ki] else "ok")
                        timed = not failed[pi, ki]
                        batch.append({"kernel_id": kid, "problem_id": pid,
                                      "environment_id": env_id, "job_id": job_id,
                                      "status": state, "median_us": t if timed else None,
                                      "min_us": t * 0.98 if timed else None,
                                      "samples": 20, "spread": 0.01,
                                      "tflops": flops[pi] / t / 1e6 if timed else None,
                                      "gbps": moved[pi] / t / 1e3 if timed else None,
                                      "message": FAILURES.get(state), "policy": {},
                                      "telemetry": {},
                                      "created_at": now - dt.timedelta(seconds=ages[pi, ki])})
                conn.execute(insert(Measurement), batch)
                counts["measurements"] += len(batch)
                _models(conn, op, ARCHS[env_index][0], problems, kernels, times, failed, rng, now)
            counts["problems"] += len(pids)
            counts["kernels"] += len(kids)
        busy = FAMILIES[OPERATORS[-1]][0][0]
        conn.execute(insert(Worker), [{
            "name": f"coordinator-a/gpu{i}", "coordinator": "coordinator-a", "kind": "gpu",
            "node": f"node{i // 4}", "gpu_name": ARCHS[0][1], "arch": ARCHS[0][0],
            "state": "measuring", "job_id": job_id, "measuring": f"{busy}_{i:03d} on shape {i}",
            "pairs_done": 1000 * i, "restarts": 0, "started_at": now, "updated_at": now}
            for i in range(8)])
    return counts


def _models(conn, op, arch, problems, kernels, times, failed, rng, now) -> None:
    """Three versions, each choosing the oracle more often, scored on 20% held-out problems,
    their metrics in farm/select's layout plus per-problem choices."""
    held = np.flatnonzero(rng.random(len(problems)) < 0.2)
    held = held if len(held) else np.arange(1)  # a small build: one problem at least
    ok = np.where(failed[:, :-1], np.inf, times[:, :-1])
    order = np.argsort(ok, axis=1)
    for version, hit in enumerate((0.4, 0.6, 0.75), start=1):
        picks = {i: int(order[i, 0] if rng.random() < hit else order[i, rng.integers(1, 12)])
                 for i in held}
        eff = np.array([ok[i].min() / ok[i, picks[i]] for i in held])

        def best_of(k: int, hit: float = hit, eff: np.ndarray = eff) -> float:
            """The model's k best include the fastest more often as k grows."""
            return float(np.mean([1.0 if rng.random() < min(1.0, hit + k / 10) else e
                                  for e in eff]))

        holdout = {"problems": len(held), "mean": float(eff.mean()),
                   "median": float(np.median(eff)), "p10": float(np.quantile(eff, 0.1)),
                   "min": float(eff.min()), "top1": float(np.mean(eff == 1.0)),
                   "top5": min(1.0, hit + 0.2), "top_k": {str(k): best_of(k) for k in (2, 4, 8)},
                   "failed_choices": 0,
                   "per_problem": [{"problem": problems[i].key, "kernel": kernels[picks[i]][1]}
                                   for i in held]}
        data = rng.bytes(64 * 1024)
        artifact = conn.execute(insert(Artifact).values(
            key=f"bundle-{op}-{arch}-{version}", kind="model_bundle", target=arch,
            compiler="lightgbm", data=data, size=len(data), resources={}, created_at=now)
        ).inserted_primary_key[0]
        conn.execute(insert(Model).values(
            operator=op, arch=arch, dtype="bf16", version=version,
            metrics={"kind": "ranker", "holdout": holdout, "trees": 200}, data_window={},
            artifact_id=artifact, promoted=version == 2,
            created_at=now - dt.timedelta(days=3 - version)))


def ensure(path: Path, rows: int, rebuild: bool) -> tuple[str, float | None]:
    url = f"sqlite:///{path}"
    if path.exists() and not rebuild:
        with open_store(url).engine.connect() as conn:
            found = conn.scalar(select(func.count()).select_from(Measurement))
        if found and found >= rows and found < 1.05 * rows:
            return url, None
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    start = time.perf_counter()
    build(url, rows)
    return url, time.perf_counter() - start


def render(url: str) -> dict[str, dict[str, float]]:
    """Seconds to render each page, cold (data caches cleared) and warm."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["FARM_DB_URL"] = url
    AppTest.from_file(str(APP), default_timeout=120).run()  # imports, engine
    out = {}
    for page in PAGES:
        at = AppTest.from_file(str(APP), default_timeout=120).run()
        st.cache_data.clear()
        at.switch_page(page)
        start = time.perf_counter()
        at.run()
        cold = time.perf_counter() - start
        start = time.perf_counter()
        at.run()
        warm = time.perf_counter() - start
        errors = [e.value for e in at.exception]
        out[Path(page).stem] = {"cold_s": round(cold, 3), "warm_s": round(warm, 3),
                                "errors": errors}
        print(f"{Path(page).stem:12} cold {cold:6.2f} s  warm {warm:6.2f} s"
              + (f"  ERRORS {errors}" if errors else ""), flush=True)
    return out




def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", type=Path, default=Path(os.environ.get(
        "XDG_CACHE_HOME", Path.home() / ".cache")) / "kernel-farm" / "dashboard_load.db")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    args.db.parent.mkdir(parents=True, exist_ok=True)
    url, built = ensure(args.db, args.rows, args.rebuild)
    print(f"database {args.db}" + (f" built in {built:.1f} s" if built else " reused"))
    pages = render(url)
    with open_store(url).engine.connect() as conn:
        rows = conn.scalar(select(func.count()).select_from(Measurement))
    figures = {"measurements": rows, "build_s": built, "target_s": 2.0, "pages": pages,
               "all_under_target": all(p["cold_s"] < 2.0 and not p["errors"]
                                       for p in pages.values())}
    device = {"cpu": cpu_name(), "cores": os.cpu_count(),
              "python": platform.python_version(), "database": "sqlite"}
    print(f"wrote {write_result('dashboard_load', device, figures, args.out)}")


if __name__ == "__main__":
    main()
