"""Which model kind to train: leave-one-network-out with each kind alone, and with the kind each
fold's validation split picks (on all its problems, or on those that occur in a network only).

For each operator (--ops) of the recordings (loaded as `bench/select_eval.py` loads them), one
model per network of jobs/networks and per kind (regressor, ranker, hybrid), every shape of the
network held out; per fold and kind the held-out and validation efficiency (guarded choices);
then the held-out choices pooled over the folds under each rule: a kind always, or the kind of
higher validation mean. Prints and writes bench/results/NAME.json.

Usage: python -m bench.select_kinds --recording jobs/recordings/h100-*.parquet
           [--ops conv2d_fwd conv2d_bwd_data conv2d_bwd_weight] [--rows 800000]
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import write_result
from bench.select_eval import cap_rows, recorded_datasets
from farm.select.catalogue import no_resources
from farm.select.crossval import networks_of, resplit, scored
from farm.select.data import batch_free, geometries, geometry_fields, network_membership
from farm.select.evaluate import ranked
from farm.select.train import KINDS, TrainConfig, train


def chosen_efficiency(part, model, split: str, depth: int) -> pd.DataFrame:
    """Per problem of a split: the efficiency of the model's (guarded) choice."""
    f = ranked(*scored(part, model, split), depth)
    return f[f["rank"] == 0][["problem", "eff", *geometry_fields(part.operator)]]


def summary(effs: np.ndarray) -> dict:
    return {"problems": int(len(effs)), "mean": float(effs.mean()),
            "p10": float(np.quantile(effs, 0.1)), "min": float(effs.min())}


def evaluate_op(data, threads: int) -> dict:
    op = data.operator
    key = batch_free(op)
    in_networks = {key(s) for s in network_membership(op)}
    folds = {}
    for network in networks_of(data):
        part = resplit(data, (network,))
        per_kind = {}
        for kind in KINDS:
            config = TrainConfig(kinds=(kind,), threads=threads)
            model = train(part, config)
            held = chosen_efficiency(part, model, "holdout", config.guard_depth)
            val = chosen_efficiency(part, model, "validation", config.guard_depth)
            net = np.array([key(g) in in_networks for g in geometries(op, val)], dtype=bool)
            per_kind[kind] = {"holdout": held["eff"].to_numpy(),
                              "validation_mean": float(val["eff"].mean()),
                              "validation_networks_mean": float(val["eff"][net].mean()),
                              "validation_networks": int(net.sum())}
            print(f"  {op} held out {network:20s} {kind:9s} held-out mean "
                  f"{per_kind[kind]['holdout'].mean():.4f}, validation "
                  f"{per_kind[kind]['validation_mean']:.4f} (of networks' shapes "
                  f"{per_kind[kind]['validation_networks_mean']:.4f})", flush=True)
        folds[network] = per_kind
    rules = {"validation": "validation_mean", "validation of networks' shapes":
             "validation_networks_mean"}
    pooled = {}
    for name, field in rules.items():
        picks = {n: max(KINDS, key=lambda k: f[k][field]) for n, f in folds.items()}
        pooled[name] = {**summary(np.concatenate([folds[n][k]["holdout"]
                                                  for n, k in picks.items()])), "kinds": picks}
    for kind in KINDS:
        pooled[kind] = summary(np.concatenate([f[kind]["holdout"] for f in folds.values()]))
    for name, figures in pooled.items():
        print(f"  {op} {name:32s} mean {figures['mean']:.4f} P10 {figures['p10']:.4f} "
              f"min {figures['min']:.3f}")
    return {"pooled": pooled, "folds": {
        n: {k: {"holdout": summary(v["holdout"]), **{x: y for x, y in v.items()
                                                     if x != "holdout"}}
            for k, v in f.items()} for n, f in folds.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recording", type=Path, nargs="+", required=True)
    parser.add_argument("--ops", nargs="+", default=["conv2d_fwd", "conv2d_bwd_data",
                                                     "conv2d_bwd_weight"])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, default=800_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--name", default="select_kinds")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    figures = {"recordings": [p.name for p in args.recording], "operators": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for data in recorded_datasets(args.recording, args.ops, args.arch, args.dtype,
                                      no_resources, Path(scratch)):
            figures["operators"][data.operator] = evaluate_op(cap_rows(data, args.rows),
                                                              args.threads)
    device = {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
              "note": "training and selection on the CPU; the recordings' GPU measurements"}
    print(f"wrote {write_result(args.name, device, figures, args.out)}")


if __name__ == "__main__":
    main()
