"""Candidate rules compared on the same trees: leave-one-network-out models trained once per
fold with every close candidate (the union), then scored with the candidates that each rule
keeps (farm.select.train.kept_candidates: the union, or the greedy cover with 2 to 6 covers).
Since the trees learn from every close candidate whichever rule keeps (learn_close), a rule's
figures here are what `bench/select_eval.py --candidates cover --covers N` finds, up to the
model kind each fold's validation picks.

Usage: python -m bench.select_covers --recording jobs/recordings/h100-dwsep.parquet
           --ops dwsep_fwd [--rows 800000] [--covers 2 3 4 5 6] [--name select_covers]
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import lightgbm as lgb
import numpy as np
import pandas as pd

from bench.common import recording_parser, write_cpu_result
from bench.select_eval import cap_rows
from farm.select.catalogue import no_resources
from farm.select.crossval import networks_of, resplit
from farm.select.data import load_dataset
from farm.select.evaluate import efficiency
from farm.select.train import (TrainConfig, kept_candidates, pair_features, pruned_cost, train,
                               training_support, usable)
from farm.store import open_store


def compare(data, rules: list[tuple[str, int]], config: TrainConfig) -> dict:
    """Pooled held-out efficiency and mean candidate count of each (rule, covers)."""
    pooled = {r: [] for r in rules}
    counts = {r: [] for r in rules}
    within = config.kept_fraction(data.operator)
    for i, net in enumerate(networks_of(data)):
        part = resplit(data, (net,))
        model = train(part, config)
        held, fit = usable(part.part("holdout")), usable(part.part("train"))
        raw = lgb.Booster(model_str=model.model_text).predict(
            pair_features(model.spec, part.catalogue, held), raw_score=True)
        safe = training_support(part).safe(held)
        for rule in rules:
            kept = kept_candidates(fit, within, len(part.catalogue), *rule)
            counts[rule].append(len(kept))
            pooled[rule].append(held.assign(cost=pruned_cost(model.kind, raw, held, kept),
                                            safe=safe, problem=held["problem"] + i * 10**6))
    out = {}
    for rule in rules:
        f = pd.concat(pooled[rule], ignore_index=True)
        e = efficiency(f, f["cost"].to_numpy(), f["safe"].to_numpy(), config.guard_depth)
        out[f"{rule[0]} {rule[1]}" if rule[0] == "cover" else rule[0]] = {
            "candidates": float(np.mean(counts[rule])), **e.record()}
        print(f"  {rule}: {np.mean(counts[rule]):.0f} candidates: {e.line()}", flush=True)
    return out


def main() -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--rows", type=int, default=800_000)
    parser.add_argument("--covers", type=int, nargs="+", default=[2, 3, 4, 5, 6])
    parser.add_argument("--name", default="select_covers")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    from farm.recording import import_recording

    rules = [("union", 0), *(("cover", n) for n in args.covers)]
    config = TrainConfig(candidates="union")
    figures: dict = {"operators": {}}
    with tempfile.TemporaryDirectory() as scratch:
        store = open_store(f"sqlite:///{Path(scratch) / 'recording.db'}")
        for path in args.recording:
            import_recording(store, path)
        for op in args.ops:
            print(op, flush=True)
            data = cap_rows(load_dataset(store, op, args.arch, args.dtype,
                                         resources=no_resources), args.rows)
            figures["operators"][op] = compare(data, rules, config)
        store.engine.dispose()
    write_cpu_result(args.name, "selection and training run on the CPU; no GPU involved",
                     figures, args.out)


if __name__ == "__main__":
    main()
