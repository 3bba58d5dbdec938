"""Selection on layers no model trained on, judged by another recording's measurements.

For each operator (--ops): a model trained by `farm train`'s recipe (TrainConfig's defaults) on
the --train recordings, judged on --judge (e.g. the networks' layers measured on the same GPU
with every family) as farm.select.judge does: every problem whose geometry the judge holds (at
any batch size) held out of training, the model's four best candidates on each of the judge's
problems scored against the fastest instance measured there. Reported per operator and per
class of shape (the operator's shape_class): mean, P10 and min efficiency of the first choice,
top-1, top-2 and top-4 efficiency, the count under 0.70, the first choices' speed over the
vendor library (cuDNN for convolutions) where the judge measured it, the problems whose fastest
instance is of a family the training recordings never measured, the first choices the judge did
not measure (farm.select.judge.Figures), and the worst choices. Beside them, the model's
efficiency on its validation problems (drawn from the training sets: no tree fits them, they
only stop the boosting and pick the model's kind), the figure to choose a change to the recipe
by; the judge's must not choose it. `farm train --judge-recording` stores the same figures with
a model.

Usage: python -m bench.select_unseen --train jobs/recordings/h200/h200-grouped.parquet
           jobs/recordings/h200/h200-stages.parquet
           --judge jobs/recordings/h200/h200-networks.parquet [--ops conv2d_fwd ...] [--name N]
           [--set rounds=200 learning_rate=0.1] [--cascade TREES KEEP ...]
"""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import asdict, fields, replace
from pathlib import Path

from bench.common import write_result
from bench.select_eval import recorded_datasets
from farm.select.catalogue import no_resources
from farm.select.evaluate import Efficiency
from farm.select.judge import (Figures, Judge, JudgeError, figures, judged_choices, line,
                               open_judge, train_judged)
from farm.select.train import TrainConfig


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
    parser.add_argument("--cascade", type=int, nargs=2, action="append", default=[],
                        metavar=("TREES", "KEEP"),
                        help="also judge the choices of the C export generated with this "
                             "cascade (repeatable)")
    parser.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE",
                        help="TrainConfig fields other than the defaults (rounds=200 ...)")
    args = parser.parse_args()
    config = train_config(args.set)
    try:
        judge = open_judge(args.judge)
        judges = [Judge.of(judge, op, args.dtype, args.arch) for op in args.ops]
    except JudgeError as exc:
        raise SystemExit(str(exc)) from None
    figures_out = {"train": [str(p) for p in args.train], "judge": str(args.judge),
                   "config": asdict(config),
                   "judge_gpu": judge.environment.get("gpu_name"), "operators": {}}
    with tempfile.TemporaryDirectory() as tmp:
        datasets = recorded_datasets(args.train, args.ops, args.arch, args.dtype, no_resources,
                                     Path(tmp))
        for op, data, judged in zip(args.ops, datasets, judges):
            data, model, rows = train_judged(data, judged, config)
            pooled, classes = figures(rows)
            result = {"training_problems": int(data.part("train")["problem"].nunique()),
                      "validation_problems": int(data.part("validation")["problem"].nunique()),
                      "held_out_of_training": int(data.part("holdout")["problem"].nunique()),
                      "candidates": len(model.catalogue), "kind": model.kind,
                      "train_seconds": round(model.metrics["training_seconds"], 1),
                      "validation": model.metrics["validation"],
                      "families_trained": sorted(set(data.frame["family"])),
                      "all": asdict(pooled),
                      "classes": {c: asdict(f) for c, f in classes.items()},
                      "worst": rows.sort_values("efficiency").head(8)
                      .drop(columns=["first_unmeasured"]).to_dict("records")}
            for trees, keep in args.cascade:  # the same model's choices through a cascade
                cut = judged_choices(model, judged, set(data.frame["family"]), (trees, keep))
                result.setdefault("cascades", {})[f"{trees}/{keep}"] = {
                    "all": asdict(figures(cut)[0]),
                    "same_choices": int((cut["choice"] == rows["choice"]).sum())}
            figures_out["operators"][op] = result
            print(f"{op}: {line(pooled.record())}; oracle of an untrained family on "
                  f"{pooled.oracle_family_untrained}, first choice unmeasured on "
                  f"{pooled.first_not_measured}", flush=True)
            print(f"   the training sets' validation problems: "
                  f"{Efficiency(**model.metrics['validation']).line()}", flush=True)
            for c, f in classes.items():
                print(f"   {c}: {line(f.record())}", flush=True)
            for name, cut in result.get("cascades", {}).items():
                print(f"   cascade {name}: {line(Figures(**cut['all']).record())}; the same "
                      f"choice on {cut['same_choices']} of {len(rows)}", flush=True)
    device = {"name": "CPU (selection); judged by the recording of "
                      f"{figures_out['judge_gpu']}"}
    print(f"wrote {write_result(args.name, device, figures_out, args.out)}")


def train_config(settings: list[str]) -> TrainConfig:
    """TrainConfig's defaults with FIELD=VALUE settings: a number, true or false, a list (a,b)
    or a word."""
    changes: dict[str, object] = {}
    for setting in settings:
        name, _, text = setting.partition("=")
        if name not in {f.name for f in fields(TrainConfig)} or not text:
            raise SystemExit(f"--set {setting}: not FIELD=VALUE of a TrainConfig field")
        changes[name] = setting_value(text)
    return replace(TrainConfig(), **changes)


def setting_value(text: str) -> object:
    if "," in text:
        return tuple(setting_value(t) for t in text.split(",") if t)
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


if __name__ == "__main__":
    main()
