"""How well a model chooses, against the measured oracle.

For each problem the candidates are its measured pairs that the family's rules allow
(`applicable`); the model's choice is the candidate of least cost (ties to the catalogue's
order, as the Selector breaks them). Efficiency = oracle time / measured time of the choice,
where the oracle is the fastest `ok` candidate; a choice whose measurement failed scores 0.
Top-k efficiency measures the model's k best at run time and keeps the fastest. With a guard
(`safe` per row, `depth`), the model's `depth` best are reordered safe first
(farm.select.guard), as the Selector does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from farm.select.guard import reference_flags

TOP_K = (2, 4, 8)


@dataclass(frozen=True)
class Efficiency:
    """Choice quality over a set of problems (fractions in [0, 1])."""

    problems: int
    mean: float
    median: float
    p10: float
    min: float
    top1: float  # the choice is (one of) the fastest
    top5: float  # the fastest is among the model's five best
    top_k: dict[str, float]  # "2", "4", "8": mean efficiency of the best of the model's top k
    failed_choices: int  # choices whose measurement was not ok

    def record(self) -> dict:
        return asdict(self)

    def line(self) -> str:
        k = " ".join(f"top{n}-eff {v:.3f}" for n, v in self.top_k.items())
        return (f"{self.problems} problems: mean {self.mean:.3f} median {self.median:.3f} "
                f"P10 {self.p10:.3f} min {self.min:.3f} | top1 {self.top1:.3f} "
                f"top5 {self.top5:.3f} | {k} | failed choices {self.failed_choices}")


EMPTY = Efficiency(0, float("nan"), float("nan"), float("nan"), float("nan"), float("nan"),
                   float("nan"), {str(k): float("nan") for k in TOP_K}, 0)


def ranked(frame: pd.DataFrame, cost: np.ndarray, safe: np.ndarray | None = None,
           depth: int = 0) -> pd.DataFrame:
    """Applicable candidates of problems that have an oracle, best first per problem (the
    guard applied where `safe` is given), with `rank` and `eff` (oracle / time; 0 for a failed
    measurement). The oracle is the fastest applicable pair of the frame, whether the model
    knows it or not (a NaN cost: left out of the ranks only), so that two models with other
    candidates are scored against the same best."""
    f = frame.assign(cost=np.asarray(cost, dtype=np.float64),
                     safe=True if safe is None else np.asarray(safe, dtype=bool))
    f = f[f["applicable"].to_numpy(bool)]
    ok = f["status"].eq("ok").to_numpy()
    oracle = f[ok].groupby("problem")["median_us"].min()
    f = f[~np.isnan(f["cost"].to_numpy()) & f["problem"].isin(oracle.index).to_numpy()]
    f = f.sort_values(["problem", "cost", "candidate"], kind="stable")
    if safe is not None and depth > 1:
        order = f.groupby("problem").cumcount().to_numpy()
        reference = reference_flags(f["family"].tolist()) \
            if "family" in f else np.zeros(len(f), bool)
        plain = (~reference).astype(int)
        before = f.assign(_plain=plain).groupby("problem")["_plain"].cumsum().to_numpy() - plain
        # up to the depth-th candidate of a family not reference-speed; never a candidate the
        # model does not keep (infinite cost), which the Selector does not know
        head = (before < depth) & np.isfinite(f["cost"].to_numpy())
        # within the head: safe, then unsafe of other families, then reference families
        level = np.where(f["safe"].to_numpy(bool), 0, np.where(reference, 2, 1))
        f = f.assign(_head=np.where(head, 0, 1), _unsafe=np.where(head, level, 0), _order=order)
        f = f.sort_values(["problem", "_head", "_unsafe", "_order"], kind="stable").drop(
            columns=["_head", "_unsafe", "_order"])
    times = f["median_us"].to_numpy(np.float64)
    best = oracle.reindex(f["problem"]).to_numpy()
    good = f["status"].eq("ok").to_numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        eff = np.where(good, best / times, 0.0)
    return f.assign(rank=f.groupby("problem").cumcount().to_numpy(), eff=eff,
                    fastest=good & (times <= best))


def efficiency(frame: pd.DataFrame, cost: np.ndarray, safe: np.ndarray | None = None,
               depth: int = 0) -> Efficiency:
    """Efficiency of choosing by `cost` (lower is better), one row of `frame` per pair with
    columns problem, candidate, status, median_us, applicable; guarded where `safe` is given."""
    f = ranked(frame, cost, safe, depth)
    if f.empty:
        return EMPTY
    chosen = f[f["rank"] == 0]
    eff = chosen["eff"].to_numpy()
    by_problem = f.groupby("problem")
    top_k = {str(k): float(f[f["rank"] < k].groupby("problem")["eff"].max().mean())
             for k in TOP_K}
    top5 = f[f["rank"] < 5].groupby("problem")["fastest"].any()
    return Efficiency(problems=int(by_problem.ngroups), mean=float(eff.mean()),
                      median=float(np.median(eff)), p10=float(np.quantile(eff, 0.1)),
                      min=float(eff.min()), top1=float(chosen["fastest"].mean()),
                      top5=float(top5.mean()), top_k=top_k,
                      failed_choices=int((chosen["status"] != "ok").sum()))


def choices(frame: pd.DataFrame, cost: np.ndarray, safe: np.ndarray | None = None,
            depth: int = 0) -> pd.DataFrame:
    """The chosen row of each problem (for reports and tests)."""
    f = ranked(frame, cost, safe, depth)
    return f[f["rank"] == 0]

