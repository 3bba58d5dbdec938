"""The selection commands of `farm`: train, models list, models export, select (registered
by farm/cli.py through `register`)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from farm.console import DbOption, err, exits_on, out
from farm.store import DatabaseError, NotFound, open_store

models_app = typer.Typer(help="Trained selection models.", no_args_is_help=True)


def _errors() -> AbstractContextManager[None]:
    """A missing model, row or file (status 1), a shape or instance it cannot choose for
    (status 2)."""
    from farm.select.selector import SelectionError

    return exits_on((((DatabaseError, NotFound, LookupError, FileNotFoundError), 1),
                     ((SelectionError, ValueError), 2)))


def train(op: Annotated[Optional[str], typer.Option("--op", help="Operator (default: all)")] = None,
          arch: Annotated[Optional[str], typer.Option(help="Architecture (default: all)")] = None,
          dtype: Annotated[Optional[str], typer.Option(help="Element type (default: all)")] = None,
          holdout: Annotated[list[str], typer.Option(
              "--holdout-network", help="Networks held out (repeatable)")] = [],
          rounds: Annotated[Optional[int], typer.Option(
              help="Most boosting rounds (trees) (default: the operator's)")] = None,
          learning_rate: Annotated[Optional[float], typer.Option(
              help="Boosting learning rate (default: the operator's)")] = None,
          keep_within: Annotated[Optional[float], typer.Option(
              help="Keep the candidates within this fraction of the fastest on some training "
                   "problem (0.97: 3%; 0: all; default: the operator's)")] = None,
          candidates: Annotated[Optional[str], typer.Option(
              help="Which of those are kept: 'cover' (a greedy cover giving each training "
                   "problem --covers of them) or 'union' (every one) (default: the "
                   "operator's)")] = None,
          covers: Annotated[Optional[int], typer.Option(
              help="The cover's close candidates per training problem (default: the "
                   "operator's)")] = None,
          include_replay: Annotated[bool, typer.Option(help="Train on replayed rows too")] = False,
          resources: Annotated[bool, typer.Option(
              help="Registers/shared memory from the compile cache")] = True,
          networks_out: Annotated[bool, typer.Option(
              "--leave-networks-out",
              help="Also evaluate leave-one-network-out (one more training per network) and "
                   "store it with the model")] = False,
          holdout_spec: Annotated[Optional[Path], typer.Option(
              help="Hold out this sweep spec's shapes (at any batch size) instead of the "
                   "networks: e.g. generated shapes of another distribution")] = None,
          holdout_where: Annotated[Optional[str], typer.Option(
              help="Hold out a region of the shape space instead of the networks: a query over "
                   "the shape fields, e.g. 'R >= 5' (any batch size)")] = None,
          judge_recording: Annotated[Optional[Path], typer.Option(
              help="Judge the model on this recording's layers (e.g. the networks measured "
                   "with every family on one GPU): their geometries (any batch size) held out "
                   "instead of the networks, its four best candidates scored on the recording's "
                   "times and stored with the model")] = None,
          db: DbOption = None) -> None:
    """Train, evaluate and register a selection model per operator/arch/dtype."""
    from farm.choices import check_operator
    from farm.select.catalogue import compile_cache_resources, no_resources
    from farm.select.crossval import hold_out_shapes, leave_networks_out, region_shapes
    from farm.specs import load_spec
    from farm.select.data import SplitConfig, load_dataset
    from farm.select.judge import Judge, evaluation, open_judge, train_judged
    from farm.select.registry import register
    from farm.select.train import CANDIDATE_RULES, TrainConfig, summary
    from farm.select.train import train as fit
    from farm.store.queries import ModelQueries

    if judge_recording and (holdout_spec or holdout_where):
        raise typer.BadParameter("it holds out the recording's own geometries; not with "
                                 "--holdout-spec or --holdout-where",
                                 param_hint="--judge-recording")
    with _errors():
        if op is not None:
            check_operator(op)
        store = open_store(db)
        targets = [(o, a, d) for o, a, d, _ in ModelQueries(store).measured_targets(include_replay)
                   if (op or o) == o and (arch or a) == a and (dtype or d) == d]
        if not targets:
            raise LookupError("no measurements match; run a sweep first")
        split = SplitConfig(holdout_networks=tuple(holdout) or None)
        held_spec = load_spec(holdout_spec) if holdout_spec else None
        recording = open_judge(judge_recording) if judge_recording else None
        judges = {t: Judge.of(recording, t[0], t[2], t[1]) for t in targets} if recording else {}
        if candidates not in (None, *CANDIDATE_RULES):
            raise typer.BadParameter(f"one of {', '.join(CANDIDATE_RULES)}",
                                     param_hint="--candidates")
        config = TrainConfig(rounds=rounds, learning_rate=learning_rate, keep_within=keep_within,
                             candidates=candidates, covers=covers)
        for o, a, d in targets:
            lookup = compile_cache_resources(a) if resources else no_resources
            data = load_dataset(store, o, a, d, split, lookup, include_replay)
            evaluations = {}
            if networks_out:
                found = leave_networks_out(data, config)
                evaluations["leave_one_network_out"] = {
                    "pooled": found["pooled"], "folds": found["folds"],
                    "distinct_shapes": found["distinct_shapes"]}
            if held_spec is not None and held_spec.spec.operator == o:
                data = hold_out_shapes(data, {p.geometry() for p in held_spec.problems})
            elif holdout_where:
                data = hold_out_shapes(data, region_shapes(data, holdout_where))
            if judges:
                data, model, rows = train_judged(data, judges[o, a, d], config)
                evaluations["judged_recording"] = evaluation(judges[o, a, d], rows)
            else:
                model = fit(data, config)
            if held_spec is not None and held_spec.spec.operator == o:
                evaluations["held_out_spec"] = {"spec": held_spec.spec.name,
                                                **model.metrics["holdout"]}
            elif holdout_where:
                evaluations["held_out_region"] = {"where": holdout_where,
                                                  **model.metrics["holdout"]}
            if evaluations:
                model = replace(model, metrics={**model.metrics, "evaluations": evaluations})
            done = register(store, model, data)
            out.print(summary(model), highlight=False)
            out.print(f"  model {done.model.id} version {done.model.version}: "
                      f"{'promoted' if done.promoted else 'not promoted'} ({done.reason})",
                      highlight=False)


@models_app.command("list")
def models_list(op: Annotated[Optional[str], typer.Option("--op")] = None,
                arch: Annotated[Optional[str], typer.Option()] = None,
                dtype: Annotated[Optional[str], typer.Option()] = None,
                db: DbOption = None) -> None:
    """Registered models, newest first, with their holdout efficiency."""
    from farm.store.queries import ModelQueries

    with _errors():
        found = ModelQueries(open_store(db)).models(op, arch, dtype)
    if not found:
        out.print("no models yet: `farm train`")
        return
    table = Table("id", "operator", "arch", "dtype", "ver", "kind", "trees", "holdout mean",
                  "P10", "top1", "problems", "data", "promoted", "created")
    for m in found:
        h, w = m.metrics.get("holdout", {}), m.data_window
        table.add_row(str(m.id), m.operator, m.arch, m.dtype, str(m.version),
                      str(m.metrics.get("kind")), str(m.metrics.get("trees")),
                      f"{h.get('mean', float('nan')):.3f}", f"{h.get('p10', float('nan')):.3f}",
                      f"{h.get('top1', float('nan')):.3f}", str(w.get("problems")),
                      "SYNTHETIC" if w.get("synthetic") else "measured",
                      "yes" if m.promoted else "", m.created_at.strftime("%Y-%m-%d %H:%M"))
    out.print(table)


@models_app.command("export")
def models_export(model: Annotated[int, typer.Argument(help="Model id")],
                  to: Annotated[Path, typer.Option("--out", help="Bundle directory")],
                  cascade: Annotated[Optional[tuple[int, int]], typer.Option(
                      metavar="TREES KEEP",
                      help="C export: after the first TREES trees, sum the others only for "
                           "the KEEP best (faster; may choose otherwise, see "
                           "docs/BENCHMARKS.md)")] = None,
                  db: DbOption = None) -> None:
    """Write a model's bundle: LightGBM text model, feature spec, catalogue, metrics, README
    and the C export."""
    from farm.select.registry import export_model

    if cascade is not None and min(cascade) < 1:
        raise typer.BadParameter(f"{cascade}: TREES and KEEP must be at least 1",
                                 param_hint="--cascade")
    with _errors():
        path = export_model(open_store(db), model, to, cascade)
    err.print(f"wrote model {model} to {path}")


def _fields(text: str) -> dict[str, str]:
    fields = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        if not item.strip():
            continue
        if not eq or not name.strip():
            raise typer.BadParameter(f"{item!r}: expected FIELD=VALUE", param_hint="--problem")
        fields[name.strip()] = value.strip()
    return fields


def select(model: Annotated[Path, typer.Option("--model", help="Bundle directory")],
           problem: Annotated[list[str], typer.Option(
               help="The model's operator's shape fields: N=32,C=256,K=256,G=1,H=28,W=28,R=3,"
                    "S=3,... or N=8,C=320,H=64,W=64,G=32 (repeatable)")],
           arch: Annotated[Optional[str], typer.Option(help="Refuse if not the model's")] = None,
           verify: Annotated[int, typer.Option(
               "--verify", "--top", min=1,
               help="Print the model's K best (guarded, best first), for a runtime that "
                    "measures them once and caches the fastest")] = 1) -> None:
    """The instance a runtime should launch for each shape (with --verify K, the K to time)."""
    from farm.select.selector import Selector

    shapes = [_fields(p) for p in problem]
    with _errors():
        selector = Selector.load(model)
        for shape in shapes:
            print(" ".join(selector.top(shape, verify, arch)))


def register(app: typer.Typer) -> None:
    """Add the selection commands to the `farm` app."""
    app.command("train")(train)
    app.command("select")(select)
    app.add_typer(models_app, name="models")
