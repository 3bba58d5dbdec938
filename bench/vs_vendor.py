"""Our best instance against the vendor library (cuDNN or PyTorch's own kernels), side by side.

For each shape and operator, every instance of every family (the naive reference families
excepted) and the vendor are verified and timed by the same policy in one run: the anchors of
the cuDNN bar (convolutions only) and/or every problem set of real networks in the operator's
networks_dir at the batch sizes asked for. Reports per shape both times, the ratio, TFLOP/s and
GB/s on the minimal bytes against the copy bandwidth measured in the same run; geometric means
per operator and batch size. Writes bench/results/vs_vendor.json (or --name) and every pair to
its _pairs.parquet.

With --compiled (the default for the operators in COMPILED_BY_DEFAULT), the vendor call through
torch.compile is a second baseline, verified and timed in the same run by the same policy,
compiled once per shape before it is timed: compiled_us and speedup_vs_compiled per shape,
null with compiled_error where it did not compile or was wrong.

With --recording FILE no GPU is needed: the table is read from a recording (`farm record`, or
bench/farm_throughput.py --record), whose every pair, the vendor's included, was measured on
the recorded GPU by the farm's default policy; it is written as vs_vendor_networks.json, with
geometric means per operator, per network and per shape class.

A run that its time limit stopped goes on with --after: the same command, a new --name and the
stopped run's JSON, measures only the shapes that run did not (bench/combine_runs.py joins
the two).
Usage: python -m bench.vs_vendor [--shapes anchors|networks|all] [--ops ...] [--batch 32 ...]
                                 [--compiled | --no-compiled] [--families ...] [--networks ...]
                                 [--shapes-of FAMILY ...] [--kinds KIND ...] [--time-limit-s S]
                                 [--after RUN.json ...] [--tables CSV ...]
       python -m bench.vs_vendor --ops groupnorm_bwd --shapes networks --batch 8 32
       python -m bench.vs_vendor --recording jobs/recordings/h100-standard.parquet [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import signal
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from bench.combine_runs import shapes_of
from bench.common import write_result
from farm.problems import Problem, ProblemError
from farm.recording import read_recording, row_problem
from farm.measure import DeviceLost
from farm.timing import TimingPolicy
from farm.worker import GpuWorker
from kernels import families_for
from kernels.conv.anchors import ANCHORS
from kernels.registry import get_family, operator_spec
from kernels.vendor import FAMILY as VENDOR
from kernels.vendor import forget_compiled, is_compiled

POLICY = TimingPolicy(warmup=1, min_repeats=5, max_repeats=50, budget_ms=30, timeout_s=10)
NAIVE = ("conv_naive",)  # reference-speed families, never the best
COMPILED_BY_DEFAULT = ("dwsep_fwd",)  # the torch.compile baseline unless --no-compiled
SIGTERM_REASON = "ended by SIGTERM"


class Stopped(Exception):
    """The run was asked to end (SIGTERM, as `timeout` sends it)."""


def _stop(signum, frame) -> None:
    raise Stopped(SIGTERM_REASON)


def network_rows(op: str, batch: int | None = None,
                 tables: Sequence[Path] | None = None) -> list[dict]:
    """Every layer of the operator's network tables (*_n{batch}.csv), with network and layer;
    or of `tables`, whatever their names (layers of networks that nothing trains on)."""
    folder = operator_spec(op).networks_dir
    if tables:
        paths = [t for t in tables if not batch or t.stem.endswith(f"_n{batch}")]
    else:
        paths = sorted(folder.glob(f"*_n{batch}.csv" if batch else "*_n*.csv")) if folder else []
    rows = []
    for path in paths:
        network = path.stem.rsplit("_n", 1)[0]  # a per-network table: <network>_n<N>.csv
        with path.open() as handle:
            rows += [{"network": network, **row} for row in csv.DictReader(handle)]
    return rows


def table_refusal(path: Path) -> str | None:
    """Why `path` cannot be read as a layer table (--tables), or None."""
    if not path.is_file():
        return f"--tables: no file {path}"
    if not re.fullmatch(r".+_n\d+", path.stem) or path.suffix != ".csv":
        return f"--tables: {path.name} is not named <network>_n<batch>.csv"
    return None


def shapes(op: str, which: str, dtype: str, batch: int, networks: Sequence[str] | None = None,
           tables: Sequence[Path] | None = None) -> list[tuple[str, Problem]]:
    """(label, problem) of the anchors (convolutions) and/or the network layers at `batch`
    (of `networks` only, where given; from `tables` instead of the operator's, where given)."""
    spec = operator_spec(op)
    out = []
    if which in ("anchors", "all") and op.startswith("conv2d_"):
        out += [(label, spec.problem(dtype, {**fields, "N": batch})) for label, fields in ANCHORS]
    if which in ("networks", "all"):
        for row in network_rows(op, batch, tables):
            network = row.get("network") or ""
            if networks is not None and network not in networks:
                continue
            try:
                out.append((f"{network} {row.get('layer', '')}".strip(), spec.problem(dtype, row)))
            except ProblemError as exc:
                print(f"skipped {network} {row.get('layer')}: {exc}")
    return out


def copy_bandwidth_gbps() -> float | None:
    """Device-to-device copy of 1 GiB through PyTorch, bytes read plus written per second."""
    try:
        import torch
    except ImportError:
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        dst.copy_(src)
    stop.record()
    torch.cuda.synchronize()
    return 2 * (1 << 30) * 10 / (start.elapsed_time(stop) * 1e-3) / 1e9


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def from_recording(path: Path, out: str | None, name: str = "vs_vendor_networks") -> None:
    """The vendor comparison over every shape of a recorded sweep (no GPU needed)."""
    recording = read_recording(path)
    frame = recording.frame[recording.frame["status"] == "ok"]
    table = []
    layers: dict[str, dict[tuple, list[str]]] = {}
    for (op, _), rows in frame.groupby(["operator", "problem_key"], sort=False):
        spec = operator_spec(op)
        if op not in layers:
            layers[op] = {}
            for row in network_rows(op):
                geometry = spec.problem("bf16", row).geometry()
                layers[op].setdefault(geometry, []).append(f"{row['network']} {row['layer']}")
        problem = row_problem(rows.iloc[0].to_dict())
        vendor = rows[rows["family"] == "vendor"]["median_us"]
        ours = rows[rows["family"] != "vendor"].sort_values("median_us").head(1)
        if ours.empty:
            continue
        ours_us, vendor_us = float(ours["median_us"].iloc[0]), \
            (float(vendor.iloc[0]) if len(vendor) else None)
        names = layers[op].get(problem.geometry(), [problem.label()])
        table.append({"op": op, "problem": problem.label(), "batch": problem.N, "layers": names,
                      "networks": sorted({n.split()[0] for n in names}),
                      "kind": spec.shape_class(problem), "ours_us": ours_us,
                      "best_instance": str(ours["instance"].iloc[0]),
                      "best_family": str(ours["family"].iloc[0]), "vendor_us": vendor_us,
                      "speedup": vendor_us / ours_us if vendor_us else None,
                      "ours_tflops": problem.flops / ours_us / 1e6,
                      "ours_gbps": problem.min_bytes / ours_us / 1e3,
                      "vendor_gbps": problem.min_bytes / vendor_us / 1e3 if vendor_us else None})
    summary: dict = {}
    for op in sorted({e["op"] for e in table}):
        entries = [e for e in table if e["op"] == op and e["speedup"]]
        networks = sorted({n for e in entries for n in e["networks"]})
        kinds = sorted({e["kind"] for e in entries})
        summary[op] = {
            "shapes": len(entries), "geomean": geomean(e["speedup"] for e in entries),
            "wins": sum(e["speedup"] > 1 for e in entries),
            "wins_by_10pct": sum(e["speedup"] > 1.1 for e in entries),
            "by_kind": {k: {"shapes": sum(e["kind"] == k for e in entries),
                            "geomean": geomean(e["speedup"] for e in entries if e["kind"] == k)}
                        for k in kinds},
            "by_network": {n: geomean(e["speedup"] for e in entries if n in e["networks"])
                           for n in networks},
            "by_batch": {b: {"shapes": sum(e["batch"] == b for e in entries),
                             "geomean": geomean(e["speedup"] for e in entries if e["batch"] == b),
                             "by_network": {n: geomean(e["speedup"] for e in entries
                                                       if e["batch"] == b and n in e["networks"])
                                            for n in networks}}
                         for b in sorted({e["batch"] for e in entries})}}
        print(f"{op:18} {summary[op]['shapes']:4} shapes  geomean x{summary[op]['geomean']:.3f}  "
              f"wins {summary[op]['wins']}  " + "  ".join(
                  f"{k} x{v['geomean'] or float('nan'):.2f} ({v['shapes']})"
                  for k, v in summary[op]["by_kind"].items()))
    figures = {"recording": path.name, "recording_note": recording.note,
               "policy": json.loads(frame["policy"].iloc[0]) if len(frame) else None,
               "summary": summary, "shapes": table}
    written = write_result(name, recording.environment, figures, out)
    print(f"wrote {written}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recording", type=Path, help="read the pairs from this recording "
                                                       "instead of measuring (no GPU)")
    parser.add_argument("--shapes", default="anchors", choices=["anchors", "networks", "all"])
    parser.add_argument("--ops", nargs="*", default=["conv2d_fwd", "conv2d_bwd_data",
                                                     "conv2d_bwd_weight"])
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--batch", type=int, nargs="+", default=[32])
    parser.add_argument("--name", default="vs_vendor", help="result file name")
    parser.add_argument("--out", default=None)
    parser.add_argument("--compiled", action=argparse.BooleanOptionalAction, default=None,
                        help="also time the vendor call through torch.compile (default: for "
                             f"{', '.join(COMPILED_BY_DEFAULT)})")
    parser.add_argument("--families", nargs="*", default=None,
                        help="measure only these families of ours (the vendor's always), on the "
                             "shapes some instance of theirs serves")
    parser.add_argument("--shapes-of", nargs="*", default=None, metavar="FAMILY",
                        help="only the shapes some instance of these families serves (with "
                             "--families: the others measured beside them there)")
    parser.add_argument("--networks", nargs="*", default=None,
                        help="the layers of these networks only (the tables' file names, e.g. "
                             "xception)")
    parser.add_argument("--tables", nargs="*", type=Path, default=None, metavar="CSV",
                        help="with --shapes networks, these layer tables (jobs/networks' columns, "
                             "named <network>_n<N>.csv) instead of the operator's")
    parser.add_argument("--kinds", nargs="*", default=None, metavar="KIND",
                        help="only the shapes of these classes (dense, grouped, depthwise): "
                             "a run of the dense families spends no time on the others")
    parser.add_argument("--time-limit-s", type=float, default=None,
                        help="start no shape after this many seconds; the shapes measured are "
                             "written (so they are when the run is ended by SIGTERM, too)")
    parser.add_argument("--after", nargs="*", type=Path, default=[], metavar="RUN.json",
                        help="skip the shapes these runs measured (an operator, a batch size "
                             "and a problem): go on where a time limit stopped one")
    args = parser.parse_args()
    for table in args.tables or ():
        why = table_refusal(table)
        if why:
            parser.error(why)
    if args.recording:
        return from_recording(args.recording, args.out,
                              "vs_vendor_networks" if args.name == "vs_vendor" else args.name)
    worker = GpuWorker()
    copy_gbps = copy_bandwidth_gbps()
    rows, table = [], []
    seen: set[Problem] = set()
    done = measured_in(args.after)
    lost: dict | None = None  # the pair that lost the GPU context, which ends the run
    stopped: dict | None = None  # why the run ended before its last shape
    start = time.perf_counter()
    previous = signal.signal(signal.SIGTERM, _stop)
    for op in args.ops:
        if lost or stopped:
            break
        spec = operator_spec(op)
        instances = [i for f in sorted(families_for(op), key=lambda f: f.measure_order)
                     if f.name not in NAIVE and (args.families is None or f.name == VENDOR.name
                                                 or f.name in args.families)
                     for i in f.instances(op, args.dtype)]
        chosen = ([i for f in families_for(op) if f.name in args.shapes_of
                   for i in f.instances(op, args.dtype)] if args.shapes_of else instances)
        with_compiled = op in COMPILED_BY_DEFAULT if args.compiled is None else args.compiled
        if with_compiled and instances and instances[0].family == VENDOR.name:
            instances.insert(1, VENDOR.compiled_instance(op, args.dtype))  # after the vendor's
        for batch in args.batch:
            if lost or stopped:
                break
            for label, problem in shapes(op, args.shapes, args.dtype, batch, args.networks,
                                         args.tables):
                if problem in seen or (op, problem.label()) in done or (
                        (args.families or args.shapes_of) and not serves(chosen, problem)):
                    continue
                if args.kinds is not None and spec.shape_class(problem) not in args.kinds:
                    continue
                if args.time_limit_s is not None and \
                        time.perf_counter() - start > args.time_limit_s:
                    stopped = {"reason": f"time limit of {args.time_limit_s:g} s",
                               "next_shape": label}
                    print(f"stopped before {label}: {stopped['reason']}", flush=True)
                    break
                seen.add(problem)
                if with_compiled:
                    forget_compiled()
                results = []
                try:
                    for pair in worker.measure_problem(problem, instances, POLICY):
                        results.append(pair)
                except DeviceLost as exc:  # the context is gone: keep what was measured
                    culprit = results[-1][0].name if results else None
                    lost = {"op": op, "batch": batch, "shape": label, "problem": problem.label(),
                            "instance": culprit, "message": str(exc)}
                    print(f"GPU context lost on {problem.label()} by {lost['instance']}: "
                          f"{exc}; writing the shapes measured so far", flush=True)
                except Stopped as exc:  # SIGTERM: keep what was measured
                    stopped = {"reason": str(exc), "next_shape": label}
                    print(f"stopped on {label}: {exc}; writing the shapes measured so far",
                          flush=True)
                for instance, result in results:
                    rows.append({"op": op, "batch": batch, "shape": label,
                                 "problem": problem.label(), "family": instance.family,
                                 "instance": instance.name, **result.row(), "policy": None,
                                 "telemetry": None})
                if lost or stopped:  # a shape measured in part has no best instance to report
                    break
                table.append(entry := summarize(op, batch, label, problem, results, copy_gbps))
                compiled = (f"compiled {entry['compiled_us'] or float('nan'):9.1f} us  "
                            if with_compiled else "")
                print(f"{op:18} {label:32} ours {entry['ours_us'] or float('nan'):9.1f} us "
                      f"vendor {entry['vendor_us'] or float('nan'):9.1f} us  {compiled}"
                      f"x{entry['speedup'] or float('nan'):5.2f}  copy "
                      f"{entry['ours_copy_fraction'] or float('nan'):4.2f}  "
                      f"{entry['best_instance']}  failed={entry['failed']}", flush=True)
    signal.signal(signal.SIGTERM, previous)
    geomeans = {op: op_geomeans([e for e in table if e["op"] == op], args.batch)
                for op in args.ops}
    figures = {"dtype": args.dtype, "batch": args.batch, "copy_gbps": copy_gbps,
               "shapes_from": args.shapes, "policy": POLICY.model_dump(),
               "geomean_speedup": geomeans, "shapes": table,
               "seconds": time.perf_counter() - start, "device_lost": lost,
               "stopped": stopped}
    path = write_result(args.name, worker.fingerprint, figures, args.out)
    pd.DataFrame(rows).to_parquet(path.with_name(f"{args.name}_pairs.parquet"), index=False)
    print("geomean speedup over the vendor:", json.dumps(geomeans, indent=1),
          f"copy {copy_gbps:.0f} GB/s" if copy_gbps else "")
    print(f"wrote {path}")
    if lost:
        raise SystemExit(f"incomplete: the GPU context was lost on {lost['problem']} by "
                         f"{lost['instance']} ({lost['message']})")
    if stopped and stopped["reason"] == SIGTERM_REASON:
        raise SystemExit(f"incomplete: {SIGTERM_REASON} before {stopped['next_shape']}")


def measured_in(runs: Sequence[Path]) -> set[tuple[str, str]]:
    """(operator, problem label: its batch size in it) of every shape these runs measured."""
    done: set[tuple[str, str]] = set()
    for path in runs:
        try:
            done |= set(shapes_of(path))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SystemExit(f"--after {path}: not a vs_vendor run's JSON ({exc})") from exc
    return done


def serves(instances: list, problem: Problem) -> bool:
    """Whether an instance of ours (not the vendor's) serves `problem`: with --families, the
    shapes none of them serves are left out (the vendor's time alone compares nothing)."""
    return any(i.family != VENDOR.name and get_family(i.family).applicable(i, problem) is None
               for i in instances)


def op_geomeans(entries: list[dict], batches: list[int]) -> dict:
    """One operator's geometric means over its shapes' lines (summarize): the speedup over the
    vendor and the copy fraction, overall and per batch size, and per batch size the speedup
    over the vendor call through torch.compile (None where it was not measured)."""
    return {
        "all": geomean(e["speedup"] for e in entries),
        "anchors": geomean(e["speedup"] for e in entries if e["shape"] in dict(ANCHORS)),
        "shapes": sum(1 for e in entries if e["speedup"]),
        "copy_fraction": geomean(e["ours_copy_fraction"] for e in entries),
        "by_batch": {b: {"speedup": geomean(e["speedup"] for e in entries if e["batch"] == b),
                         "speedup_vs_compiled": geomean(e["speedup_vs_compiled"]
                                                        for e in entries if e["batch"] == b),
                         "copy_fraction": geomean(e["ours_copy_fraction"] for e in entries
                                                  if e["batch"] == b),
                         "shapes": sum(1 for e in entries if e["batch"] == b)}
                     for b in batches}}


def summarize(op: str, batch: int, label: str, problem: Problem, results: list,
              copy_gbps: float | None) -> dict:
    """One shape's line: our best verified instance against the vendor, and against the vendor
    call through torch.compile where that was measured (compiled_error: why it has no time)."""
    ok = [(r.median_us, i) for i, r in results if r.status == "ok"]
    ours = min(((t, i) for t, i in ok if i.family != "vendor"), default=None, key=lambda x: x[0])
    vendor = next((t for t, i in ok if i.family == "vendor" and not is_compiled(i)), None)
    compiled = next((r for i, r in results if is_compiled(i)), None)
    compiled_us = compiled.median_us if compiled and compiled.status == "ok" else None
    compiled_error = (f"{compiled.status}: {compiled.message}"
                      if compiled and compiled.status != "ok" else None)
    gbps = problem.min_bytes / ours[0] / 1e3 if ours else None
    return {"op": op, "batch": batch, "shape": label, "problem": problem.label(),
            "kind": operator_spec(op).shape_class(problem),
            "ours_us": ours[0] if ours else None,
            "best_instance": ours[1].name if ours else None, "vendor_us": vendor,
            "speedup": vendor / ours[0] if ours and vendor else None,
            "compiled_us": compiled_us,
            "speedup_vs_compiled": compiled_us / ours[0] if ours and compiled_us else None,
            "compiled_error": compiled_error,
            "ours_tflops": problem.flops / ours[0] / 1e6 if ours else None,
            "ours_gbps": gbps, "ours_copy_fraction": gbps / copy_gbps if gbps and copy_gbps
            else None, "vendor_gbps": problem.min_bytes / vendor / 1e3 if vendor else None,
            "failed": sum(r.status not in ("ok", "unsupported") for i, r in results
                          if not is_compiled(i))}


if __name__ == "__main__":
    main()
