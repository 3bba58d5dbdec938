"""A model judged on layers it never trained on, by another recording's measurements.

A judging recording (e.g. the networks' layers measured on one GPU with every family) holds
problems of an operator and dtype (Judge). Every training problem of one of its geometries (at
any batch size) is held out of training (train_judged); the model is then asked for its four
best candidates on each of the judge's problems, and each choice is scored against the fastest
instance of the farm's families the judge measured ok there (judged_choices). The figures
(Figures, per class of shape by the operator's shape_class): mean, P10 and min efficiency of
the first choice, top-1 (the first choice is the fastest), top-2 and top-4 efficiency (the
fastest of the model's best two or four, for a runtime that measures them once), the count
under 0.70, the first choices' speed over the vendor library where the judge measured it
(geometric mean), and the problems whose fastest instance is of a family the training data
never measured. A choice the judge did not measure ok is counted apart
(first_not_measured) and scored at the other where that one was measured, else left out of
the figures (`scored` counts those kept).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from farm.problems import Problem
from farm.recording import Recording, RecordingError, read_recording, row_problem
from farm.select.crossval import hold_out_shapes
from farm.select.data import Dataset
from farm.select.export import bundle_files
from farm.select.selector import Selector
from farm.select.train import TrainConfig, TrainedModel, train
from farm.store.scope import VENDOR
from kernels.registry import operator_spec

UNDER = 0.70  # a choice this far from the fastest is counted apart
COLUMNS = ("problem", "class", "choice", "oracle", "oracle_family", "efficiency", "top2",
           "top4", "first_unmeasured", "oracle_untrained", "over_vendor")


class JudgeError(LookupError):
    """A recording that cannot judge a model (missing, unreadable, of another architecture, or
    with no time of the operator and dtype); the message says why."""


@dataclass(frozen=True)
class Judge:
    """One operator and dtype of a judging recording: its problems by key and its ok rows
    (problem_key, instance, family, median_us; the vendor's included)."""

    recording: str  # the file's name
    gpu: str
    problems: dict[str, Problem]
    ok: pd.DataFrame

    @classmethod
    def of(cls, recording: Recording, operator: str, dtype: str,
           arch: str | None = None) -> Judge:
        """The judge of `operator` `dtype` in `recording`; JudgeError where it was measured on
        another architecture than `arch` or has no ok time of the farm's families there."""
        name, gpu = recording.path.name, str(recording.environment.get("gpu_name", "?"))
        if arch is not None and recording.arch != arch:
            raise JudgeError(f"{name} was measured on {gpu} ({recording.arch}), not on {arch}")
        frame = recording.frame
        mine = frame[(frame["operator"] == operator) & (frame["dtype"] == dtype)]
        ok = mine[mine["status"] == "ok"][["problem_key", "instance", "family", "median_us"]]
        if not (ok["family"] != VENDOR).any():
            held = sorted({f"{o} {d}" for o, d in zip(frame["operator"], frame["dtype"])})
            raise JudgeError(f"{name} ({gpu}) has no ok time of {operator} {dtype} to judge by "
                             f"(it holds {', '.join(held) or 'no rows'})")
        problems = {row["problem_key"]: row_problem(row)
                    for row in mine.drop_duplicates("problem_key").to_dict("records")}
        return cls(name, gpu, problems, ok)

    def geometries(self) -> set[tuple[int, ...]]:
        return {p.geometry() for p in self.problems.values()}


def open_judge(path: Path) -> Recording:
    """The judging recording; JudgeError where it is missing or not one."""
    try:
        return read_recording(path)
    except (RecordingError, OSError) as exc:
        raise JudgeError(f"judging recording: {exc}") from None


@dataclass(frozen=True)
class Figures:
    """The judged choices of a set of problems (efficiency: fastest time / chosen time); the
    figures are None where no choice was scored."""

    problems: int
    scored: int
    mean: float | None = None
    p10: float | None = None
    min: float | None = None
    top1: float | None = None
    top2: float | None = None
    top4: float | None = None
    under_0_70: int | None = None
    first_not_measured: int | None = None
    oracle_family_untrained: int | None = None
    over_vendor_geomean: float | None = None

    @classmethod
    def of(cls, rows: pd.DataFrame) -> Figures:
        """The figures of judged_choices rows."""
        scored = rows.dropna(subset=["efficiency"])
        eff = scored["efficiency"].to_numpy(np.float64)
        if not len(eff):
            return cls(int(len(rows)), 0)
        vendor = scored["over_vendor"].dropna().to_numpy(np.float64)
        return cls(int(len(rows)), int(len(eff)), mean=float(eff.mean()),
                   p10=float(np.percentile(eff, 10)), min=float(eff.min()),
                   top1=float((eff >= 1.0 - 1e-9).mean()), top2=float(scored["top2"].mean()),
                   top4=float(scored["top4"].mean()),
                   under_0_70=int((eff < UNDER).sum()),
                   first_not_measured=int(rows["first_unmeasured"].sum()),
                   oracle_family_untrained=int(rows["oracle_untrained"].sum()),
                   over_vendor_geomean=float(np.exp(np.log(vendor).mean()))
                   if len(vendor) else None)

    def record(self) -> dict:
        """As the other stored evaluations keep their figures: top-k under top_k["k"]."""
        found = asdict(self)
        return {**{k: v for k, v in found.items() if k not in ("top2", "top4")},
                "top_k": {"2": self.top2, "4": self.top4}}


def judged_choices(model: TrainedModel, judge: Judge, trained: set[str],
                   cascade: tuple[int, int] | None = None) -> pd.DataFrame:
    """One row per judged problem (one with an ok time of the farm's families; columns
    COLUMNS): the model's first choice, the fastest instance and its family, the efficiency of
    the first choice and of the fastest of the two and of the four best, and the vendor's time
    over the chosen one. `trained`: the families of the training data; `cascade` (trees,
    keep): the choices of the C export generated with that cascade (Selector.cascade_top)."""
    selector = Selector(bundle_files(model), "lightgbm")
    spec = operator_spec(model.operator)
    ok = judge.ok
    ours = ok[ok["family"] != VENDOR]
    times = {(k, i): t for k, i, t in ours[["problem_key", "instance", "median_us"]]
             .itertuples(index=False)}
    best = ours.loc[ours.groupby("problem_key")["median_us"].idxmin()].set_index("problem_key")
    vendor = ok[ok["family"] == VENDOR].groupby("problem_key")["median_us"].min()
    out = []
    for key, problem in judge.problems.items():
        if key not in best.index:
            continue
        picks = (selector.top(problem, 4) if cascade is None
                 else selector.cascade_top(problem, 4, *cascade))
        found = [times.get((key, name)) for name in picks]
        fastest = float(best.loc[key, "median_us"])
        measured = [t for t in found[:2] if t is not None]
        four = [t for t in found if t is not None]
        first = found[0]
        scored = first if first is not None else (min(measured) if measured else None)
        out.append({"problem": key, "class": spec.shape_class(problem), "choice": picks[0],
                    "oracle": best.loc[key, "instance"],
                    "oracle_family": best.loc[key, "family"],
                    "efficiency": fastest / scored if scored else np.nan,
                    "top2": fastest / min(measured) if measured else np.nan,
                    "top4": fastest / min(four) if four else np.nan,
                    "first_unmeasured": first is None,
                    "oracle_untrained": best.loc[key, "family"] not in trained,
                    "over_vendor": (float(vendor[key]) / scored
                                    if scored and key in vendor.index else np.nan)})
    return pd.DataFrame(out, columns=list(COLUMNS))


def train_judged(data: Dataset, judge: Judge, config: TrainConfig = TrainConfig()
                 ) -> tuple[Dataset, TrainedModel, pd.DataFrame]:
    """The dataset with the judge's geometries held out (any batch size), the model trained on
    it and its judged_choices."""
    data = hold_out_shapes(data, judge.geometries())
    model = train(data, config)
    return data, model, judged_choices(model, judge, set(data.frame["family"]))


def figures(rows: pd.DataFrame) -> tuple[Figures, dict[str, Figures]]:
    """The figures of all judged problems and of each class of shape."""
    return Figures.of(rows), {c: Figures.of(g) for c, g in rows.groupby("class")}


def evaluation(judge: Judge, rows: pd.DataFrame) -> dict:
    """The judgement as stored with a model (metrics["evaluations"]["judged_recording"])."""
    pooled, classes = figures(rows)
    return {"recording": judge.recording, "gpu": judge.gpu, "pooled": pooled.record(),
            "classes": {c: f.record() for c, f in classes.items()}}


def line(stored: dict) -> str:
    """One line of stored figures (Figures.record())."""
    if not stored.get("scored"):
        return f"{stored.get('problems', 0)} problems, none scored"
    vendor = stored.get("over_vendor_geomean")
    four = stored["top_k"].get("4")  # figures stored before top-4 was judged lack it
    top4 = f" top4-eff {four:.3f}" if four is not None else ""
    return (f"{stored['problems']} problems: mean {stored['mean']:.3f} P10 {stored['p10']:.3f} "
            f"min {stored['min']:.3f} | top1 {stored['top1']:.3f} top2-eff "
            f"{stored['top_k']['2']:.3f}{top4} | under {UNDER:.2f}: {stored['under_0_70']} | "
            "over the vendor " + (f"x{vendor:.3f}" if vendor is not None else "n/a"))
