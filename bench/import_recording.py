"""How long `farm import-recording` takes: recordings loaded into a fresh database, then the
same recordings loaded again (every row replaced, the replaced ones archived to history).

For each database (SQLite; PostgreSQL with --pg-url, or a private server started from this
machine's PostgreSQL binaries) and each code tree (this one, and with --baseline REF the farm
at that git revision, side by side in the same run, alternating): a fresh database and a fresh
interpreter, each recording imported in turn, then all of them again. Prints the seconds of
each pass, the rows, and rows a second; with --baseline, this tree's speed-up over it.

Usage: python -m bench.import_recording --recording jobs/recordings/h200/h200-stages.parquet
           [--databases sqlite,postgresql] [--pg-url URL] [--baseline REF] [--repeats N]
           [--name N] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from bench.common import cpu_name, scratch_databases, write_result
from bench.trees import code_trees, run_in_tree

# Runs in a fresh interpreter with the code tree under test first on sys.path; it uses only
# the API that every revision of the farm has (open_store, import_recording).
DRIVER = r"""
import json, sys, time
url, paths = sys.argv[1], sys.argv[2:]
from farm.recording import import_recording, read_recording
from farm.store import open_store

store = open_store(url, migrate=True)
recordings = [read_recording(p) for p in paths]  # reading the files is not the import's time
rows = sum(len(r.frame) for r in recordings)
passes = []
for _ in ("first", "again"):
    start = time.perf_counter()
    for recording in recordings:
        import_recording(store, recording)
    passes.append(time.perf_counter() - start)
print("RESULT " + json.dumps({"rows": rows, "first_s": passes[0], "again_s": passes[1],
                              "first_rows_per_s": rows / passes[0],
                              "again_rows_per_s": rows / passes[1]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, nargs="+", required=True)
    parser.add_argument("--databases", default="sqlite,postgresql")
    parser.add_argument("--pg-url", default=os.environ.get("FARM_TEST_PG_URL"))
    parser.add_argument("--baseline", help="a git revision to measure side by side")
    parser.add_argument("--repeats", type=int, default=1, help="runs of each configuration")
    parser.add_argument("--name", default="import_recording")
    parser.add_argument("--out")
    args = parser.parse_args()
    missing = [str(p) for p in args.recording if not p.is_file()]
    if missing:
        raise SystemExit(f"no recording {', '.join(missing)}")
    paths = [str(p.resolve()) for p in args.recording]
    runs = []
    with tempfile.TemporaryDirectory() as tmp, \
            scratch_databases(args.databases.split(","), Path(tmp), args.pg_url) as databases, \
            code_trees(args.baseline, Path(tmp)) as trees:
        for name, make_url in databases.items():
            for _ in range(args.repeats):
                for code, (tree, commit) in trees.items():  # alternate the trees
                    run = {"database": name, "code": code, "commit": commit,
                           **run_in_tree(tree, DRIVER, make_url(), *paths)}
                    print({k: round(v, 2) if isinstance(v, float) else v
                           for k, v in run.items()}, flush=True)
                    runs.append(run)
    medians = {}
    for key in {(r["database"], r["code"]) for r in runs}:
        mine = [r for r in runs if (r["database"], r["code"]) == key]
        medians[" ".join(key)] = {p: statistics.median(r[p] for r in mine)
                                  for p in ("first_s", "again_s")}
    figures = {"recordings": [Path(p).name for p in paths], "runs": runs, "median_s": medians}
    if args.baseline:
        figures["speedup"] = {
            f"{db} {p}": medians[f"{db} baseline"][p] / medians[f"{db} current"][p]
            for db in databases for p in ("first_s", "again_s")}
        print("speed-up over the baseline:",
              {k: round(v, 2) for k, v in figures["speedup"].items()})
    path = write_result(args.name, {"cpu": cpu_name(), "cores": os.cpu_count()}, figures,
                        args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
