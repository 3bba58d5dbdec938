"""Where the coordinator and the database saturate: the standard sweep served by replay actors
that answer at once (no GPU time), so every second is the farm's own cost per row.

For each database (SQLite; PostgreSQL with --pg-url, or a private server started from this
machine's PostgreSQL binaries) and each number of replay actors: a fresh database, the three
jobs of the standard sweep replayed from its recording (--recording), the compile cache warm.
Prints rows per second (all the rows written, unsupported pairs settled by the coordinator included, and the
replayed ok rows alone), the coordinator process's CPU time per row, and the number of GPUs at
which a real sweep would saturate it (its ok rows per second over one GPU's verified rows per
second in bench/results/farm_throughput.json).
Usage: python -m bench.coordinator_ceiling [--actors 1,2,4] [--pg-url URL] [--out DIR]
           [--recording jobs/recordings/h100-standard.parquet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import ray

from bench.common import RESULTS, write_result
from farm import api
from farm.cluster import Coordinator, CoordinatorConfig
from farm.cluster.demo import STANDARD_SWEEP
from farm.recording import RECORDINGS_DIR
from farm.store import TimingFilter, open_store


def serve(url: str, recording: Path, actors: int) -> dict:
    store = open_store(url, migrate=True)
    jobs = [api.submit(spec, store) for spec in STANDARD_SWEEP]
    ray.init(num_cpus=max(2, actors + 1), include_dashboard=False, log_to_driver=False)
    try:
        cpu0, wall0 = time.process_time(), time.monotonic()
        outcomes = Coordinator(store, CoordinatorConfig(replay=str(recording),
                                                         replay_actors=actors)).run(
            until_idle=True, only=jobs)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    finally:
        ray.shutdown()
    seconds = sum(o.seconds for o in outcomes)
    rows = sum(o.measured for o in outcomes)
    ok = sum(len(store.timings(TimingFilter(job_id=j))) for j in jobs)
    return {"actors": actors, "seconds": seconds, "rows": rows, "rows_per_s": rows / seconds,
            "ok_rows": ok, "ok_rows_per_s": ok / seconds,
            "coordinator_cpu_ms_per_row": 1000.0 * cpu / rows,
            "wall_s_with_startup": wall, "statuses": [o.status for o in outcomes]}


def gpu_rate() -> float | None:
    """Verified rows per second of one GPU on the standard sweep (the recorded benchmark)."""
    path = RESULTS / "farm_throughput.json"
    if not path.exists():
        return None
    runs = json.loads(path.read_text())["figures"]["measure"]
    return runs[0]["ok_per_s_per_gpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="1,2,4")
    parser.add_argument("--pg-url", default=os.environ.get("FARM_TEST_PG_URL"))
    parser.add_argument("--out")
    parser.add_argument("--recording", type=Path, default=RECORDINGS_DIR / "h100-standard.parquet",
                        help="a recording of the standard sweep")
    args = parser.parse_args()
    recording = args.recording
    if not recording.is_file():
        raise SystemExit(f"no recording {recording} to replay")
    server = None
    databases = {}
    with tempfile.TemporaryDirectory() as tmp:
        databases["sqlite"] = lambda: f"sqlite:///{tmp}/ceiling-{time.monotonic_ns()}.db"
        pg_url = args.pg_url
        if pg_url is None:
            try:
                from tests.pg_server import PgServer
                server = PgServer()
                server.start()
            except (ImportError, RuntimeError, OSError) as exc:
                print(f"no PostgreSQL: {exc}")
                server = None
        if server is not None:
            databases["postgresql"] = server.create_database
        elif pg_url:
            databases["postgresql"] = lambda: pg_url
        runs = []
        try:
            for name, make_url in databases.items():
                for actors in (int(a) for a in args.actors.split(",")):
                    run = {"database": name, **serve(make_url(), recording, actors)}
                    print(run, flush=True)
                    runs.append(run)
        finally:
            if server is not None:
                server.stop()
    rate = gpu_rate()
    figures = {"recording": recording.name, "runs": runs, "gpu_ok_rows_per_s": rate,
               "machine": {"cpus": os.cpu_count(), "processor": platform.processor()}}
    if rate:
        figures["saturating_gpus"] = {f"{r['database']} x{r['actors']}":
                                      r["ok_rows_per_s"] / rate for r in runs}
        print("GPUs that would saturate it:", figures["saturating_gpus"])
    path = write_result("coordinator_ceiling", {"name": f"{os.cpu_count()}-core CPU, replay"},
                        figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
