"""Selection latency, side by side: the C export of this checkout against the C export that an
earlier revision's generator writes for the same model, and the Python Selector over each, one
shape per call on one core.

For each operator (--ops) of the recordings: one model (the default split and training
settings, or --rounds / --learning-rate / --keep-within), its C export built by this checkout
(with --pruned also one generated with pruning) and, with --baseline-rev REV, by
farm/select/cexport.py as it was at REV (git show; given the guard depth and the text fields
where its c_source takes them); each runs in one driver process, alternately
(--rounds-of-timing times), over the same shapes (the held-out problems, then generated ones)
and the same `allowed` masks; this checkout's export also with every candidate allowed (the
evaluation that the Python Selector pays for: it has no applicability mask and costs every
candidate before checking the families' rules lazily). Reports the median over the runs of
each p50 and p99 (microseconds per `best` call), how many shapes each other export given the
same masks chooses as this checkout's does, the Python Selector's latency over this
checkout's export, over the same export costing every candidate (no compiled-case mask) and
over the baseline's (alternating rounds, medians), and how many of its choices match this
checkout's C export. With --baseline-rev, the Python Selector as it was at REV
(farm/select/selector.py, git show) is timed in the same rounds over this checkout's export, and
its choices compared. The Selector keeps the rules' answer per rule key (farm.select.rulekeys),
so after the first round it meets no shape it has not seen: its first-sight latency (a fresh
Selector, each shape once, in order) and how many masks the shapes needed are reported too.
With --other-candidates RULE, a second model of the same data whose
candidates another rule keeps (farm.select.train.kept_candidates) is timed in the same rounds,
C and Python. Each model's anatomy: the allowed candidates per shape, its trees, and the
interactions computed and tested per candidate. Every model is trained before any timing
(training uses every core allowed); with --core N each timing runs on core N alone. Writes
bench/results/select_latency.json (--name, --out) after each operator.

Usage: python -m bench.select_latency --recording jobs/recordings/h100-*.parquet
           [--ops conv2d_fwd ...] [--baseline-rev 9ab08c5 [--baseline-file cexport.py]]
           [--pruned]
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from bench.common import recording_parser, write_cpu_result
from bench.select_eval import latency, query_shapes
from farm.select.catalogue import compile_cache_resources, no_resources
from farm.select.cdriver import run_driver
from farm.select.cexport import c_source, symbol_prefix
from farm.select.data import load_dataset
from farm.select.export import C_FILE, MODEL, bundle_files, c_files, parse
from farm.select.selector import Selector
from farm.select.train import CANDIDATE_RULES, TrainConfig, train
from farm.store import open_store
from kernels.registry import operator_spec

ROOT = Path(__file__).resolve().parents[1]
CURRENT = "this checkout"
PRUNED = "this checkout, pruned"
EVERY = "this checkout, every candidate allowed"
OTHER = "this checkout, the other candidate rule's model"
NOTE = "one shape per call on one core; no GPU involved"


def module_at(rev: str, path: str, folder: Path, text: str | None = None):
    """The module `path` (of this checkout) as it was at `rev` (or `text`, its source, where
    the checkout has no history), imported as a module of its own."""
    if text is None:
        text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{path}"],
                              check=True, capture_output=True, text=True).stdout
    name = f"{Path(path).stem}_{rev}"
    (folder / f"{name}.py").write_text(text)
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def generator_at(rev: str, folder: Path, text: str | None = None):
    """farm/select/cexport.py as it was at `rev` (or `text`)."""
    return module_at(rev, "farm/select/cexport.py", folder, text)


def selector_at(rev: str, folder: Path):
    """farm/select/selector.py as it was at `rev` (the rest of farm.select is this
    checkout's)."""
    return module_at(rev, "farm/select/selector.py", folder)


def first_sight(selector: Selector, shapes) -> dict:
    """p50 / p99 of each shape's first call to a fresh Selector, in order, and how many masks
    the rule keys needed."""
    times = []
    for shape in shapes:
        start = time.perf_counter()
        selector.select(shape)
        times.append(time.perf_counter() - start)
    return {"p50_us": float(np.percentile(times, 50) * 1e6),
            "p99_us": float(np.percentile(times, 99) * 1e6), "calls": len(times),
            "masks": len(selector._masks.masks),
            "exact_masks": sum(m.exact for m in selector._masks.masks.values())}


def export_with(generate, files: dict[str, str], note: str, **options) -> str:
    """The C export of a bundle's core files by `generate` (a c_source), with the guard depth
    and text fields where it takes them and `options`."""
    spec, catalogue, info = parse(files)
    prefix = symbol_prefix(info["operator"], info["arch"], info["dtype"])
    given = {"guard_depth": int(info.get("train_config", {}).get("guard_depth", 0)),
             "text_fields": tuple(operator_spec(info["operator"]).problem_type.TEXT_FIELDS),
             **options}
    accepted = inspect.signature(generate).parameters
    return generate(spec, catalogue, files[MODEL], info["kind"], prefix, note,
                    **{k: v for k, v in given.items() if k in accepted})


def anatomy(source: str, masks: list) -> dict:
    """What a `best` call of an export evaluates: the allowed candidates per shape (median over
    `masks`), its trees, and per evaluated candidate the interaction values it computes (NX)
    and the splits on them it tests (KEEP terms of the blocks; a tree written as branches,
    `branchy`, tests its path only)."""
    blocks = re.findall(r"static void block\d+\(.*?\n}\n", source, re.S)
    return {"allowed_median": float(np.median([sum(m) for m in masks])),
            "trees": int(re.search(r"LightGBM \w+, (\d+) trees", source).group(1)),
            "interactions": int(re.search(r"#define NX (\d+)", source).group(1)),
            "interaction_tests": sum(b.count("KEEP(") for b in blocks),
            "branchy_trees": source.count("/* tree ")}


def agreement(picks: dict[str, list[int]]) -> dict[str, str]:
    """How many shapes each other export, given the same masks, chooses as this checkout's
    does."""
    mine = picks[CURRENT]
    return {name: f"{sum(x == y for x, y in zip(mine, chosen))}/{len(mine)}"
            for name, chosen in picks.items() if name not in (CURRENT, EVERY, OTHER)}


def held_out_efficiency(data, model, shapes, picks: dict[str, list[int]]) -> dict:
    """Per export, the measured efficiency (the problem's fastest applicable ok time over the
    chosen candidate's; 0 if its measurement failed) of its picks on the query shapes that are
    held-out problems of the recordings: mean, P10, min and how many shapes."""
    spec = operator_spec(data.operator)
    held = data.part("holdout")
    held = held[held["applicable"].to_numpy(bool)]
    names = {e.name: i for i, e in enumerate(data.catalogue)}
    by_key = {}
    for _, rows in held.groupby("problem"):
        shape = rows.iloc[0][list(spec.fields)].to_dict()
        ok = rows[rows["status"].eq("ok")]
        if len(ok):
            by_key[spec.problem(data.dtype, shape).key] = (
                ok["median_us"].min(), dict(zip(rows["candidate"], zip(rows["status"],
                                                                      rows["median_us"]))))
    out = {}
    for name, chosen in picks.items():
        eff = []
        for p, c in zip(shapes, chosen):
            if p.key not in by_key or c < 0:
                continue
            oracle, measured = by_key[p.key]
            status, time_us = measured.get(names.get(model.catalogue[c].name), ("none", 0.0))
            eff.append(oracle / time_us if status == "ok" else 0.0)
        if eff:
            out[name] = {"shapes": len(eff), "mean": float(np.mean(eff)),
                         "p10": float(np.quantile(eff, 0.1)), "min": float(np.min(eff))}
    return out


def cascade_name(trees: int, keep: int) -> str:
    return f"this checkout, cascade {trees} {keep}"


def time_exports(sources: dict[str, str], prefix: str, shapes, masks: dict[str, list],
                 folder: Path, runs: int) -> dict:
    """Each export's p50 / p99 per call (median over `runs` alternating runs) and picks;
    `masks`: each export's `allowed` mask per shape."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sources}
    picks = {}
    for _ in range(runs):
        for name, source in sources.items():
            chosen, timing = run_driver(source, prefix, shapes, masks[name], folder / name,
                                        repeats=3, strict=name.startswith(CURRENT))
            picks[name] = chosen
            times[name].append(timing)
    return {name: {"p50_us": float(np.median([t[0] for t in ts])),
                   "p99_us": float(np.median([t[1] for t in ts])), "runs": runs}
            for name, ts in times.items()}, picks


def main() -> None:
    parser = recording_parser(__doc__)
    parser.add_argument("--baseline-rev", default=None, metavar="REV",
                        help="also time the C export that REV's generator writes")
    parser.add_argument("--baseline-file", type=Path, default=None, metavar="PY",
                        help="REV's farm/select/cexport.py, saved (a copy without git history)")
    parser.add_argument("--pruned", action="store_true",
                        help="also time this checkout's export generated with pruning")
    parser.add_argument("--cascade", type=int, nargs=2, action="append", default=[],
                        metavar=("TREES", "KEEP"),
                        help="also time this checkout's export with a cascade: after TREES "
                             "trees only the KEEP best go on (repeatable)")
    parser.add_argument("--rounds", type=int, default=None, help="default: the operator's")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="default: the operator's")
    parser.add_argument("--keep-within", type=float, default=None)
    parser.add_argument("--candidates", choices=CANDIDATE_RULES, default=None)
    parser.add_argument("--covers", type=int, default=None)
    parser.add_argument("--other-candidates", choices=CANDIDATE_RULES, default=None,
                        metavar="RULE", help="also time a model of this candidate rule, in the "
                                             "same alternating rounds")
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--no-resources", action="store_true",
                        help="no registers or shared memory from the compile cache")
    parser.add_argument("--rounds-of-timing", type=int, default=3)
    parser.add_argument("--core", type=int, default=None,
                        help="time on this core alone (training uses every core allowed)")
    parser.add_argument("--name", default="select_latency")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    config = TrainConfig(rounds=args.rounds, learning_rate=args.learning_rate,
                         keep_within=args.keep_within, candidates=args.candidates,
                         covers=args.covers)
    figures: dict = {"operators": {}, "baseline_rev": args.baseline_rev, "core": args.core}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        old = (generator_at(args.baseline_rev, folder, args.baseline_file.read_text()
                            if args.baseline_file else None) if args.baseline_rev else None)
        old_selector = (selector_at(args.baseline_rev, folder)
                        if args.baseline_rev and not args.baseline_file else None)
        resources = no_resources if args.no_resources else compile_cache_resources(args.arch)
        store = open_store(f"sqlite:///{folder / 'recording.db'}")
        from farm.recording import import_recording
        for path in args.recording:
            import_recording(store, path)
        trained = {}  # every model first, so that no training runs beside a timing
        for op in args.ops:
            start = time.perf_counter()
            data = load_dataset(store, op, args.arch, args.dtype, resources=resources)
            trained[op] = data, train(data, config), (
                train(data, replace(config, candidates=args.other_candidates))
                if args.other_candidates else None)
            print(f"{op}: trained in {time.perf_counter() - start:.0f} s", flush=True)
        if args.core is not None:  # the timings (and their drivers) on one core from here on
            os.sched_setaffinity(0, {args.core})
        for op, (data, model, other_model) in trained.items():
            files = bundle_files(model)
            files[C_FILE] = c_files(files)[C_FILE]
            prefix = symbol_prefix(model.operator, model.arch, model.dtype)
            sources = {CURRENT: files[C_FILE]}
            if args.pruned:
                sources[PRUNED] = export_with(c_source, files, PRUNED, prune=True)
            for trees, keep in args.cascade:
                name = cascade_name(trees, keep)
                sources[name] = export_with(c_source, files, name, cascade=(trees, keep))
            baseline = f"at {args.baseline_rev}"
            if old is not None:
                sources[baseline] = export_with(old.c_source, files, "baseline")
            shapes = query_shapes(data, args.shapes)
            fresh = first_sight(Selector(files, "c"), shapes)
            selector = Selector(files, "c")
            masks = [selector.allowed(p) for p in shapes]
            sources[EVERY] = files[C_FILE]
            given = {name: masks for name in sources}
            given[EVERY] = [[True] * len(model.catalogue)] * len(shapes)
            other = None
            if args.other_candidates:  # the same operator's model of another candidate rule
                other_files = bundle_files(other_model)
                other_files[C_FILE] = sources[OTHER] = c_files(other_files)[C_FILE]
                other = Selector(other_files, "c")
                given[OTHER] = [other.allowed(p) for p in shapes]
            numbers = [p.number_values() for p in shapes]
            timed, picks = time_exports(sources, prefix, numbers, given, folder / op,
                                        args.rounds_of_timing)
            # the Python Selector over this checkout's export, over the same export costing
            # every candidate (no mask, no ranking in C), over the baseline's, and the
            # baseline's Selector over this checkout's export, in alternating rounds
            every = Selector(files, "c")
            every._costs_of_c = every._rank_c = None
            pythons = {"python_selector": selector.select,
                       "python_selector_every_candidate": every.select}
            if old_selector is not None:
                earlier = old_selector.Selector(files, "c")
                pythons["python_selector_at_baseline"] = earlier.select
            if other is not None:
                pythons["python_selector_other_candidates"] = other.select
            if old is not None:
                pythons["python_selector_baseline"] = Selector(
                    {**files, C_FILE: sources[baseline]}, "c").select
            rounds = {name: [] for name in pythons}
            for _ in range(args.rounds_of_timing):
                for name, select in pythons.items():
                    rounds[name].append(latency(select, shapes))
            medians = {name: {**{q: float(np.median([r[q] for r in runs]))
                                 for q in ("p50_us", "p99_us")},
                              "p50_us_rounds": [round(r["p50_us"], 2) for r in runs]}
                       for name, runs in rounds.items()}
            python = medians["python_selector"]
            agree = agreement(picks)
            python_agree = sum(c >= 0 and selector.names[c] == s for c, s in
                               zip(picks[CURRENT], selector.select_many(shapes)))
            entry = {"candidates": len(model.catalogue), "trees": model.metrics["trees"],
                     "kind": model.kind, "config": model.config, "c_export": timed, **medians,
                     "anatomy": anatomy(files[C_FILE], masks),
                     "same_choice": agree.get(baseline),
                     "python_same_choice": f"{python_agree}/{len(shapes)}",
                     "python_every_candidate_same_choice": sum(
                         every.select(p) == selector.select(p) for p in shapes),
                     "python_selector_first_sight": fresh}
            if old_selector is not None:
                entry["python_same_choice_as_baseline_selector"] = sum(
                    earlier.select(p) == selector.select(p) for p in shapes)
            if args.pruned:
                entry["same_choice_pruned"] = agree[PRUNED]
            for trees, keep in args.cascade:
                entry[f"same_choice_cascade_{trees}_{keep}"] = agree[cascade_name(trees, keep)]
            entry["held_out_efficiency"] = held_out_efficiency(
                data, model, shapes, {n: c for n, c in picks.items() if n != EVERY})
            if other is not None:
                entry["other_candidates"] = {
                    "rule": args.other_candidates, "candidates": len(other.catalogue),
                    "trees": other_model.metrics["trees"], "kind": other_model.kind,
                    "anatomy": anatomy(sources[OTHER], given[OTHER])}
            figures["operators"][op] = entry
            line = " | ".join(f"{n} p50 {t['p50_us']:.1f} us p99 {t['p99_us']:.1f} us"
                              for n, t in timed.items())
            before = entry.get("python_selector_baseline")
            print(f"{op}: {len(model.catalogue)} candidates, {model.metrics['trees']} trees: "
                  f"C {line} | Python Selector p50 {python['p50_us']:.1f} us, every candidate "
                  f"costed {medians['python_selector_every_candidate']['p50_us']:.1f} us"
                  + (f" (baseline export {before['p50_us']:.1f} us)" if before else "")
                  + (f" | baseline Selector p50 "
                     f"{medians['python_selector_at_baseline']['p50_us']:.1f} us, same choice "
                     f"{entry['python_same_choice_as_baseline_selector']}"
                     if old_selector is not None else "")
                  + f" | first sight p50 {fresh['p50_us']:.1f} us ({fresh['masks']} masks)"
                  + "".join(f" | same choice {n}: {a}" for n, a in agree.items())
                  + f" | Python as C: {entry['python_same_choice']} | {entry['anatomy']}"
                  + "".join(f" | held out, {n}: {e['shapes']} shapes, mean {e['mean']:.3f} "
                            f"P10 {e['p10']:.3f} min {e['min']:.3f}"
                            for n, e in entry["held_out_efficiency"].items())
                  + (f" | other rule: {entry['other_candidates']}, Python p50 "
                     f"{medians['python_selector_other_candidates']['p50_us']:.1f} us"
                     if other is not None else ""), flush=True)
            write_cpu_result(args.name, NOTE, figures, args.out)  # after each: a cut run keeps it
        store.engine.dispose()


if __name__ == "__main__":
    main()
