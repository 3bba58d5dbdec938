"""`farm demo`: the standard sweep end to end on this machine, then a summary.

The embedded default: SQLite (or FARM_DB_URL), a local Ray started in-process, and this
machine's GPUs, or on a machine with none the replay device serving the recordings in
jobs/recordings/ (or --replay FILE). It submits the three directions on
jobs/networks/all_networks.csv, compiles every instance with NVRTC in compile tasks, measures
(or replays) every pair, and prints the best instance per shape, the failures and the
throughput. With neither a GPU nor a recording it compiles every instance and says so.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import ray
from rich.console import Console
from rich.table import Table

from farm import api
from farm.cluster.compiling import Compiles
from farm.cluster.config import CoordinatorConfig
from farm.cluster.coordinator import Coordinator, JobOutcome, connect_ray
from farm.cluster.pairs import select_instances
from farm.recording import find_recording
from farm.specs import load_spec
from farm.store import SETTLED_STATES, Queries
from kernels.registry import get_family

EXAMPLES = Path(__file__).resolve().parents[2] / "jobs" / "examples"
STANDARD_SWEEP = tuple(EXAMPLES / f"all_networks_{d}.yaml" for d in ("fwd", "bwd_data",
                                                                    "bwd_weight"))
DEMO_SWEEP = (*STANDARD_SWEEP, EXAMPLES / "groupnorm_networks.yaml",
              EXAMPLES / "dwsep_networks.yaml")  # every operator


def has_measurer(config: CoordinatorConfig) -> bool:
    """A GPU in the Ray cluster, or a recording to replay."""
    return bool(config.replay or ray.cluster_resources().get("GPU", 0)
                or find_recording(config.arch))


def run_demo(store: Queries, config: CoordinatorConfig, console: Console, reporter: Any,
             specs: tuple[Path, ...] = DEMO_SWEEP, rows: int = 12) -> list[JobOutcome]:
    connect_ray(config.ray_address)
    if not has_measurer(config):
        compile_only(config, specs, console)
        return []
    job_ids = [api.submit(spec, store) for spec in specs]
    console.print(f"queued jobs {', '.join(map(str, job_ids))} in {store.engine.url}")
    coordinator = Coordinator(store, config, reporter)
    begin = time.monotonic()
    with reporter:  # the progress bars end before the summary
        outcomes = coordinator.run(until_idle=True, only=job_ids)
    seconds = time.monotonic() - begin
    for outcome in outcomes:
        summarize_job(store, outcome, sorted(coordinator.environment_ids), console, rows)
    measured = sum(o.measured for o in outcomes)
    compiled = [c.stats() for c in coordinator.compiles.values()]
    verb = "replayed" if coordinator.kind == "replay" else "measured"
    console.print(f"[bold]throughput[/]: {measured} pairs {verb} in {seconds:.1f} s "
                  f"({measured / seconds:.1f} pairs/s, Ray and actor start-up included); "
                  f"{sum(c['instances'] for c in compiled)} instances compiled "
                  f"({sum(c['cached'] for c in compiled)} from the cache, "
                  f"{sum(c['failed'] for c in compiled)} failed, "
                  f"{sum(c['compile_seconds'] for c in compiled):.1f} s of compiling)")
    return outcomes


def summarize_job(store: Queries, outcome: JobOutcome, environment_ids: list[int],
                  console: Console, rows: int) -> None:
    job = store.job(outcome.job_id)
    frame = store.job_results(job.id, environment_ids)
    ok = frame[frame["status"] == "ok"]
    console.print(f"\n[bold]job {job.id} {job.name}[/] ({job.operator} {job.dtype}): "
                  f"{outcome.status}, {job.total_pairs} pairs: {job.done_pairs} done "
                  f"({len(ok)} verified and timed), {job.failed_pairs} failed, "
                  f"{job.cached_pairs} cached; {outcome.measured} in {outcome.seconds:.1f} s")
    ours = ok[ok["family"] != "vendor"]  # the baseline is compared against, never "best"
    if len(ours):
        best = ours.loc[ours.groupby("problem_key", sort=False)["median_us"].idxmin()]
        vendor = ok[ok["family"] == "vendor"].set_index("problem_key")["median_us"]
        gain = vendor.reindex(best["problem_key"]).to_numpy() / best["median_us"].to_numpy()
        best = best.assign(gain=gain).sort_values("gain", ascending=False, na_position="last")
        table = Table("shape", "best instance", "median us", "TFLOP/s", "vendor us",
                      "speed-up", title=f"best instance per shape ({min(rows, len(best))} of "
                                        f"{len(best)}, largest speed-up over the vendor first)")
        labels = {p.key: p.label() for p in store.job_problems(job.id)}
        for record in best.head(rows).to_dict("records"):
            shape = labels.get(record["problem_key"], record["problem_key"][:12])
            baseline = vendor.get(record["problem_key"])
            table.add_row(shape, record["kernel"], f"{record['median_us']:.1f}",
                          f"{record['tflops']:.1f}" if record["tflops"] == record["tflops"]
                          else "", f"{baseline:.1f}" if baseline else "",
                          f"{baseline / record['median_us']:.2f}x" if baseline else "")
        console.print(table)
        wins = best["family"].value_counts()
        console.print("shapes won per family: " + ", ".join(f"{f} {n}" for f, n in
                                                           wins.items()))
        speedup = best["gain"].to_numpy()
        speedup = speedup[speedup == speedup]
        if len(speedup):
            console.print(f"against the vendor: faster on {int((speedup > 1).sum())} of "
                          f"{len(speedup)} shapes, geometric mean speed-up "
                          f"{float(np.exp(np.log(speedup).mean())):.2f}x")
    unsupported = int((frame["status"] == "unsupported").sum())
    if unsupported:
        console.print(f"unsupported (settled by the instances' rules, never launched): "
                      f"{unsupported}")
    failed = frame[~frame["status"].isin(SETTLED_STATES)]
    if len(failed):
        counts = failed["status"].value_counts()
        console.print("failures: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
        for status, group in failed.groupby("status"):
            message = str(group["message"].iloc[0] or "").strip().splitlines()
            console.print(f"  e.g. {status}: {group['kernel'].iloc[0]}: "
                          f"{message[0][:160] if message else ''}", highlight=False)


def compile_only(config: CoordinatorConfig, specs: tuple[Path, ...], console: Console) -> None:
    """No GPU and no recording: compile every instance of the sweep (for the H100's target)."""
    target = "sm_90a" if config.arch in (None, "sm_90") else config.arch
    compiles = Compiles(target, config.code_cache, config.compile_timeout_s)
    instances = {i.key: i for spec in specs for i in select_instances(load_spec(spec).spec)}
    for instance in instances.values():
        if get_family(instance.family).compiled:
            compiles.request(instance)
    begin = time.monotonic()
    while compiles.running:
        compiles.poll(1.0)
    stats = compiles.stats()
    console.print(f"no GPU here and no recording in jobs/recordings/ to replay: compiled the "
                  f"sweep's {stats['instances']} instances for {target} in "
                  f"{time.monotonic() - begin:.1f} s ({stats['cached']} from the cache, "
                  f"{stats['failed']} failed); nothing measured. Record the standard sweep on "
                  "a GPU (`farm demo` there, then `farm record JOB... --out "
                  "jobs/recordings/NAME.parquet`) and this machine replays it.")
