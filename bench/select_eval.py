"""Selection models: efficiency vs the measured oracle, selection latency, training time.

For one operator/arch/dtype of a database: trains on (at most) --rows training rows, prints the
efficiency table of both model kinds on the validation and held-out problems (mean, median,
P10, min, top-1, top-5, top-k efficiency), the selection latency for one shape against the
full candidate set (p50/p99: Python Selector through the compiled C export and through
LightGBM; the C export alone, timed in C), and the training time; writes
bench/results/select_eval.json (--out to write elsewhere).

A model trained on SYNTHETIC data (environment named "SYNTHETIC ...", or --seed-synthetic) is
labelled so in the output: its efficiencies are not measured results.

Usage: python -m bench.select_eval --db URL [--op conv2d_fwd] [--arch sm_90] [--dtype bf16]
       [--rows 100000] [--shapes 1000] [--seed-synthetic PROBLEMS] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time

import numpy as np

from bench.common import write_result
from farm.problems import CONV_FIELDS, ConvProblem
from farm.select.catalogue import compile_cache_resources, no_resources
from farm.select.cdriver import run_driver
from farm.select.cexport import symbol_prefix
from farm.select.data import Dataset, load_dataset
from farm.select.evaluate import Efficiency
from farm.select.export import C_FILE, bundle_files, c_files
from farm.select.selector import Selector
from farm.select.train import TrainConfig, train
from farm.store import open_store
from farm.synthetic import synthetic_shapes


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


def query_shapes(data: Dataset, count: int) -> list[ConvProblem]:
    held = data.part("holdout")[list(CONV_FIELDS)].drop_duplicates().to_dict("records")
    shapes = held + synthetic_shapes(count, seed=11)
    problems = {}
    for shape in shapes:
        p = ConvProblem.from_fields(data.operator, data.dtype, shape)
        problems.setdefault(p.key, p)
    return list(problems.values())[:count]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--op", default="conv2d_fwd")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-resources", action="store_true")
    parser.add_argument("--seed-synthetic", type=int, default=0, metavar="PROBLEMS")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    store = open_store(args.db)
    if args.seed_synthetic:
        from farm.select.synthetic import seed_synthetic, synthetic_problems
        problems = synthetic_problems(args.op, args.dtype, args.seed_synthetic // 2,
                                      args.seed_synthetic - args.seed_synthetic // 2)
        print(f"seeded {seed_synthetic(store, problems, args.arch)} SYNTHETIC rows")
    resources = no_resources if args.no_resources else compile_cache_resources(args.arch)
    data = cap_rows(load_dataset(store, args.op, args.arch, args.dtype, resources=resources),
                    args.rows)
    synthetic = bool(data.window.get("synthetic"))
    label = "SYNTHETIC data (not measured)" if synthetic else "measured data"
    model = train(data, TrainConfig(threads=args.threads))
    m = model.metrics
    print(f"{args.op} {args.dtype} on {args.arch}, {label}: {m['training_rows']} training rows, "
          f"trained both kinds in {m['training_seconds']:.1f} s; chose the {m['kind']} "
          f"({m['trees']} trees)")
    for kind, scores in m["candidates"].items():
        for part in ("validation", "holdout"):
            print(f"  {kind:9s} {part:10s} {Efficiency(**scores[part]).line()}")
    files = bundle_files(model)
    files[C_FILE] = c_files(files)[C_FILE]
    fast, slow = Selector(files, "c"), Selector(files, "lightgbm")
    shapes = query_shapes(data, args.shapes)
    py_c = latency(fast.select, shapes)
    py_lgb = latency(slow.select, shapes[:200], repeats=1)
    masks = [fast.allowed(p) for p in shapes]
    with tempfile.TemporaryDirectory() as tmp:
        choices, (c50, c99) = run_driver(files[C_FILE], symbol_prefix(args.op, args.arch,
                                                                      args.dtype),
                                         [[getattr(p, f) for f in CONV_FIELDS] for p in shapes],
                                         masks, tmp, repeats=3)
    agree = sum(fast.names[c] == s for c, s in zip(choices, fast.select_many(shapes)))
    print(f"selection latency, one shape vs {len(fast.names)} candidates ({len(shapes)} shapes): "
          f"Python+C p50 {py_c['p50_us']:.1f} us p99 {py_c['p99_us']:.1f} us | "
          f"Python+LightGBM p50 {py_lgb['p50_us']:.0f} us | C export p50 {c50:.1f} us "
          f"p99 {c99:.1f} us (C and Python agree on {agree}/{len(shapes)})")
    figures = {"operator": args.op, "arch": args.arch, "dtype": args.dtype,
               "synthetic": synthetic, "data": label, "data_window": model.data_window,
               "chosen": m["kind"], "trees": m["trees"], "models": m["candidates"],
               "training_rows": m["training_rows"], "training_seconds": m["training_seconds"],
               "training_threads": args.threads,
               "latency": {"python_c": py_c, "python_lightgbm": py_lgb,
                           "c_export": {"p50_us": c50, "p99_us": c99}},
               "c_python_agreement": f"{agree}/{len(shapes)}"}
    device = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "note": "selection runs on the CPU; no GPU involved"}
    print(f"wrote {write_result('select_eval', device, figures, args.out)}")


if __name__ == "__main__":
    main()
