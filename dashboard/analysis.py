"""The dashboard's arithmetic on query results: efficiency summaries and top-k curves, the
choices of a selection model or a baseline, speed-ups over the vendor, job ETAs. Shape labels
and classes come with the frames (dashboard/shapes.py).

A selection model's `metrics` JSON (the models table, written by farm/select) is read from its
"holdout" part when there is one, else from the top level; every key is optional:
  problems                 held-out problems evaluated
  mean, median, p10, min   efficiency = oracle time / time of the chosen instance (a choice
                           with no ok time scores 0)
  top1                     fraction of problems whose choice is (one of) the fastest
  top5                     fraction whose fastest instance is among the model's five best
  top_k                    {"2": e, "4": e, "8": e}: mean efficiency of the best of the
                           model's k best choices
  failed_choices           choices whose measurement was not ok
  per_problem              [{"problem": problem key, "kernel": instance name or kernel key},
                           ...]: the model's choice per held-out problem. With it the dashboard
                           recomputes the figures from the measurements and draws their
                           distributions; without it, it shows the stored figures only.
  evaluations              {key of EVALUATIONS: entry}, stored by `farm train`'s options:
                           the entry's figures (under "pooled" where it has that key; the
                           judged recording's per class of shape under "classes"), shown as
                           stored.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

SUMMARY_KEYS = ("mean", "median", "p10", "min", "top1", "top5")
TOPK = 10


def summarize(frame: pd.DataFrame) -> dict[str, float]:
    """Efficiency figures over the shapes of a chosen_efficiency frame; a choice with no ok
    time scores 0 and is never among the fastest."""
    if frame.empty:
        return {"shapes": 0, "untimed": 0, **{k: float("nan") for k in SUMMARY_KEYS}}
    eff, ranks = frame["efficiency"].fillna(0.0), frame["rank"]
    return {"shapes": len(frame), "untimed": int(frame["efficiency"].isna().sum()),
            "mean": eff.mean(), "median": eff.median(), "p10": eff.quantile(0.1),
            "min": eff.min(), "top1": (ranks <= 1).mean(), "top5": (ranks <= 5).mean()}


def topk_curve(frame: pd.DataFrame, kmax: int = TOPK) -> pd.DataFrame:
    """Fraction of shapes whose choice is among the k fastest, k = 1..kmax."""
    ks = np.arange(1, kmax + 1)
    ranks = frame["rank"]
    fractions = [(ranks <= k).mean() if len(ranks) else np.nan for k in ks]
    return pd.DataFrame({"k": ks, "fraction": fractions})


def stored_figures(metrics: dict) -> dict:
    """A model's stored held-out figures (the "holdout" part, else the top level)."""
    metrics = metrics if isinstance(metrics, dict) else {}
    part = metrics.get("holdout")
    return part if isinstance(part, dict) else metrics


EVALUATIONS = {"leave_one_network_out": "networks never trained on (pooled leave-one-out)",
               "held_out_spec": "held-out shapes of {spec}",
               "held_out_region": "the held-out region {where}",
               "judged_recording": "layers of {recording} on {gpu}, their geometries held out "
                                   "of training"}
COUNT_COLUMNS = ("problems", "under 0.70")  # the other figure columns are fractions or ratios


class _Named(dict):
    def __missing__(self, key: str) -> str:
        return "?"


def _figure_row(figures: dict) -> dict:
    """A stored figures dict as a table row: problems, mean, P10, min, top-2 / top-4
    efficiency, choices under 0.70 and the speed over the vendor (judged only)."""
    top = figures.get("top_k") or {}
    return {"problems": figures.get("problems"), "mean": figures.get("mean"),
            "p10": figures.get("p10"), "min": figures.get("min"),
            "top-2 efficiency": top.get("2"), "top-4 efficiency": top.get("4"),
            "under 0.70": figures.get("under_0_70"),
            "over vendor (geomean)": figures.get("over_vendor_geomean")}


def _stored(metrics: dict) -> dict:
    found = metrics.get("evaluations") if isinstance(metrics, dict) else None
    return found if isinstance(found, dict) else {}


def stored_evaluations(metrics: dict) -> pd.DataFrame:
    """The evaluations stored with a model (farm train --leave-networks-out, --holdout-spec,
    --holdout-where, --judge-recording): one row each (_figure_row)."""
    rows = []
    for key, label in EVALUATIONS.items():
        entry = _stored(metrics).get(key)
        if not isinstance(entry, dict):
            continue
        rows.append({"evaluation": label.format_map(_Named(entry)),
                     **_figure_row(entry.get("pooled", entry))})
    return pd.DataFrame(rows)


def stored_classes(metrics: dict) -> pd.DataFrame:
    """The judged evaluation's figures per class of shape (farm train --judge-recording): one
    row each (_figure_row); empty where none is stored."""
    entry = _stored(metrics).get("judged_recording")
    classes = entry.get("classes") if isinstance(entry, dict) else None
    return pd.DataFrame([{"class": name, **_figure_row(figures)}
                         for name, figures in (classes or {}).items()
                         if isinstance(figures, dict)])


def stored_topk(metrics: dict) -> pd.DataFrame:
    """The stored top-k efficiency curve (k = 1 is the mean), empty if not stored."""
    figures = stored_figures(metrics)
    top = figures.get("top_k") or figures.get("topk") or {}
    points = [(1, figures.get("mean"))] + [(int(k), v) for k, v in top.items()]
    frame = pd.DataFrame(points, columns=["k", "fraction"]).dropna()
    return frame.sort_values("k", ignore_index=True) if len(top) else frame.iloc[0:0]


def best_single_instance(stats: pd.DataFrame, shapes: int) -> str | None:
    """The instance with the best mean efficiency over all shapes (0 where it has no time)."""
    if stats.empty or not shapes:
        return None
    score = stats["efficiency_sum"] / shapes
    return str(stats.loc[score.idxmax(), "kernel"])


def model_choices(metrics: dict) -> pd.DataFrame:
    """(problem_key, choice) pairs of a model's per_problem list; empty if it has none."""
    listed = (metrics or {}).get("per_problem") or stored_figures(metrics).get("per_problem")
    rows = [(p.get("problem"), p.get("kernel")) for p in listed or [] if isinstance(p, dict)]
    frame = pd.DataFrame(rows, columns=["problem_key", "choice"]).dropna()
    return frame.drop_duplicates("problem_key", ignore_index=True)


def chosen_efficiency(shapes: pd.DataFrame, timings: pd.DataFrame,
                      choices: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per shape of `shapes` (a per_shape frame): the chosen instance, its time and rank,
    and efficiency = oracle / chosen time. `timings` are timings_of() the chosen instances;
    `choices` says which one each problem chose (None: the single instance of `timings`)."""
    timed = timings[["problem_id", "environment_id", "problem_key", "kernel", "kernel_key",
                     "median_us", "rank"]]
    if choices is None:
        base = shapes
        picked = timed
    else:
        base = shapes.merge(choices, on="problem_key")
        picked = timed.merge(choices, on="problem_key")
        picked = picked[(picked["kernel"] == picked["choice"])
                        | (picked["kernel_key"] == picked["choice"])]
    picked = picked.drop_duplicates(["problem_id", "environment_id"])
    out = base.merge(picked[["problem_id", "environment_id", "kernel", "median_us", "rank"]],
                     on=["problem_id", "environment_id"], how="left")
    out = out.rename(columns={"kernel": "chosen", "median_us": "chosen_us"})
    if choices is not None:
        out["chosen"] = out["chosen"].fillna(out["choice"])
    out["efficiency"] = out["oracle_us"] / out["chosen_us"]
    return out


def speedups(shapes: pd.DataFrame) -> pd.DataFrame:
    """The shapes with a vendor time: speed-up = vendor time / our best time."""
    out = shapes.dropna(subset=["vendor_us"]).copy()
    out["speedup"] = out["vendor_us"] / out["oracle_us"]
    for who, column in (("ours", "oracle_us"), ("vendor", "vendor_us")):
        out[f"{who}_tflops"] = out["flops"] / out[column] / 1e6
        out[f"{who}_gbps"] = out["min_bytes"] / out[column] / 1e3
    return out


def geomean(values: pd.Series) -> float:
    values = values.dropna()
    return float(np.exp(np.log(values).mean())) if len(values) else float("nan")


def with_progress(queue: pd.DataFrame, now: pd.Timestamp) -> pd.DataFrame:
    """Adds progress (0..1) and ETA (seconds) from the rate since the job started."""
    out = queue.copy()
    finished = out["done_pairs"] + out["failed_pairs"] + out["cached_pairs"]
    total = out["total_pairs"].where(out["total_pairs"] > 0)
    out["progress"] = (finished / total).fillna(0.0).clip(0, 1)
    started = pd.to_datetime(out["started_at"], utc=True)
    elapsed = (now - started).dt.total_seconds()
    rate = (out["done_pairs"] + out["failed_pairs"]) / elapsed.where(elapsed > 0)
    remaining = (total - finished).clip(lower=0)
    eta = remaining / rate.where(rate > 0)
    out["eta_s"] = eta.where(out["status"] == "running")
    return out


def eta_text(seconds: float) -> str:
    if seconds is None or not np.isfinite(seconds):
        return ""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
