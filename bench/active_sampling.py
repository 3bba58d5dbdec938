"""Active sampling: what the shapes the retraining loop asks for buy, against as many shapes
drawn at random from the same pool.

`measure`: one operator's rows of the base recordings are imported into a fresh SQLite
database; a one-shape job starts the coordinator, whose retraining loop
(farm/cluster/retrain.py) trains a model, queues the --batch shapes where that model is unsure
or was wrong (farm/select/active.py) as a job, measures it, retrains, and so on for --rounds
rounds. On this machine's GPUs, the shapes come from the coverage space (or --shapes, a job
spec's problems) and the sampled jobs are exported as a recording. With --replay FILE (no GPU
needed) the pool is --shapes, whose pairs FILE holds: the farm replays FILE's measurements,
and the recording written holds FILE's rows of the shapes chosen. Each round's shapes,
reasons, pairs, seconds and model are written as JSON.

`random`: as many shapes as a recording holds, drawn at random from another recording of the
same pool, as a recording, for the other arm.

Then `bench/select_eval.py` on base, base + random and base + active (docs/BENCHMARKS.md).
Usage: python -m bench.active_sampling measure --op conv2d_bwd_data --batch 100 --rounds 3
           --base jobs/recordings/h100-standard.parquet jobs/recordings/h100-synthetic.parquet
           [--replay jobs/recordings/h100-coverage.parquet
            --shapes jobs/training/coverage_bwd_data.yaml] --record active.parquet
       python -m bench.active_sampling random --op conv2d_bwd_data --like active.parquet
           --from jobs/recordings/h100-coverage.parquet --record random.parquet [--seed 0]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import ray

from bench.common import write_result
from farm.cluster import Coordinator, CoordinatorConfig
from farm.cluster.config import QuietReporter
from farm.gpu import list_devices
from farm import api
from farm.recording import (Recording, export_recording, import_recording, read_recording,
                            write_recording)
from farm.specs import resolve_spec
from farm.store import open_store


class Notes(QuietReporter):
    """The coordinator's notes (trainings, registrations, queued rounds), kept with a time."""

    def __init__(self) -> None:
        self.begin, self.lines = time.monotonic(), []

    def note(self, message: str) -> None:
        line = f"{time.monotonic() - self.begin:7.1f} s  {message}"
        self.lines.append(line)
        print(line, flush=True)


def operator_rows(recording: Recording, op: str) -> Recording:
    return dataclasses.replace(recording, frame=recording.frame[recording.frame["operator"] == op])


def kick_off(store, base: Recording, op: str) -> int:
    """A one-shape job of the operator's naive family: its finish makes the first training due."""
    row = base.frame.iloc[0]
    shape = json.loads(row["shape"])  # a recording's shapes are JSON objects
    spec = {"name": f"start {op}", "operator": op, "dtype": str(row["dtype"]),
            "problems": [{"inline": [{k: v for k, v in shape.items() if k != "dtype"}]}],
            "kernels": [{"family": "conv_naive"}]}
    return api.queue(resolve_spec(spec, Path("active-sampling")), store)


def chosen_rows(store, jobs: list[int], replayed: Recording) -> pd.DataFrame:
    """The replayed recording's rows of the shapes the sampled jobs measured."""
    keys = set(store.recorded_rows(jobs)["problem_key"])
    return replayed.frame[replayed.frame["problem_key"].isin(keys)]


def measure(args) -> None:
    devices = list_devices()
    if not devices and not args.replay:
        raise SystemExit("no GPU here: measure on a GPU host, or replay a recording (--replay)")
    if args.replay and not args.shapes:
        raise SystemExit("--replay needs --shapes: the pool whose pairs the recording holds")
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'farm.db'}")
        base = [operator_rows(read_recording(p), args.op) for p in args.base]
        imported = {k: v for b in base for k, v in import_recording(store, b).items()}
        kick_off(store, base[0], args.op)
        notes = Notes()
        config = CoordinatorConfig(
            code_cache=args.code_cache or os.environ.get("FARM_CODE_CACHE"),
            replay=str(args.replay) if args.replay else None, replay_actors=2,
            retrain_include_replay=bool(args.replay), active_batch=args.batch,
            active_rounds=args.rounds, retrain_growth=0.05,
            active_shapes=str(args.shapes) if args.shapes else None)
        ray.init(address="local", num_gpus=len(devices), num_cpus=os.cpu_count(),
                 include_dashboard=False, log_to_driver=False)
        try:
            coordinator = Coordinator(store, config, notes)
            outcomes = coordinator.run(until_idle=True)
        finally:
            ray.shutdown()
        sampled = [o for o in outcomes if o.name.startswith("active-sampling")]
        rounds = []
        for o in sampled:
            rows = store.recorded_rows([o.job_id])
            rounds.append({"job": o.name, "status": o.status, "seconds": o.seconds,
                           "pairs": o.measured, "failed": o.failed,
                           "ok": int((rows["status"] == "ok").sum()),
                           "shapes": int(rows["problem_key"].nunique())})
        models = [{"id": r.model.id, "version": r.model.version, "promoted": r.promoted,
                   "reason": r.reason, "holdout": r.model.metrics.get("holdout"),
                   "validation": r.model.metrics.get("validation")}
                  for r in coordinator.retrainer.registered]
        note = (f"active sampling of {args.op}: {len(sampled)} rounds of up to {args.batch} "
                "shapes chosen by the retraining loop, by bench/active_sampling.py")
        if sampled and args.replay:
            replayed = read_recording(args.replay)
            write_recording(chosen_rows(store, [o.job_id for o in sampled], replayed),
                            replayed.environment, list(replayed.jobs), args.record,
                            note=f"{note}, from the pairs of {Path(args.replay).name}")
        elif sampled:
            export_recording(store, [o.job_id for o in sampled], args.record, note=note)
    device = devices[0] if devices else {"name": f"replay of {Path(args.replay).name}"}
    figures = {"operator": args.op, "batch": args.batch, "rounds_asked": args.rounds,
               "base": [str(p) for p in args.base], "imported": imported,
               "replay": str(args.replay) if args.replay else None,
               "shapes": str(args.shapes) if args.shapes else "generated (coverage space)",
               "rounds": rounds, "models": models, "notes": notes.lines,
               "record": str(args.record)}
    path = write_result(args.name, device, figures, args.out)
    print(f"wrote {path}")


def random_arm(args) -> None:
    """As many shapes as the active recording has, drawn at random from --from."""
    like = read_recording(args.like).frame
    count = like[like["operator"] == args.op]["problem_key"].nunique()
    source = operator_rows(read_recording(args.source), args.op)
    keys = source.frame["problem_key"].drop_duplicates().to_numpy()
    if count > len(keys):
        raise SystemExit(f"{args.source} has {len(keys)} shapes of {args.op}, fewer than {count}")
    chosen = set(np.random.default_rng(args.seed).choice(keys, size=count, replace=False))
    frame = source.frame[source.frame["problem_key"].isin(chosen)]
    write_recording(frame, source.environment, list(source.jobs), args.record,
                    note=f"{count} shapes of {args.op} drawn at random (seed {args.seed}) from "
                         f"{Path(args.source).name}, as many as {Path(args.like).name} holds")
    print(f"{args.record}: {count} shapes, {len(frame)} rows")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    m = sub.add_parser("measure", help="run the retraining loop's active sampling")
    m.add_argument("--op", default="conv2d_bwd_data")
    m.add_argument("--batch", type=int, default=100)
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--base", type=Path, nargs="+", required=True)
    m.add_argument("--record", type=Path, required=True)
    m.add_argument("--replay", type=Path, help="replay this recording instead of a GPU")
    m.add_argument("--shapes", type=Path, help="a job spec whose problems are the pool")
    m.add_argument("--code-cache")
    m.add_argument("--name", default="active_sampling")
    m.add_argument("--out")
    r = sub.add_parser("random", help="the random arm of the same size (no GPU)")
    r.add_argument("--op", default="conv2d_bwd_data")
    r.add_argument("--like", type=Path, required=True)
    r.add_argument("--from", dest="source", type=Path, required=True)
    r.add_argument("--record", type=Path, required=True)
    r.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    (measure if args.step == "measure" else random_arm)(args)


if __name__ == "__main__":
    main()
