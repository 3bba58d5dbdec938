"""Where the coordinator and the database saturate: the standard sweep served by replay actors
that answer at once (no GPU time), so every second is the farm's own cost per row.

For each database (SQLite; PostgreSQL with --pg-url, or a private server started from this
machine's PostgreSQL binaries), each number of replay actors and each code tree (this one, and
with --baseline REF the farm at that git revision, side by side in the same run): a fresh
database, the three jobs of the standard sweep replayed from its recording, in a fresh process
with its own local Ray. Prints rows per second (all the rows written, unsupported pairs settled
by the coordinator included, and the replayed ok rows alone), the coordinator process's CPU time
per row, the machine's busy cores, and the number of GPUs at which a real sweep would saturate
it (ok rows per second over one GPU's verified rows per second in
bench/results/farm_throughput.json: the whole sweep, and the farm's own instances alone).
Usage: python -m bench.coordinator_ceiling [--actors 1,2,4] [--pg-url URL] [--out DIR]
           [--baseline REF] [--repeats N] [--recording jobs/recordings/h100-standard.parquet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
from pathlib import Path

from bench.common import RESULTS, scratch_databases, write_result
from bench.trees import code_trees, run_in_tree
from farm.recording import RECORDINGS_DIR


# Runs in a fresh interpreter with the code tree under test first on sys.path; it uses only
# the API that every revision of the farm has (submit, Coordinator, the standard sweep).
DRIVER = r"""
import json, sys, time
url, recording, actors = sys.argv[1], sys.argv[2], int(sys.argv[3])
import ray
from farm import api
from farm.cluster import Coordinator, CoordinatorConfig
from farm.cluster.demo import STANDARD_SWEEP
from farm.store import TimingFilter, open_store

def busy():
    with open("/proc/stat") as f:
        cpu = [int(v) for v in f.readline().split()[1:]]
    return sum(cpu) - cpu[3] - cpu[4], sum(cpu)

store = open_store(url, migrate=True)
jobs = [api.submit(spec, store) for spec in STANDARD_SWEEP]
ray.init(address="local", num_cpus=max(2, actors + 1), include_dashboard=False,
         log_to_driver=False)
try:
    coordinator = Coordinator(store, CoordinatorConfig(replay=recording, replay_actors=actors))
    cpu0, wall0, (b0, t0) = time.process_time(), time.monotonic(), busy()
    outcomes = coordinator.run(until_idle=True, only=jobs)
    cpu, wall, (b1, t1) = time.process_time() - cpu0, time.monotonic() - wall0, busy()
finally:
    ray.shutdown()
seconds = sum(o.seconds for o in outcomes)
rows = sum(o.measured for o in outcomes)
ok = sum(len(store.timings(TimingFilter(job_id=j))) for j in jobs)
print("RESULT " + json.dumps({
    "seconds": seconds, "rows": rows, "rows_per_s": rows / seconds, "ok_rows": ok,
    "ok_rows_per_s": ok / seconds, "coordinator_cpu_ms_per_row": 1000.0 * cpu / rows,
    "busy_cores": (b1 - b0) / max(1, t1 - t0) * __import__("os").cpu_count(),
    "wall_s_with_startup": wall, "statuses": sorted({o.status for o in outcomes})}))
"""


def serve(tree: Path, url: str, recording: Path, actors: int) -> dict:
    return run_in_tree(tree, DRIVER, url, str(recording), str(actors))


def gpu_rates() -> dict[str, float]:
    """Verified rows per second of one GPU on the standard sweep (the recorded benchmark):
    with the cuDNN baseline, and for the farm's own instances (the vendor's time taken out)."""
    path = RESULTS / "farm_throughput.json"
    if not path.exists():
        return {}
    run = json.loads(path.read_text())["figures"]["measure"][0]
    vendor = run["by_family"]["vendor"]
    return {"with_vendor": run["ok_per_s_per_gpu"],
            "own_instances": (run["ok"] - vendor["ok"])
            / (run["seconds"] - vendor["wall_s"] - vendor["setup_s"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--pg-url", default=os.environ.get("FARM_TEST_PG_URL"))
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--baseline", help="a git revision to measure side by side")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each configuration")
    parser.add_argument("--out")
    parser.add_argument("--recording", type=Path, default=RECORDINGS_DIR / "h100-standard.parquet",
                        help="a recording of the standard sweep")
    args = parser.parse_args()
    recording = args.recording.resolve()
    if not recording.is_file():
        raise SystemExit(f"no recording {recording} to replay")
    runs = []
    with tempfile.TemporaryDirectory() as tmp, \
            scratch_databases(args.databases.split(","), Path(tmp), args.pg_url) as databases, \
            code_trees(args.baseline, Path(tmp)) as trees:
        for name, make_url in databases.items():
            for actors in (int(a) for a in args.actors.split(",")):
                for _ in range(args.repeats):
                    for code, (tree, commit) in trees.items():  # alternate the trees
                        run = {"database": name, "actors": actors, "code": code,
                               "commit": commit, **serve(tree, make_url(), recording, actors)}
                        print({k: round(v, 3) if isinstance(v, float) else v
                               for k, v in run.items()}, flush=True)
                        runs.append(run)
    rates = gpu_rates()
    figures = {"recording": recording.name, "runs": runs, "gpu_ok_rows_per_s": rates,
               "machine": {"cpus": os.cpu_count(), "processor": platform.processor()}}
    summary = {}
    for run in runs:
        key = f"{run['database']} x{run['actors']} {run['code']}"
        summary.setdefault(key, []).append(run["ok_rows_per_s"])
    figures["ok_rows_per_s_median"] = {k: statistics.median(v) for k, v in summary.items()}
    if args.baseline:
        figures["speedup"] = {
            k.replace(" current", ""): v / figures["ok_rows_per_s_median"][
                k.replace("current", "baseline")]
            for k, v in figures["ok_rows_per_s_median"].items() if k.endswith("current")}
        print("speed-up over the baseline:", figures["speedup"])
    for basis, rate in rates.items():
        figures[f"saturating_gpus_{basis}"] = {
            k: v / rate for k, v in figures["ok_rows_per_s_median"].items()}
        print(f"GPUs that would saturate it ({basis}, {rate:.1f} ok rows/s per GPU):",
              {k: round(v, 1) for k, v in figures[f"saturating_gpus_{basis}"].items()})
    path = write_result("coordinator_ceiling", {"name": f"{os.cpu_count()}-core CPU, replay"},
                        figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
