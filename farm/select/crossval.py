"""Leave-networks-out evaluation: for each network of jobs/networks (or each group given), train
with every problem of that network held out (whichever other network shares it) and score the
model on them; the held-out choices of all folds are pooled into one efficiency table, so each
network's shapes are judged by a model that never saw them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from farm.select.data import (Dataset, SplitConfig, assign_splits, batch_free, bucket, geometries,
                              network_membership, networks_dir)
from farm.select.evaluate import efficiency
from farm.select.train import (TrainConfig, pair_features, pruned_cost, train, training_support,
                               usable)


def resplit(data: Dataset, holdout: Sequence[str], split: SplitConfig = SplitConfig()
            ) -> Dataset:
    """The dataset with these networks held out (validation by the same hash as ever)."""
    frame = data.frame
    problems = frame.drop_duplicates("problem").sort_values("problem")
    splits, described = assign_splits(geometries(data.operator, problems), dataclasses.replace(
        split, holdout_networks=tuple(holdout)), data.operator)
    by_problem = pd.Series(splits, index=problems["problem"].to_numpy(), dtype=object)
    frame = frame.assign(split=frame["problem"].map(by_problem).to_numpy())  # ids may have gaps
    return dataclasses.replace(data, frame=frame, window={**data.window, "holdout": described})


def hold_out_shapes(data: Dataset, shapes: set[tuple[int, ...]],
                    split: SplitConfig = SplitConfig()) -> Dataset:
    """The dataset with every problem of these geometries held out, at any batch size; the
    others train or validate (by the usual hash), networks included."""
    key = batch_free(data.operator)
    held = {key(s) for s in shapes}
    frame = data.frame
    problems = frame.drop_duplicates("problem").sort_values("problem")
    splits = ["holdout" if key(g) in held else
              "validation" if bucket(g, split.salt) < split.validation_share else "train"
              for g in geometries(data.operator, problems)]
    by_problem = pd.Series(splits, index=problems["problem"].to_numpy(), dtype=object)
    frame = frame.assign(split=frame["problem"].map(by_problem).to_numpy())
    described = {"kind": "shapes", "shapes": len(held)}
    return dataclasses.replace(data, frame=frame, window={**data.window, "holdout": described})


def region_shapes(data: Dataset, where: str) -> set[tuple[int, ...]]:
    """The geometries of the data's problems in a region of the shape space: a pandas query
    over the shape fields, e.g. "R >= 5"; ValueError names a query that is not one."""
    problems = data.frame.drop_duplicates("problem")
    try:
        return set(geometries(data.operator, problems.query(where)))
    except Exception as exc:  # noqa: BLE001 - pandas raises many kinds for a bad expression
        raise ValueError(f"{where!r} is not a query over {data.operator}'s shape fields: "
                         f"{exc}") from None


def scored(part: Dataset, model, split: str = "holdout"
           ) -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    """A split's usable pairs, the model's costs of them (infinite for the candidates it does
    not keep) and whether each is safe (the guard's support from the training problems)."""
    rows = usable(part.part(split))
    booster = lgb.Booster(model_str=model.model_text)
    raw = booster.predict(pair_features(model.spec, part.catalogue, rows), raw_score=True)
    names = {e.name for e in model.catalogue}  # the candidates the model may choose
    kept = [i for i, e in enumerate(part.catalogue) if e.name in names]
    return rows, pruned_cost(model.kind, raw, rows, np.array(kept)), \
        training_support(part).safe(rows)


def networks_of(data: Dataset, split: SplitConfig = SplitConfig()) -> list[str]:
    """The networks any problem of the dataset occurs in."""
    members = network_membership(data.operator, networks_dir(data.operator, split))
    shapes = set(geometries(data.operator, data.frame))
    return sorted(set().union(*(members.get(s, set()) for s in shapes)))


def leave_networks_out(data: Dataset, config: TrainConfig = TrainConfig(),
                       folds: Sequence[Sequence[str]] | None = None,
                       split: SplitConfig = SplitConfig()) -> dict[str, Any]:
    """Train once per fold (default: one network per fold) and pool the held-out choices.
    Returns the pooled efficiency, each fold's, the kinds chosen and the held-out choices."""
    folds = [tuple(f) for f in folds] if folds else [(n,) for n in networks_of(data, split)]
    pooled, per_fold, seconds = [], {}, []
    for i, fold in enumerate(folds):
        part = resplit(data, fold, split)
        model = train(part, config)
        seconds.append(model.metrics["training_seconds"])
        held, cost, safe = scored(part, model)
        name = "+".join(fold)
        per_fold[name] = {"kind": model.kind, "trees": model.metrics["trees"],
                          **efficiency(held, cost, safe, config.guard_depth).record()}
        pooled.append(held.assign(cost=cost, safe=safe, fold=name,
                                  problem=held["problem"] + i * 10**6))
    frame = pd.concat(pooled, ignore_index=True)
    pooled_eff = efficiency(frame, frame["cost"].to_numpy(), frame["safe"].to_numpy(),
                            config.guard_depth)
    return {"folds": per_fold, "pooled": pooled_eff.record(),
            "distinct_shapes": len(set(geometries(data.operator, frame))),
            "training_seconds": seconds, "frame": frame}
