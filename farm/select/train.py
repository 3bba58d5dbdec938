"""Training per (operator, architecture, dtype): a LightGBM regressor on log latency, a
lambdarank ranker grouped by problem, and a hybrid (boosting first on each pair's log speed
relative to its problem's fastest, so that the trees know how much slower a candidate is, then
on lambdarank from there, as one model), each early-stopped on the validation problems; the one
of higher validation efficiency is kept and scored on the held-out problems.

Rows are the measured pairs of problems that have at least one applicable `ok` time. A failed
pair (wrong result, launch error, timeout) teaches the models to avoid it: the regressor sees
it as `failed_penalty` times the problem's slowest time, the ranker as relevance 0. Pairs the
family's rules forbid are trained the same way (learn_inapplicable), only so that they rank
last: the Selector still filters by the rules, and evaluation scores applicable pairs only.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import lightgbm as lgb
import numpy as np
import pandas as pd

from farm.select.catalogue import CatalogueEntry
from farm.select.data import Dataset, geometry_fields
from farm.select.evaluate import Efficiency, choices, efficiency
from farm.select.features import FeatureSpec, feature_matrix, instance_matrix, shape_numbers
from farm.select.guard import TrainingSupport
from kernels.registry import operator_spec

KINDS = ("regressor", "ranker", "hybrid")
BOOSTING = {"rounds": 100, "learning_rate": 0.2, "num_leaves": 31}  # where neither the config
# nor the operator sets them
HYBRID_SHARE = 0.4  # the hybrid's first stage: at most this share of the rounds
GRADES = 30  # ranker relevance: 30 for the fastest, one less per 4% slower, 0 at the floor


@dataclass(frozen=True)
class TrainConfig:
    """Model hyperparameters (small trees, so that selection stays in microseconds)."""

    # The boosting settings left None come from the operator's OperatorSpec.training, then
    # from BOOSTING (for_operator; train() applies it). 100 trees at 0.2 by default: 40 at 0.35
    # select in well under half the time and are as good on held-out networks, but worse on
    # generated shapes of another distribution (P10 0.70 against 0.83 in backward-weight on
    # the H100 recordings, docs/BENCHMARKS.md)
    rounds: int | None = None  # most trees; each costs 0.7 to 1.7 ns a candidate in the C export
    learning_rate: float | None = None
    hybrid_rounds: int | None = None  # the hybrid's first stage (relative log speed) at most;
    # None: HYBRID_SHARE of the rounds
    num_leaves: int | None = None
    min_data_in_leaf: int = 20
    feature_fraction: float = 0.9
    early_stopping: int = 30
    failed_penalty: float = 4.0
    learn_inapplicable: bool = True  # train on pairs the rules forbid too, as failures, so that
    # they rank last and the selector's lazy applicability check stops at once
    inapplicable_weight: float = 0.05  # the regressor's weight of those rows
    truncation: int = 80  # lambdarank: pairs with one member this high in the list count
    kinds: tuple[str, ...] = KINDS
    threads: int = 1  # OpenMP threads; more only pays on an otherwise idle machine
    seed: int = 0
    keep_within: float | None = None  # candidates kept: those within this fraction of the
    # fastest on some training problem (0.97: 3%); 0 keeps all; None: the operator's default
    guard_depth: int = 2  # the model's best this many: a safe one first (farm.select.guard)

    def for_operator(self, operator: str) -> TrainConfig:
        """This config with the boosting settings it leaves None set to the operator's
        (OperatorSpec.training), else to BOOSTING."""
        own = {**BOOSTING, **operator_spec(operator).training}
        given = replace(self, **{k: v for k, v in own.items() if getattr(self, k) is None})
        if given.hybrid_rounds is None:
            given = replace(given, hybrid_rounds=max(round(HYBRID_SHARE * given.rounds), 1))
        return given

    def kept_fraction(self, operator: str) -> float:
        if self.keep_within is not None:
            return self.keep_within
        return operator_spec(operator).keep_within

    def params(self, kind: str) -> dict[str, Any]:
        common = {"learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                  "min_data_in_leaf": self.min_data_in_leaf, "verbose": -1,
                  "feature_fraction": self.feature_fraction, "seed": self.seed,
                  "deterministic": True, "force_row_wise": True,
                  "num_threads": self.threads or os.cpu_count() or 1}
        if kind == "regressor":
            return {**common, "objective": "regression", "metric": "l2"}
        gains = [2 ** (g / 3) - 1 for g in range(GRADES + 1)]
        return {**common, "objective": "lambdarank", "metric": "ndcg", "eval_at": [5],
                "label_gain": gains, "lambdarank_truncation_level": self.truncation}


@dataclass(frozen=True)
class TrainedModel:
    """A chosen model with everything its bundle needs."""

    spec: FeatureSpec
    catalogue: tuple[CatalogueEntry, ...]
    kind: str  # regressor (cost = predicted log latency) | ranker, hybrid (cost = -score)
    model_text: str
    metrics: dict[str, Any]
    data_window: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def operator(self) -> str:
        return self.spec.operator

    @property
    def arch(self) -> str:
        return self.spec.device.arch

    @property
    def dtype(self) -> str:
        return self.spec.dtype


def cost_of(kind: str, raw: np.ndarray) -> np.ndarray:
    """Lower is better: the regressor's log latency, the ranker's negated score."""
    return raw if kind == "regressor" else -raw


def pair_features(spec: FeatureSpec, catalogue: tuple[CatalogueEntry, ...],
                  frame: pd.DataFrame) -> np.ndarray:
    """Feature rows of a frame's pairs (shape fields and catalogue index per row)."""
    table = instance_matrix(spec, catalogue)
    shapes = shape_numbers(spec.operator, frame)
    return feature_matrix(spec, shapes, table[frame["candidate"].to_numpy()])


def _targets(frame: pd.DataFrame, penalty: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(log latency, log of the problem's fastest time over it, relevance grade) per row;
    failed rows are penalised."""
    ok = (frame["status"].eq("ok") & frame["applicable"]).to_numpy()
    times = frame["median_us"].to_numpy(np.float64)
    by = frame.assign(t=np.where(ok, times, np.nan)).groupby("problem")["t"]
    slowest, best = by.transform("max").to_numpy(), by.transform("min").to_numpy()
    latency = np.where(ok, times, penalty * slowest)
    slower = np.log(latency / best) / math.log(1.04)
    grade = np.where(ok, np.clip(GRADES - np.ceil(slower - 1e-9), 0, GRADES), 0)
    return np.log(latency), np.log(best / latency), grade.astype(np.int32)


def pruned_cost(kind: str, raw: np.ndarray, frame: pd.DataFrame, kept: np.ndarray) -> np.ndarray:
    """Costs of a frame's pairs from the model's raw scores; infinite for the candidates it
    does not keep (catalogue indices `kept`), which it never chooses."""
    return np.where(frame["candidate"].isin(kept).to_numpy(), cost_of(kind, raw), np.inf)


def kept_candidates(frame: pd.DataFrame, within: float, count: int) -> np.ndarray:
    """Catalogue indices (of `count`) of the candidates whose ok time is within `within` of
    the fastest of at least one problem of `frame`, sorted; all of them where within is 0."""
    if within <= 0:
        return np.arange(count)
    ok = frame[frame["status"].eq("ok") & frame["applicable"]]
    best = ok.groupby("problem")["median_us"].transform("min")
    return np.unique(ok.loc[best / ok["median_us"] >= within, "candidate"].to_numpy())


def usable(frame: pd.DataFrame, applicable_only: bool = True) -> pd.DataFrame:
    """Pairs (the applicable ones only, by default) of problems with at least one applicable
    ok time, grouped by problem."""
    f = frame[frame["applicable"]] if applicable_only else frame
    ok = f["status"].eq("ok") & f["applicable"]
    has_ok = ok.groupby(f["problem"]).transform("any")
    return f[has_ok.to_numpy(bool)].sort_values(["problem", "candidate"], kind="stable")


def _fit(kind: str, config: TrainConfig, names: tuple[str, ...], x: np.ndarray,
         part: pd.DataFrame, xv: np.ndarray, val: pd.DataFrame,
         init: lgb.Booster | None = None) -> lgb.Booster:
    """One model; the hybrid is a `speed` stage (regression on relative log speed) continued
    as a ranker."""
    if kind == "hybrid":
        stage = _fit("speed", replace(config, rounds=config.hybrid_rounds), names, x, part, xv,
                     val)
        stage = lgb.Booster(model_str=stage.model_to_string(num_iteration=stage.best_iteration))
        rest = replace(config, rounds=max(config.rounds - stage.num_trees(), 1))
        return _fit("ranker", rest, names, x, part, xv, val, init=stage)
    log_t, speed, grade = _targets(part, config.failed_penalty)
    vlog_t, vspeed, vgrade = _targets(val, config.failed_penalty)
    label, vlabel = {"regressor": (log_t, vlog_t), "speed": (speed, vspeed)}.get(
        kind, (grade, vgrade))
    group = part.groupby("problem", sort=False).size().to_numpy()
    vgroup = val.groupby("problem", sort=False).size().to_numpy()
    rank = kind == "ranker"
    weight = lambda f: None if rank else np.where(  # noqa: E731
        f["applicable"].to_numpy(bool), 1.0, config.inapplicable_weight)
    train_set = lgb.Dataset(x, label, group=group if rank else None, weight=weight(part),
                            feature_name=list(names), free_raw_data=False)
    valid = lgb.Dataset(xv, vlabel, group=vgroup if rank else None, weight=weight(val),
                        reference=train_set)
    return lgb.train(config.params("ranker" if rank else "regressor"), train_set,
                     num_boost_round=config.rounds, valid_sets=[valid], init_model=init,
                     callbacks=[lgb.early_stopping(config.early_stopping, verbose=False)])


def training_support(data: Dataset) -> TrainingSupport:
    """The candidates' support and reference flags, from the training problems' pairs."""
    return TrainingSupport(usable(data.part("train")), geometry_fields(data.operator),
                           [e.family for e in data.catalogue])


def train(data: Dataset, config: TrainConfig = TrainConfig()) -> TrainedModel:
    """Fit each kind, keep the better by validation efficiency, score it on the holdout.

    Only the candidates that come within `keep_within` of the fastest on some training problem
    are learnt and exported; the others get an infinite cost in the figures, which are still
    measured against the fastest of all candidates."""
    start = time.perf_counter()
    config = config.for_operator(data.operator)
    spec = FeatureSpec.build(data.operator, data.dtype, data.device)
    parts = {s: usable(data.part(s)) for s in ("train", "validation", "holdout")}
    for name in ("train", "validation"):
        if parts[name]["problem"].nunique() < 2:
            raise ValueError(f"too few {name} problems with an ok time to train "
                             f"{data.operator} {data.dtype} on {data.arch}")
    kept = kept_candidates(parts["train"], config.kept_fraction(data.operator),
                           len(data.catalogue))
    x = {s: pair_features(spec, data.catalogue, p) for s, p in parts.items()}
    fit = {s: usable(data.part(s), not config.learn_inapplicable) for s in ("train", "validation")}
    fit = {s: f[f["candidate"].isin(kept)] for s, f in fit.items()}
    xf = {s: pair_features(spec, data.catalogue, p) for s, p in fit.items()}
    support = training_support(data)
    safe = {s: support.safe(p) for s, p in parts.items()}
    depth = config.guard_depth
    fitted, scores, costs = {}, {}, {}
    for kind in config.kinds:
        booster = _fit(kind, config, spec.names, xf["train"], fit["train"], xf["validation"],
                       fit["validation"])
        fitted[kind] = booster
        costs[kind] = {s: pruned_cost(kind, booster.predict(
            x[s], num_iteration=booster.best_iteration, raw_score=True), parts[s], kept)
            for s in parts}
        scores[kind] = {s: efficiency(parts[s], costs[kind][s], safe[s], depth).record()
                        for s in parts}
    chosen = max(config.kinds, key=lambda k: (scores[k]["validation"]["mean"],
                                              scores[k]["validation"]["p10"]))
    booster = fitted[chosen]
    text = booster.model_to_string(num_iteration=booster.best_iteration)
    seconds = time.perf_counter() - start
    metrics = {"kind": chosen, "holdout": scores[chosen]["holdout"],
               "validation": scores[chosen]["validation"], "train": scores[chosen]["train"],
               "candidates": {k: {"validation": v["validation"], "holdout": v["holdout"],
                                  "trees": fitted[k].best_iteration or fitted[k].num_trees()}
                              for k, v in scores.items()},
               "trees": booster.best_iteration or booster.num_trees(),
               "training_rows": int(len(fit["train"])), "training_seconds": seconds,
               "candidates_kept": int(len(kept)),
               "synthetic": bool(data.window.get("synthetic")),
               "per_problem": per_problem(data, parts["holdout"], costs[chosen]["holdout"],
                                          safe["holdout"], depth)}
    catalogue = tuple(replace(data.catalogue[i], support=support.bounds(i)) for i in kept)
    return TrainedModel(spec, catalogue, chosen, text, metrics, dict(data.window),
                        asdict(config))


def per_problem(data: Dataset, frame: pd.DataFrame, cost: np.ndarray,
                safe: np.ndarray | None = None, depth: int = 0) -> list[dict[str, str]]:
    """The choice for each problem of `frame`: [{problem: problem key, kernel: instance}]."""
    chosen = choices(frame, cost, safe, depth)
    spec = operator_spec(data.operator)
    return [{"problem": spec.problem(data.dtype, {f: r[f] for f in spec.fields}).key,
             "kernel": r["kernel"]} for r in chosen.to_dict("records")]


def summary(model: TrainedModel) -> str:
    """A few lines on what was trained and how well it chooses."""
    m = model.metrics
    label = " (SYNTHETIC data: not a measured result)" if m.get("synthetic") else ""
    lines = [f"{model.operator} {model.dtype} on {model.arch}: {m['kind']} with {m['trees']} "
             f"trees, {m['training_rows']} training rows, {m['training_seconds']:.1f} s{label}"]
    for part in ("validation", "holdout"):
        lines.append(f"  {part:10s} " + Efficiency(**m[part]).line())
    evaluations = m.get("evaluations", {})
    if "leave_one_network_out" in evaluations:
        pooled = evaluations["leave_one_network_out"]["pooled"]
        lines.append("  leave-one-network-out, pooled: " + Efficiency(**pooled).line())
    if "held_out_spec" in evaluations:
        lines.append(f"  (held out: the shapes of {evaluations['held_out_spec']['spec']})")
    if "held_out_region" in evaluations:
        lines.append(f"  (held out: the region {evaluations['held_out_region']['where']})")
    return "\n".join(lines)
