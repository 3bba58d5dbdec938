"""Our best instance against the vendor library (cuDNN through PyTorch), side by side.

For each shape (the anchors of the cuDNN bar, and/or the real networks in jobs/networks) and
each direction, every instance of every family (conv_naive excepted) and the vendor are
verified and timed by the same policy in one run. Reports per shape both times, the ratio,
TFLOP/s and GB/s against the copy bandwidth measured in the same run; geometric means per
direction. Writes bench/results/vs_vendor.json and every pair to vs_vendor_pairs.parquet.

With --recording FILE no GPU is needed: the table is read from a recording of the standard sweep
(`farm record`, or bench/farm_throughput.py --record), whose every pair, the vendor's included,
was measured on the recorded GPU by the farm's default policy; it is written as
vs_vendor_networks.json, with geometric means per direction, per network and per group kind.
Usage: python -m bench.vs_vendor [--shapes anchors|networks|all] [--ops ...] [--out DIR]
       python -m bench.vs_vendor --recording jobs/recordings/h100-standard.parquet [--out DIR]
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import pandas as pd

from bench.common import write_result
from farm.problems import CONV_FIELDS, CONV_OPERATORS, ConvProblem
from farm.recording import read_recording
from farm.timing import TimingPolicy
from farm.worker import GpuWorker
from kernels import families_for

ANCHORS = [  # N=32, bf16: the shapes of the cuDNN bar (../shared/ANCHORS.md)
    ("resnet50 stage2 3x3", dict(C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
    ("resnet50 stage3 1x1", dict(C=1024, K=256, G=1, H=14, W=14, R=1, S=1)),
    ("resnext50 stage2 g32", dict(C=256, K=256, G=32, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
    ("resnext50 stage4 g32", dict(C=1024, K=1024, G=32, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1)),
    ("mobilenetv2 dw 144", dict(C=144, K=144, G=144, H=56, W=56, R=3, S=3, pad_h=1, pad_w=1)),
    ("mobilenetv2 dw 960", dict(C=960, K=960, G=960, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1)),
    ("efficientnet dw 5x5", dict(C=240, K=240, G=240, H=28, W=28, R=5, S=5, pad_h=2, pad_w=2)),
    ("convnext dw 7x7", dict(C=96, K=96, G=96, H=56, W=56, R=7, S=7, pad_h=3, pad_w=3)),
    ("regnet gw8", dict(C=224, K=224, G=28, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)),
]
NETWORKS = Path(__file__).resolve().parents[1] / "jobs" / "networks" / "all_networks.csv"
POLICY = TimingPolicy(warmup=1, min_repeats=5, max_repeats=50, budget_ms=30, timeout_s=10)


def shapes(which: str) -> list[tuple[str, dict]]:
    out = list(ANCHORS) if which in ("anchors", "all") else []
    if which in ("networks", "all"):
        with NETWORKS.open() as handle:
            for row in csv.DictReader(handle):
                fields = {k: int(v) for k, v in row.items() if k not in ("network", "layer",
                                                                          "count", "N")}
                out.append((f"{row['network']} {row['layer']}", fields))
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


def group_kind(fields: dict) -> str:
    if fields["G"] == 1:
        return "dense"
    return "depthwise" if fields["G"] == fields["C"] == fields["K"] else "grouped"


def from_recording(path: Path, out: str | None) -> None:
    """The vendor comparison over every shape of a recorded sweep (no GPU needed)."""
    recording = read_recording(path)
    frame = recording.frame[recording.frame["status"] == "ok"]
    layers: dict[tuple, list[str]] = {}
    with NETWORKS.open() as handle:
        for row in csv.DictReader(handle):
            key = tuple(int(row[f]) for f in CONV_FIELDS)
            layers.setdefault(key, []).append(f"{row['network']} {row['layer']}")
    table = []
    for (op, _), rows in frame.groupby(["operator", "problem_key"], sort=False):
        first = rows.iloc[0]
        fields = {f: int(first[f]) for f in CONV_FIELDS}
        problem = ConvProblem(op=op, dtype=str(first["dtype"]), **fields)
        vendor = rows[rows["family"] == "vendor"]["median_us"]
        ours = rows[rows["family"] != "vendor"].sort_values("median_us").head(1)
        if ours.empty:
            continue
        ours_us, vendor_us = float(ours["median_us"].iloc[0]), \
            (float(vendor.iloc[0]) if len(vendor) else None)
        names = layers.get(tuple(fields[f] for f in CONV_FIELDS), [problem.label()])
        table.append({"op": op, "problem": problem.label(), "layers": names,
                      "networks": sorted({n.split()[0] for n in names}),
                      "kind": group_kind(fields), "ours_us": ours_us,
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
        summary[op] = {
            "shapes": len(entries), "geomean": geomean(e["speedup"] for e in entries),
            "wins": sum(e["speedup"] > 1 for e in entries),
            "wins_by_10pct": sum(e["speedup"] > 1.1 for e in entries),
            "by_kind": {k: {"shapes": sum(e["kind"] == k for e in entries),
                            "geomean": geomean(e["speedup"] for e in entries if e["kind"] == k)}
                        for k in ("dense", "grouped", "depthwise")},
            "by_network": {n: geomean(e["speedup"] for e in entries if n in e["networks"])
                           for n in networks}}
        print(f"{op:18} {summary[op]['shapes']:4} shapes  geomean x{summary[op]['geomean']:.3f}  "
              f"wins {summary[op]['wins']}  " + "  ".join(
                  f"{k} x{v['geomean'] or float('nan'):.2f} ({v['shapes']})"
                  for k, v in summary[op]["by_kind"].items()))
    figures = {"recording": path.name, "recording_note": recording.note,
               "policy": json.loads(frame["policy"].iloc[0]) if len(frame) else None,
               "summary": summary, "shapes": table}
    written = write_result("vs_vendor_networks", recording.environment, figures, out)
    print(f"wrote {written}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recording", type=Path, help="read the pairs from this recording "
                                                       "instead of measuring (no GPU)")
    parser.add_argument("--shapes", default="anchors", choices=["anchors", "networks", "all"])
    parser.add_argument("--ops", nargs="*", default=list(CONV_OPERATORS))
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.recording:
        return from_recording(args.recording, args.out)
    worker = GpuWorker()
    copy_gbps = copy_bandwidth_gbps()
    rows, table = [], []
    seen: set[ConvProblem] = set()
    start = time.perf_counter()
    for op in args.ops:
        instances = [i for f in sorted(families_for(op), key=lambda f: f.measure_order)
                     if f.name != "conv_naive" for i in f.instances(op, args.dtype)]
        for label, fields in shapes(args.shapes):
            problem = ConvProblem(op=op, dtype=args.dtype, N=args.batch, **fields)
            if problem in seen:
                continue
            seen.add(problem)
            results = list(worker.measure_problem(problem, instances, POLICY))
            for instance, result in results:
                rows.append({"op": op, "shape": label, "problem": problem.label(),
                             "family": instance.family, "instance": instance.name,
                             **result.row(), "policy": None, "telemetry": None})
            ok = [(r.median_us, i) for i, r in results if r.status == "ok"]
            ours = min(((t, i) for t, i in ok if i.family != "vendor"), default=None,
                       key=lambda x: x[0])
            vendor = next((t for t, i in ok if i.family == "vendor"), None)
            entry = {"op": op, "shape": label, "problem": problem.label(),
                     "ours_us": ours[0] if ours else None,
                     "best_instance": ours[1].name if ours else None,
                     "vendor_us": vendor,
                     "speedup": vendor / ours[0] if ours and vendor else None,
                     "ours_tflops": problem.flops / ours[0] / 1e6 if ours else None,
                     "ours_gbps": problem.min_bytes / ours[0] / 1e3 if ours else None,
                     "vendor_gbps": problem.min_bytes / vendor / 1e3 if vendor else None,
                     "failed": sum(r.status not in ("ok", "unsupported") for _, r in results)}
            table.append(entry)
            print(f"{op:18} {label:28} ours {entry['ours_us'] or float('nan'):9.1f} us "
                  f"vendor {vendor or float('nan'):9.1f} us  x{entry['speedup'] or float('nan'):5.2f}"
                  f"  {entry['best_instance']}  failed={entry['failed']}", flush=True)
    geomeans = {}
    for op in args.ops:
        ratios = [e["speedup"] for e in table if e["op"] == op and e["speedup"]]
        anchors = [e["speedup"] for e in table if e["op"] == op and e["speedup"]
                   and e["shape"] in dict(ANCHORS)]
        geomeans[op] = {
            "all": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "anchors": math.exp(sum(map(math.log, anchors)) / len(anchors)) if anchors else None,
            "shapes": len(ratios)}
    figures = {"dtype": args.dtype, "batch": args.batch, "copy_gbps": copy_gbps,
               "policy": POLICY.model_dump(), "geomean_speedup": geomeans, "shapes": table,
               "seconds": time.perf_counter() - start}
    path = write_result("vs_vendor", worker.fingerprint, figures, args.out)
    pd.DataFrame(rows).to_parquet(path.with_name("vs_vendor_pairs.parquet"), index=False)
    print("geomean speedup over the vendor:", geomeans, f"copy {copy_gbps:.0f} GB/s"
          if copy_gbps else "")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
