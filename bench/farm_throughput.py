"""The farm's throughput on the standard sweep, on this machine's GPUs.

1. Compile: every instance of the sweep compiled cold (an empty cache folder) by Ray compile
   tasks on every CPU core: instances per second per core.
2. Measure: the sweep on 1 GPU, then on all of them (--gpus), each time into a fresh SQLite
   database (nothing cached) with the compile cache warm: verified (ok) measurements per second
   per GPU, and the ratio of the GPUs' wall time to the kernels' own timed time (samples x
   median, summed over the rows), with the workers' time per family and their busy share (the
   rest is time the GPUs waited on the coordinator).
3. Speed-up: measurements per second on all GPUs over those on one (target: 1.9 on 2 GPUs).
With --record FILE, the one-GPU run's jobs are exported as a recording for the replay device.
With --nodes, each GPU is a Ray node of its own, started by `ray start` with that GPU alone
visible (as on a cluster of one-GPU nodes), and the head node has none.
Usage: python -m bench.farm_throughput [--out DIR] [--spec FILE ...] [--gpus 1,2] [--nodes]
       [--record jobs/recordings/h100-standard.parquet]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import pandas as pd
import ray

from bench.common import write_result
from farm import api
from farm.cluster import Coordinator, CoordinatorConfig
from farm.cluster.compiling import Compiles
from farm.cluster.demo import STANDARD_SWEEP
from farm.cluster.pairs import select_instances
from farm.gpu import list_devices
from farm.recording import export_recording
from farm.specs import load_spec
from farm.store import TimingFilter, open_store
from farm.worker import target_of
from kernels.registry import get_family
from tests.ray_nodes import RayNodes


def compile_cold(specs, target: str, folder: Path) -> dict:
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False,
             log_to_driver=False)
    try:
        compiles = Compiles(target, str(folder))
        instances = {i.key: i for s in specs for i in select_instances(load_spec(s).spec)}
        begin = time.monotonic()
        for instance in instances.values():
            if get_family(instance.family).compiled:
                compiles.request(instance)
        while compiles.running:
            compiles.poll(1.0)
        seconds = time.monotonic() - begin
    finally:
        ray.shutdown()
    stats = compiles.stats()
    cores = os.cpu_count() or 1
    return {**stats, "cores": cores, "seconds": seconds,
            "instances_per_s_per_core": stats["instances"] / seconds / cores}


def gpu_nodes(gpus: int, cache: Path) -> RayNodes:
    """A Ray cluster of one `ray start` node per GPU (each sees its GPU alone) and a head with
    no GPU for the compile tasks; this process joins it."""
    saved = Path("~/.ray/auth_token").expanduser()  # a Ray driver keeps the token it read
    cluster = RayNodes(saved.read_text().strip() if saved.is_file() else None)
    cluster.env["FARM_CODE_CACHE"] = str(cache)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    cores = os.cpu_count() or 2
    cluster.start_head(cpus=max(1, cores // 2))
    for i in range(gpus):
        device = visible[i] if len(visible) > i and visible[i] else str(i)
        cluster.add_node(f"gpu{i}", cpus=max(1, cores // (2 * gpus)), gpus=1,
                         env={"CUDA_VISIBLE_DEVICES": device})
    os.environ.update({k: cluster.env[k] for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")})
    ray.init(address=cluster.address, log_to_driver=False)
    return cluster


def measure(specs, gpus: int, cache: Path, workdir: Path, record: Path | None = None,
            nodes: bool = False) -> dict:
    cluster = None
    if nodes:
        cluster = gpu_nodes(gpus, cache)
    else:
        ray.init(address="local", num_gpus=gpus, num_cpus=os.cpu_count(),
                 include_dashboard=False, log_to_driver=False)
    try:
        store = open_store(f"sqlite:///{workdir / f'farm-{gpus}gpu.db'}")
        jobs = [api.submit(s, store) for s in specs]
        outcomes = Coordinator(store, CoordinatorConfig(code_cache=str(cache))).run(
            until_idle=True, only=jobs)
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.stop()
    seconds = sum(o.seconds for o in outcomes)  # from claim to finish: actor start excluded
    ok = timed_s = 0.0
    for job in jobs:
        rows = store.timings(TimingFilter(job_id=job))  # the ok rows
        ok += len(rows)
        timed_s += float((rows["samples"] * rows["median_us"]).sum()) / 1e6
    recording = record or workdir / f"farm-{gpus}gpu.parquet"
    export_recording(store, jobs, recording, note="the standard sweep, measured by "
                     f"bench/farm_throughput.py on {gpus} GPU(s)")
    costs = costs_by_family(recording)
    busy_s = sum(c["wall_s"] + c["setup_s"] for c in costs.values())
    return {"gpus": gpus, "ray": "one ray-start node per GPU" if nodes else "local",
            "seconds": seconds, "pairs": sum(o.measured for o in outcomes),
            "ok": int(ok), "failed": sum(o.failed for o in outcomes),
            "ok_per_s_per_gpu": ok / seconds / gpus,
            "wall_over_timed": seconds * gpus / timed_s if timed_s else None,
            "statuses": {o.name: o.status for o in outcomes}, "by_family": costs,
            "workers_busy": busy_s / (seconds * gpus)}


def costs_by_family(recording: Path) -> dict:
    """Per family: ok pairs, the workers' wall time in measure() and in making each problem's
    inputs and reference, and the kernels' own timed time (seconds)."""
    rows = pd.read_parquet(recording, columns=["family", "status", "samples", "median_us",
                                               "telemetry"])
    costs = pd.DataFrame([json.loads(t or "{}") for t in rows["telemetry"]], index=rows.index)
    rows["wall_s"] = costs.get("wall_ms", 0.0).fillna(0.0) / 1000.0
    rows["setup_s"] = costs.get("setup_ms", 0.0).fillna(0.0) / 1000.0
    rows["timed_s"] = (rows["samples"] * rows["median_us"]).fillna(0.0) / 1e6
    rows["ok"] = rows["status"] == "ok"
    table = rows.groupby("family")[["ok", "wall_s", "setup_s", "timed_s"]].sum()
    return {family: {k: round(float(v), 3) for k, v in row.items()}
            for family, row in table.iterrows()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--spec", action="append", type=Path)
    parser.add_argument("--gpus", default=None, help="GPU counts to compare, e.g. 1,2")
    parser.add_argument("--nodes", action="store_true",
                        help="run each GPU as a Ray node of its own (`ray start`, one GPU "
                             "visible), as on a cluster, rather than one local Ray")
    parser.add_argument("--record", type=Path, help="write the first run's jobs here "
                                                   "(a recording for the replay device)")
    args = parser.parse_args()
    devices = list_devices()
    if not devices:
        raise SystemExit("no GPU here: this benchmark measures the farm on real GPUs")
    specs = tuple(args.spec or STANDARD_SWEEP)
    counts = [int(c) for c in (args.gpus or f"1,{len(devices)}").split(",")]
    target = target_of({"arch": devices[0]["arch"]})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        figures = {"compile": compile_cold(specs, target, work / "code")}
        print("compile:", figures["compile"], flush=True)
        runs = []
        for gpus in dict.fromkeys(counts):
            runs.append(measure(specs, gpus, work / "code", work,
                                args.record if not runs else None, args.nodes))
            print(f"{gpus} GPU(s):", runs[-1], flush=True)
    figures["measure"] = runs
    if len(runs) > 1:
        figures["speedup"] = (runs[-1]["ok_per_s_per_gpu"] * runs[-1]["gpus"]
                              / (runs[0]["ok_per_s_per_gpu"] * runs[0]["gpus"]))
    path = write_result("farm_throughput", devices[0], figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
