"""Selection models: efficiency vs the measured oracle, selection latency, training time.

For each operator (--ops) of one arch/dtype of a database, or of recordings (--recording FILE
[FILE...]: their rows are loaded into a scratch SQLite database under the recorded GPU's
environment, as `farm import-recording` does; only shapes of jobs/networks are ever held
out, every other shape trains or validates):
  * leave-one-network-out (--folds networks, the default): one model per network of
    jobs/networks with every shape of that network held out; the held-out choices of all folds
    pooled into one efficiency table (mean, median, P10, min, top-1, top-5, top-k efficiency),
    with each fold's mean and the model kind it chose;
  * one model with the default held-out networks (efficientnet_b0, resnext50_32x4d): the table
    of every model kind on its validation and held-out problems, and the selection latency for
    one shape against the full candidate set (p50/p99: Python Selector through the compiled C
    export and through LightGBM; the C export alone, timed in C);
  * with --shift-recording FILE (one of the recordings): its shapes, generated from another
    distribution than the rest, held out at any batch size from a model trained on the rest;
  * with --shift-where QUERY: the shapes of a region of the space (e.g. "R >= 5": filters
    larger than any trained on) held out the same way, for operators without such a recording;
  * with --timing-rows N: the training time of all model kinds on N training rows of SYNTHETIC
    measurements (timing only: the real sweep has fewer rows), first operator only.
A held-out network is judged only on the shapes that no training network has at any batch size
(farm.select.data). Choices are guarded (farm.select.guard; --guard-depth 0 turns it off).
Writes bench/results/select_eval.json (--out to write elsewhere).

A model trained on SYNTHETIC data (environment named "SYNTHETIC ...", or --seed-synthetic) is
labelled so in the output: its efficiencies are not measured results.

Usage: python -m bench.select_eval --recording jobs/recordings/h100-*.parquet
           [--ops conv2d_fwd conv2d_bwd_data conv2d_bwd_weight] [--timing-rows 100000]
       python -m bench.select_eval --db URL [--ops conv2d_fwd] [--arch sm_90] [--dtype bf16]
           [--rows 100000] [--shapes 1000] [--folds networks|default] [--seed-synthetic N]
           [--kinds ranker ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from bench.common import write_result
from farm.problems import Problem
from farm.select.catalogue import compile_cache_resources, no_resources
from farm.select.cdriver import run_driver
from farm.select.cexport import symbol_prefix
from farm.select.crossval import leave_networks_out
from farm.select.data import Dataset, load_dataset
from farm.select.evaluate import Efficiency
from farm.select.export import C_FILE, bundle_files, c_files
from farm.select.selector import Selector
from farm.select.train import CANDIDATE_RULES, KINDS, TrainConfig, train
from farm.store import open_store
from kernels.registry import operator_spec


def cap_rows(data: Dataset, rows: int, seed: int = 0) -> Dataset:
    """Keep whole training problems (random order) until the training pairs reach `rows`;
    validation and held-out problems stay."""
    frame = data.frame
    train_part = frame[frame["split"] == "train"]
    sizes = train_part.groupby("problem").size()
    order = np.random.default_rng(seed).permutation(sizes.index.to_numpy())
    keep = order[:int(np.searchsorted(np.cumsum(sizes.loc[order].to_numpy()), rows)) + 1]
    mask = (frame["split"] != "train") | frame["problem"].isin(keep)
    return Dataset(data.operator, data.arch, data.dtype, data.device, data.catalogue,
                   frame[mask].reset_index(drop=True), data.window)


def latency(fn, items, repeats: int = 3) -> dict:
    for item in items[:20]:
        fn(item)
    times = []
    for _ in range(repeats):
        for item in items:
            start = time.perf_counter()
            fn(item)
            times.append(time.perf_counter() - start)
    return {"p50_us": float(np.percentile(times, 50) * 1e6),
            "p99_us": float(np.percentile(times, 99) * 1e6), "calls": len(times)}


def recorded_datasets(recordings: Sequence[Path], ops: Sequence[str], arch: str, dtype: str,
                      resources, folder: Path) -> Iterator[Dataset]:
    """Each operator's dataset of `recordings`, imported into a scratch store in `folder`."""
    from farm.recording import import_recording
    store = open_store(f"sqlite:///{Path(folder) / 'recording.db'}")
    try:
        for path in recordings:
            import_recording(store, path)
        for op in ops:
            yield load_dataset(store, op, arch, dtype, resources=resources)
    finally:
        store.engine.dispose()


def query_shapes(data: Dataset, count: int) -> list[Problem]:
    spec = operator_spec(data.operator)
    held = data.part("holdout")[list(spec.fields)].drop_duplicates().to_dict("records")
    shapes = held + spec.synthetic_shapes(count, seed=11)
    problems = {}
    for shape in shapes:
        p = spec.problem(data.dtype, shape)
        problems.setdefault(p.key, p)
    return list(problems.values())[:count]


def selection_latency(model, data: Dataset, count: int) -> dict:
    """Python Selector (C export, LightGBM) and the C export alone, one shape per call."""
    files = bundle_files(model)
    files[C_FILE] = c_files(files)[C_FILE]
    fast, slow = Selector(files, "c"), Selector(files, "lightgbm")
    shapes = query_shapes(data, count)
    py_c = latency(fast.select, shapes)
    py_lgb = latency(slow.select, shapes[:200], repeats=1)
    masks = [fast.allowed(p) for p in shapes]
    with tempfile.TemporaryDirectory() as tmp:
        picks, (c50, c99) = run_driver(files[C_FILE], symbol_prefix(model.operator, model.arch,
                                                                    model.dtype),
                                       [p.number_values() for p in shapes],
                                       masks, tmp, repeats=3)
    agree = sum(fast.names[c] == s for c, s in zip(picks, fast.select_many(shapes)))
    print(f"  selection latency, one shape vs {len(fast.names)} candidates ({len(shapes)} "
          f"shapes): Python+C p50 {py_c['p50_us']:.1f} us p99 {py_c['p99_us']:.1f} us | "
          f"Python+LightGBM p50 {py_lgb['p50_us']:.0f} us | C export p50 {c50:.1f} us "
          f"p99 {c99:.1f} us (C and Python agree on {agree}/{len(shapes)})")
    return {"candidates": len(fast.names), "python_c": py_c, "python_lightgbm": py_lgb,
            "c_export": {"p50_us": c50, "p99_us": c99},
            "c_python_agreement": f"{agree}/{len(shapes)}"}


def worst_choices(op: str, frame, cost, safe, depth: int, count: int = 6) -> list[dict]:
    """The `count` held-out problems chosen worst: shape, chosen and fastest instance."""
    from farm.select.evaluate import ranked

    f = ranked(frame, cost, safe, depth)
    fields = list(operator_spec(op).fields)
    ok = frame[frame["applicable"].to_numpy(bool) & frame["status"].eq("ok").to_numpy()]
    # the fastest pair, whether the model knows its instance or not (the oracle of `ranked`)
    best = ok.sort_values(["problem", "median_us"]).drop_duplicates("problem").set_index(
        "problem")["kernel"]
    chosen = f[f["rank"] == 0].sort_values(["eff", "problem"]).head(count)
    return [{"shape": ",".join(f"{k}={r[k]}" for k in fields), "efficiency": float(r["eff"]),
             "chosen": r["kernel"], "fastest": best.get(r["problem"])}
            for r in chosen.to_dict("records")]


def held_out_choices(op: str, frame, cost, safe, depth: int) -> list[dict]:
    """Each held-out problem's shape, chosen instance and its time, and the fastest time."""
    from farm.select.evaluate import choices

    fields = list(operator_spec(op).fields)
    return [{"shape": {k: r[k] if isinstance(r[k], str) else int(r[k]) for k in fields},
             "chosen": r["kernel"],
             "chosen_us": float(r["median_us"]), "fastest_us": float(r["median_us"] * r["eff"])}
            for r in choices(frame, cost, safe, depth).to_dict("records")]


def _shape_key(op: str, shape: dict) -> tuple:
    """The numeric shape fields' values (a text field, such as an activation, is not part of
    the geometry the choices carry)."""
    from farm.select.data import geometry_fields

    return tuple(int(shape[f]) for f in geometry_fields(op))


def vendor_times(recordings: list[Path]) -> dict[tuple, float]:
    """The vendor's recorded time of each (operator, shape) in the recordings."""
    from farm.recording import read_recording

    times = {}
    for path in recordings:
        f = read_recording(path).frame
        f = f[(f["family"] == "vendor") & (f["status"] == "ok")]
        times.update({(op, _shape_key(op, json.loads(shape))): us
                      for op, shape, us in zip(f["operator"], f["shape"], f["median_us"])})
    return times


def against_vendor(op: str, choices: list[dict], vendor: dict[tuple, float]) -> dict | None:
    """The held-out choices against the vendor's time (vendor_times) for the same problem: the
    geometric mean of vendor time over chosen time, and over the fastest candidate's time."""
    pairs = [(vendor[key], c) for c in choices
             if (key := (op, _shape_key(op, c["shape"]))) in vendor]
    if not pairs:
        return None

    def geomean(values: list[float]) -> float:
        return float(np.exp(np.mean(np.log(values))))

    return {"problems": len(pairs), "chosen": geomean([v / c["chosen_us"] for v, c in pairs]),
            "fastest": geomean([v / c["fastest_us"] for v, c in pairs])}


def networks_table(data: Dataset, config: TrainConfig) -> dict:
    """Leave-one-network-out, pooled; prints the table."""
    found = leave_networks_out(data, config)
    pooled = found["pooled"]
    frame = found["frame"]
    worst = worst_choices(data.operator, frame, frame["cost"].to_numpy(),
                          frame["safe"].to_numpy(), config.guard_depth)
    print(f"  leave-one-network-out, pooled over {len(found['folds'])} folds "
          f"({found['distinct_shapes']} distinct shapes): {Efficiency(**pooled).line()}")
    for name, fold in found["folds"].items():
        print(f"    held out {name:20s} {fold['kind']:9s} {fold['problems']:3d} problems: "
              f"mean {fold['mean']:.3f} P10 {fold['p10']:.3f} min {fold['min']:.3f}")
    for w in worst:
        print(f"    worst: {w['efficiency']:.3f} {w['shape']}: {w['chosen']} (fastest "
              f"{w['fastest']})")
    return {"pooled": pooled, "folds": found["folds"], "worst": worst,
            "choices": held_out_choices(data.operator, frame, frame["cost"].to_numpy(),
                                        frame["safe"].to_numpy(), config.guard_depth),
            "distinct_shapes": found["distinct_shapes"],
            "training_seconds_per_fold": found["training_seconds"]}


def recording_shapes(data: Dataset, path: Path) -> set[tuple[int, ...]]:
    """The geometries of the operator's problems in the recording `path`."""
    import pandas as pd

    from farm.recording import read_recording
    from farm.select.data import geometries

    frame = read_recording(path).frame
    frame = frame[frame["operator"] == data.operator].drop_duplicates("problem_key")
    fields = pd.DataFrame([json.loads(shape) for shape in frame["shape"]])  # one column a field
    return set(geometries(data.operator, fields))


def region_shapes(data: Dataset, where: str) -> set[tuple[int, ...]]:
    """farm.select.crossval.region_shapes, a bad query ending the run with its reason."""
    from farm.select.crossval import region_shapes as shapes_in

    try:
        return shapes_in(data, where)
    except ValueError as exc:
        raise SystemExit(f"--shift-where {exc}") from None


def shift_table(data: Dataset, config: TrainConfig, shapes: set[tuple[int, ...]],
                label: str) -> dict:
    """The problems of these geometries (any batch size) held out from a model trained on all
    the others."""
    from farm.select.crossval import hold_out_shapes
    from farm.select.selector import Selector
    from farm.select.train import usable

    part = hold_out_shapes(data, shapes)
    model = train(part, config)
    held = model.metrics["holdout"]
    print(f"  {label} held out ({len(shapes)} shapes, any batch): "
          f"{Efficiency(**held).line()}")
    rows = usable(part.part("holdout"))
    selector = Selector(bundle_files(model), "lightgbm")
    worst = worst_choices(data.operator, rows, selector.frame_costs(rows),
                          selector.frame_safe(rows), selector.guard_depth)
    for w in worst:
        print(f"    worst: {w['efficiency']:.3f} {w['shape']}: {w['chosen']} (fastest "
              f"{w['fastest']})")
    return {"held_out": label, "shapes": len(shapes), "kind": model.metrics["kind"],
            "holdout": held, "worst": worst}


def evaluate_op(store, op: str, args, resources) -> dict:
    config = TrainConfig(threads=args.threads, keep_within=args.keep_within,
                         candidates=args.candidates, covers=args.covers,
                         learn_close=not args.no_learn_close, guard_depth=args.guard_depth,
                         rounds=args.rounds, learning_rate=args.learning_rate,
                         num_leaves=args.num_leaves, seed=args.seed,
                         kinds=tuple(args.kinds) if args.kinds else None)
    data = cap_rows(load_dataset(store, op, args.arch, args.dtype, resources=resources),
                    args.rows)
    synthetic = bool(data.window.get("synthetic"))
    label = "SYNTHETIC data (not measured)" if synthetic else "measured data"
    envs = ", ".join(data.window.get("environments", []))
    print(f"{op} {args.dtype} on {args.arch}, {label} ({envs}): {data.window['problems']} "
          f"problems, {data.window['pairs']} candidate pairs")
    figures = {"synthetic": synthetic, "data": label, "data_window": data.window}
    figures["guard_depth"] = config.guard_depth
    if args.folds == "networks":
        figures["leave_one_network_out"] = networks_table(data, config)
    if args.shift_recording:
        figures["shift"] = shift_table(data, config, recording_shapes(data, args.shift_recording),
                                       args.shift_recording.name)
    if args.shift_where:
        figures["shift_region"] = shift_table(data, config, region_shapes(data, args.shift_where),
                                              f"the region {args.shift_where}")
    model = train(data, config)
    m = model.metrics
    print(f"  default held-out networks: {m['training_rows']} training rows, trained every "
          f"kind in {m['training_seconds']:.1f} s; chose the {m['kind']} ({m['trees']} trees)")
    for kind, scores in m["candidates"].items():
        for part in ("validation", "holdout"):
            print(f"    {kind:9s} {part:10s} {Efficiency(**scores[part]).line()}")
    figures["default_holdout"] = {"holdout": data.window["holdout"], "chosen": m["kind"],
                                  "trees": m["trees"], "config": model.config,
                                  "models": m["candidates"],
                                  "training_rows": m["training_rows"],
                                  "training_seconds": m["training_seconds"]}
    figures["latency"] = selection_latency(model, data, args.shapes)
    return figures


def training_time(op: str, args, rows: int) -> dict:
    """Training time of every kind on `rows` training rows of SYNTHETIC measurements."""
    from farm.select.synthetic import seed_synthetic, synthetic_problems

    with tempfile.TemporaryDirectory() as tmp:
        store = open_store(f"sqlite:///{Path(tmp) / 'timing.db'}")
        problems = synthetic_problems(op, args.dtype, 0, int(rows / 45) + 50, seed=5)
        seed_synthetic(store, problems, args.arch)
        data = cap_rows(load_dataset(store, op, args.arch, args.dtype), rows)
        model = train(data, TrainConfig(threads=args.threads, keep_within=args.keep_within,
                                        candidates=args.candidates, covers=args.covers))
    m = model.metrics
    print(f"training time, {op}: {m['training_rows']} SYNTHETIC training rows (timing only), "
          f"every kind ({', '.join(m['candidates'])}) in {m['training_seconds']:.1f} s on "
          f"{args.threads} thread(s)")
    return {"operator": op, "training_rows": m["training_rows"],
            "seconds": m["training_seconds"], "kinds": list(m["candidates"]),
            "threads": args.threads, "data": "SYNTHETIC (timing only)"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--db")
    source.add_argument("--recording", type=Path, nargs="+",
                        help="load these recordings (of one GPU) into a scratch database and "
                             "evaluate on them")
    parser.add_argument("--ops", "--op", nargs="+", default=["conv2d_fwd"])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--keep-within", type=float, default=None, metavar="FRACTION",
                        help="keep the candidates within this fraction of the fastest on some "
                             "training problem (default: the operator's)")
    parser.add_argument("--candidates", choices=CANDIDATE_RULES, default=None,
                        help="which of those are kept: a greedy cover of the training problems "
                             "or every one, the union (default: the operator's)")
    parser.add_argument("--covers", type=int, default=None,
                        help="the cover's close candidates per training problem (default: the "
                             "operator's)")
    parser.add_argument("--no-learn-close", action="store_true",
                        help="the trees learn from the kept candidates' pairs only, not from "
                             "every close candidate's")
    parser.add_argument("--folds", choices=["networks", "default"], default="networks")
    parser.add_argument("--rounds", type=int, default=None,
                        help="most boosting rounds (trees) of each model (default: the "
                             "operator's)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="default: the operator's")
    parser.add_argument("--num-leaves", type=int, default=None,
                        help="leaves per tree at most (default: the operator's)")
    parser.add_argument("--seed", type=int, default=TrainConfig.seed,
                        help="LightGBM's seed (feature sampling)")
    parser.add_argument("--guard-depth", type=int, default=TrainConfig.guard_depth,
                        help="the model's best this many: a safe candidate first (0: off)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=None,
                        help="the model kinds trained; the validation split picks among them "
                             "(default: the operator's)")
    parser.add_argument("--shift-recording", type=Path, default=None, metavar="FILE",
                        help="one of the recordings: its shapes held out from a model trained "
                             "on the others")
    parser.add_argument("--shift-where", default=None, metavar="QUERY",
                        help="a region of the shape space (a pandas query over the shape "
                             "fields, e.g. \"R >= 5\"): its shapes held out from a model "
                             "trained on the rest")
    parser.add_argument("--timing-rows", type=int, default=0, metavar="ROWS")
    parser.add_argument("--no-resources", action="store_true")
    parser.add_argument("--seed-synthetic", type=int, default=0, metavar="PROBLEMS")
    parser.add_argument("--name", default="select_eval", help="result file name")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.shift_recording and args.shift_recording not in (args.recording or []):
        parser.error("--shift-recording must be one of the --recording files")
    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(args.db or f"sqlite:///{Path(scratch) / 'recording.db'}")
        figures: dict = {"arch": args.arch, "dtype": args.dtype, "threads": args.threads}
        if args.recording:
            from farm.recording import import_recording, recording_meta

            metas = [recording_meta(path) for path in args.recording]
            if len({m["environment"]["fingerprint"] for m in metas}) > 1:
                parser.error("the recordings come from different environments")
            for path in args.recording:
                import_recording(store, path)
            figures["recording"] = {
                "files": [{"file": p.name, "note": m.get("note"), "rows": m.get("rows"),
                           "recorded_at": m.get("recorded_at")}
                          for p, m in zip(args.recording, metas)],
                "environment": metas[0]["environment"]}
        if args.seed_synthetic:
            from farm.select.synthetic import seed_synthetic, synthetic_problems
            for op in args.ops:
                problems = synthetic_problems(op, args.dtype, args.seed_synthetic // 2,
                                              args.seed_synthetic - args.seed_synthetic // 2)
                print(f"seeded {seed_synthetic(store, problems, args.arch)} SYNTHETIC rows")
        resources = no_resources if args.no_resources else compile_cache_resources(args.arch)
        figures["operators"] = {op: evaluate_op(store, op, args, resources) for op in args.ops}
        times = vendor_times(args.recording) if args.recording else {}
        for op, found in figures["operators"].items():
            held = found.get("leave_one_network_out")
            vendor = held and against_vendor(op, held["choices"], times)
            if vendor:
                held["against_vendor"] = vendor
                print(f"{op}: held-out networks' choices against the vendor ({vendor['problems']} "
                      f"problems): x{vendor['chosen']:.3f} (the fastest candidate "
                      f"x{vendor['fastest']:.3f})")
        store.engine.dispose()
    if args.timing_rows:
        figures["training_time"] = training_time(args.ops[0], args, args.timing_rows)
    synthetic = any(f["synthetic"] for f in figures["operators"].values())
    figures["synthetic"] = synthetic
    device = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "note": "selection and training run on the CPU; no GPU involved"}
    if "recording" in figures:
        env = figures["recording"]["environment"]
        device["measured_on"] = f"{env['gpu_name']} ({env['arch']})"
    print(f"wrote {write_result(args.name, device, figures, args.out)}")


if __name__ == "__main__":
    main()
