"""Training per (operator, architecture, dtype): a LightGBM regressor on log latency, a
lambdarank ranker grouped by problem, and a hybrid (boosting first on each pair's log speed
relative to its problem's fastest, so that the trees know how much slower a candidate is, then
on lambdarank from there, as one model), each early-stopped on the validation problems; of
the kinds trained (the operator's, or every one) the one of higher validation efficiency is
kept and scored on the held-out problems.

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
from farm.select.data import THIN, Dataset, family_problems, geometry_fields
from farm.select.evaluate import Efficiency, choices, efficiency
from farm.select.features import FeatureSpec, feature_matrix, instance_matrix, shape_numbers
from farm.select.guard import TrainingSupport, reference_flags, thin_families
from kernels.registry import operator_spec

KINDS = ("regressor", "ranker", "hybrid")
BOOSTING = {"rounds": 100, "learning_rate": 0.2, "num_leaves": 31}  # where neither the config
# nor the operator sets them
HYBRID_SHARE = 0.4  # the hybrid's first stage: at most this share of the rounds
CANDIDATE_RULES = ("cover", "union")  # kept_candidates
CANDIDATES = {"candidates": "cover", "covers": 4}  # where neither the config nor the operator's
# training settings set them
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
    kinds: tuple[str, ...] | None = None  # the kinds trained, the validation split picking
    # among them; None: the operator's (OperatorSpec.training `kinds`), else KINDS
    threads: int = 1  # OpenMP threads; more only pays on an otherwise idle machine
    seed: int = 0
    keep_within: float | None = None  # candidates kept: close means within this fraction of
    # a training problem's fastest (0.97: 3%); 0 keeps all; None: the operator's default
    # Which close ones are kept (kept_candidates; None: the operator's training settings, then
    # CANDIDATES): "cover", a greedy cover giving each training problem `covers` close
    # candidates (fewer if it has fewer); "union", every candidate close on some training problem
    candidates: str | None = None
    covers: int | None = None
    learn_close: bool = True  # the trees learn from every close candidate's pairs (the union's),
    # whichever the rule keeps to choose among
    guard_depth: int = 2  # the model's best this many: a safe one first (farm.select.guard)

    def for_operator(self, operator: str) -> TrainConfig:
        """This config with the boosting and candidate settings it leaves None set to the
        operator's (OperatorSpec.training), else to BOOSTING and CANDIDATES."""
        own = {**BOOSTING, **CANDIDATES, "kinds": KINDS, **operator_spec(operator).training}
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


def _close_pairs(frame: pd.DataFrame, within: float) -> pd.DataFrame:
    """The applicable ok pairs within `within` of their problem's fastest, with `eff` (the
    fastest time over the pair's)."""
    ok = frame[frame["status"].eq("ok") & frame["applicable"]]
    eff = ok.groupby("problem")["median_us"].transform("min") / ok["median_us"]
    return ok.assign(eff=eff)[eff >= within]


def kept_candidates(frame: pd.DataFrame, within: float, count: int, rule: str = "union",
                    covers: int = CANDIDATES["covers"]) -> np.ndarray:
    """Catalogue indices (of `count`) of the candidates a model keeps, sorted; all of them
    where within is 0. `union`: every candidate whose ok time is within `within` of the
    fastest of at least one problem of `frame`; `cover`: cover_candidates of those."""
    if within <= 0:
        return np.arange(count)
    if rule == "cover":
        return cover_candidates(frame, within, covers)
    if rule != "union":
        raise ValueError(f"candidate rule must be one of {', '.join(CANDIDATE_RULES)}")
    return np.unique(_close_pairs(frame, within)["candidate"].to_numpy())


def cover_candidates(frame: pd.DataFrame, within: float,
                     covers: int = CANDIDATES["covers"]) -> np.ndarray:
    """A greedy set cover of the problems of `frame`: repeatedly keep the candidate within
    `within` of the fastest on the most problems that still need one, each weighted by how
    many it still needs (ties: the larger sum of its efficiencies on them, then the lower
    index), until each problem has `covers` kept candidates that close, or as many as it has.
    Sorted catalogue indices."""
    close = _close_pairs(frame, within)
    if close.empty:
        return np.array([], dtype=np.int64)
    problems, p_index = np.unique(close["problem"].to_numpy(), return_inverse=True)
    candidates, c_index = np.unique(close["candidate"].to_numpy(), return_inverse=True)
    eff = np.zeros((len(problems), len(candidates)))
    eff[p_index, c_index] = close["eff"].to_numpy(np.float64)
    near = eff > 0
    need = np.minimum(near.sum(axis=1), covers).astype(np.float64)
    kept: list[int] = []
    while need.any():
        gain = need @ near
        score = gain * (len(problems) + 1) + (eff * (need > 0)[:, None]).sum(axis=0)
        best = int(np.argmax(score))
        if gain[best] <= 0:
            break
        kept.append(best)
        need = np.where(near[:, best], np.maximum(need - 1, 0), need)
        near[:, best] = False
    return np.sort(candidates[kept])


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

    Only the candidates kept (kept_candidates: `keep_within`, `candidates`, `covers`; and the
    reference families' instances, so that every shape has one) are exported; the trees learn from them, and from the other close ones with `learn_close`.
    The others get an infinite cost in the figures, which are still measured against the
    fastest of all candidates."""
    start = time.perf_counter()
    config = config.for_operator(data.operator)
    spec = FeatureSpec.build(data.operator, data.dtype, data.device)
    parts = {s: usable(data.part(s)) for s in ("train", "validation", "holdout")}
    for name in ("train", "validation"):
        if parts[name]["problem"].nunique() < 2:
            raise ValueError(f"too few {name} problems with an ok time to train "
                             f"{data.operator} {data.dtype} on {data.arch}")
    within = config.kept_fraction(data.operator)
    kept = kept_candidates(parts["train"], within, len(data.catalogue), config.candidates,
                           config.covers)
    # the reference families' instances too, right on every shape: a model can always answer,
    # and the guard chooses them only where no other kept candidate applies
    kept = np.union1d(kept, np.flatnonzero(reference_flags([e.family for e in data.catalogue])))
    learnt = kept_candidates(parts["train"], within, len(data.catalogue), "union") \
        if config.learn_close else kept
    x = {s: pair_features(spec, data.catalogue, p) for s, p in parts.items()}
    fit = {s: usable(data.part(s), not config.learn_inapplicable) for s in ("train", "validation")}
    fit = {s: f[f["candidate"].isin(learnt)] for s, f in fit.items()}
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
               "family_problems": family_problems(data),
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
    thin = thin_families(m.get("family_problems", {}), THIN)
    if thin:
        lines.append(f"  thinly measured (ok on fewer than {THIN} training problems; measure "
                     "shapes they take): " + ", ".join(f"{f} {n}" for f, n in thin))
    evaluations = m.get("evaluations", {})
    if "leave_one_network_out" in evaluations:
        pooled = evaluations["leave_one_network_out"]["pooled"]
        lines.append("  leave-one-network-out, pooled: " + Efficiency(**pooled).line())
    if "held_out_spec" in evaluations:
        lines.append(f"  (held out: the shapes of {evaluations['held_out_spec']['spec']})")
    if "held_out_region" in evaluations:
        lines.append(f"  (held out: the region {evaluations['held_out_region']['where']})")
    if "judged_recording" in evaluations:
        from farm.select.judge import line  # it trains by this module

        judged = evaluations["judged_recording"]
        lines.append(f"  judged on the layers of {judged['recording']} ({judged['gpu']}), their "
                     f"geometries held out: {line(judged['pooled'])}")
    return "\n".join(lines)
