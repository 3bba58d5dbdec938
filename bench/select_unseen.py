"""Selection on layers no model trained on, judged by another recording's measurements.

For each operator (--ops): a model trained by `farm train`'s recipe (TrainConfig's defaults) on
the --train recordings, every problem whose geometry the judging recording holds (at any batch
size) held out of its training, is asked about each problem of --judge (e.g. the networks' layers
measured on the same GPU with every family) for its two best candidates; each choice is scored
against the fastest instance measured ok there. Reported per operator and per class of shape (the
operator's shape_class): mean, P10 and min efficiency of the first choice, top-1 (the fastest
chosen), top-2 efficiency (the faster of the two), the first choices' speed over cuDNN where the
judge measured it (geometric mean), and the problems whose fastest instance is of a family the
training recordings never measured. A choice the judge did not measure ok (an instance left out
of its sweep, or one that failed there) is counted apart and scored at the better of the two if
the other was measured, else left out of the figures; the count says how many.

Usage: python -m bench.select_unseen --train jobs/recordings/h200/h200-grouped.parquet
           jobs/recordings/h200/h200-stages.parquet
           --judge jobs/recordings/h200/h200-networks.parquet [--ops conv2d_fwd ...] [--name N]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from bench.common import write_result
from bench.select_eval import recorded_datasets
from farm.recording import Recording, read_recording, row_problem
from farm.select.catalogue import no_resources
from farm.select.crossval import hold_out_shapes
from farm.select.export import bundle_files
from farm.select.selector import Selector
from farm.select.train import TrainConfig, train
from farm.store.scope import VENDOR
from kernels.registry import operator_spec


def judged_problems(judge: Recording, op: str) -> tuple[dict, pd.DataFrame]:
    """The judge's problems of `op` by key, and its ok rows (problem key, instance, family,
    median_us)."""
    frame = judge.frame[judge.frame["operator"] == op]
    problems = {row["problem_key"]: row_problem(row)
                for row in frame.drop_duplicates("problem_key").to_dict("records")}
    ok = frame[frame["status"] == "ok"][["problem_key", "instance", "family", "median_us"]]
    return problems, ok


def summary(rows: pd.DataFrame) -> dict:
    scored = rows.dropna(subset=["efficiency"])
    eff = scored["efficiency"].to_numpy()
    if not len(eff):
        return {"problems": int(len(rows)), "scored": 0}
    vendor = scored.dropna(subset=["over_vendor"])["over_vendor"].to_numpy()
    return {"problems": int(len(rows)), "scored": int(len(eff)),
            "mean": float(eff.mean()), "p10": float(np.percentile(eff, 10)),
            "min": float(eff.min()), "top1": float((eff >= 1.0 - 1e-9).mean()),
            "top2": float(scored["top2"].mean()),
            "under_0_70": int((eff < 0.70).sum()),
            "first_not_measured": int(rows["first_unmeasured"].sum()),
            "oracle_family_untrained": int(rows["oracle_untrained"].sum()),
            "over_vendor_geomean": float(np.exp(np.log(vendor).mean())) if len(vendor) else None}


def judge_model(op: str, model, problems: dict, ok: pd.DataFrame, trained: set[str]
                ) -> pd.DataFrame:
    selector = Selector(bundle_files(model), "lightgbm")
    spec = operator_spec(op)
    ours = ok[ok["family"] != VENDOR]
    times = {(k, i): t for k, i, t in ours[["problem_key", "instance", "median_us"]]
             .itertuples(index=False)}
    best = ours.loc[ours.groupby("problem_key")["median_us"].idxmin()].set_index("problem_key")
    vendor = ok[ok["family"] == VENDOR].groupby("problem_key")["median_us"].min()
    out = []
    for key, problem in problems.items():
        if key not in best.index:
            continue
        picks = selector.top(problem, 2)
        found = [times.get((key, name)) for name in picks]
        fastest = float(best.loc[key, "median_us"])
        measured = [t for t in found if t is not None]
        first = found[0]
        scored = first if first is not None else (min(measured) if measured else None)
        out.append({"problem": key, "class": spec.shape_class(problem), "choice": picks[0],
                    "oracle": best.loc[key, "instance"],
                    "oracle_family": best.loc[key, "family"],
                    "efficiency": fastest / scored if scored else np.nan,
                    "top2": fastest / min(measured) if measured else np.nan,
                    "first_unmeasured": first is None,
                    "oracle_untrained": best.loc[key, "family"] not in trained,
                    "over_vendor": (float(vendor[key]) / scored
                                    if scored and key in vendor.index else np.nan)})
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=Path, nargs="+", required=True)
    parser.add_argument("--judge", type=Path, required=True)
    parser.add_argument("--ops", nargs="+",
                        default=["conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight"])
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--name", default="select_unseen")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    judge = read_recording(args.judge)
    figures = {"train": [str(p) for p in args.train], "judge": str(args.judge),
               "judge_gpu": judge.environment.get("gpu_name"), "operators": {}}
    with tempfile.TemporaryDirectory() as tmp:
        datasets = recorded_datasets(args.train, args.ops, args.arch, args.dtype, no_resources,
                                     Path(tmp))
        for op, data in zip(args.ops, datasets):
            problems, ok = judged_problems(judge, op)
            fields = list(operator_spec(op).fields)
            shapes = {tuple(int(getattr(p, f)) for f in fields) for p in problems.values()}
            data = hold_out_shapes(data, shapes)
            start = time.perf_counter()
            model = train(data, TrainConfig())
            train_seconds = time.perf_counter() - start
            trained = set(data.frame["family"])
            rows = judge_model(op, model, problems, ok, trained)
            result = {"training_problems": int(data.part("train")["problem"].nunique()),
                      "validation_problems": int(data.part("validation")["problem"].nunique()),
                      "held_out_of_training": int(data.part("holdout")["problem"].nunique()),
                      "candidates": len(model.catalogue), "kind": model.kind,
                      "train_seconds": round(train_seconds, 1),
                      "families_trained": sorted(trained), "all": summary(rows),
                      "classes": {c: summary(g) for c, g in rows.groupby("class")},
                      "worst": rows.sort_values("efficiency").head(8)
                      .drop(columns=["first_unmeasured"]).to_dict("records")}
            figures["operators"][op] = result
            a = result["all"]
            print(f"{op}: {a['problems']} problems, mean {a.get('mean', 0):.3f} P10 "
                  f"{a.get('p10', 0):.3f} min {a.get('min', 0):.3f} top-1 {a.get('top1', 0):.2f} "
                  f"top-2 {a.get('top2', 0):.3f}; over cuDNN {a.get('over_vendor_geomean')}; "
                  f"oracle of an untrained family on {a.get('oracle_family_untrained')}, "
                  f"first choice unmeasured on {a.get('first_not_measured')}", flush=True)
            for c, s in result["classes"].items():
                print(f"   {c}: {s}", flush=True)
    device = {"name": "CPU (selection); judged by the recording of "
                      f"{figures['judge_gpu']}"}
    print(f"wrote {write_result(args.name, device, figures, args.out)}")


if __name__ == "__main__":
    main()
