"""The farm's best against the vendor when a family was measured in a run of its own: per shape,
the better of each run's same-run ratio (its best instance against the vendor measured in that
run), so that no time is compared across runs. Geometric means per operator and shape class.
The better of several runs' ratios also takes the runs in which the vendor was slow, so each
shape and class also gets a figure robust to that: our fastest time over the runs against the
vendor's median over the runs (`vs_vendor_median`), times compared across runs of one machine.

    python -m bench.combine_runs bench/results/vs_vendor_networks.json \\
        bench/results/vs_vendor_networks_wgmma.json --name vs_vendor_networks_combined \\
        [--exclude vs_vendor_networks_wgmma.json:conv2d_bwd_weight ...]

--exclude RUN:OP leaves one run's shapes of an operator out (a run whose kernels for that
operator have changed since).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path

from bench.common import geomean, write_result


def shapes_of(path: Path) -> dict[tuple[str, str], dict]:
    data = json.loads(path.read_text())
    figures = data.get("figures", data)
    return {(s["op"], s["problem"]): s for s in figures["shapes"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="vs_vendor result files")
    parser.add_argument("--name", default="vs_vendor_combined")
    parser.add_argument("--out", default=None)
    parser.add_argument("--exclude", nargs="*", default=[], help="RUN_FILE_NAME:OPERATOR")
    parser.add_argument("--batch", nargs="*", type=int, default=[],
                        help="only the shapes of these batch sizes (default: every one)")
    args = parser.parse_args()
    excluded = {tuple(item.rsplit(":", 1)) for item in args.exclude}
    runs = [{key: shape for key, shape in shapes_of(path).items()
             if (path.name, key[0]) not in excluded
             and (not args.batch or shape.get("batch") in args.batch)} for path in args.runs]
    rows = []
    for key in sorted(set().union(*runs)):
        entries = [(i, run[key]) for i, run in enumerate(runs) if run.get(key, {}).get("speedup")]
        if not entries:
            continue
        i, best = max(entries, key=lambda e: e[1]["speedup"])
        ours = min(e["ours_us"] for _, e in entries)
        vendor = statistics.median(e["vendor_us"] for _, e in entries)
        rows.append({"op": key[0], "problem": key[1], "kind": best["kind"],
                     "speedup": best["speedup"], "from_run": args.runs[i].name,
                     "best_instance": best["best_instance"],
                     "vs_vendor_median": vendor / ours, "ours_best_us": ours,
                     "vendor_median_us": vendor,
                     "per_run": {args.runs[j].name: e["speedup"] for j, e in entries}})
    summary: dict = defaultdict(dict)
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op]
        summary[op]["all"] = geomean([r["speedup"] for r in mine])
        summary[op]["shapes"] = len(mine)
        for kind in sorted({r["kind"] for r in mine}):
            kept = [r for r in mine if r["kind"] == kind]
            summary[op][kind] = {"speedup": geomean([r["speedup"] for r in kept]),
                                 "vs_vendor_median": geomean([r["vs_vendor_median"]
                                                              for r in kept]),
                                 "shapes": len(kept)}
        for i, path in enumerate(args.runs):
            ratios = [r["per_run"][path.name] for r in mine if path.name in r["per_run"]]
            summary[op][f"run {path.name}"] = geomean(ratios)
            summary[op][f"best from {path.name}"] = sum(r["from_run"] == path.name for r in mine)
    figures = {"runs": [p.name for p in args.runs], "summary": summary, "shapes": rows}
    print(json.dumps(summary, indent=1))
    print(f"wrote {write_result(args.name, {}, figures, args.out)}")


if __name__ == "__main__":
    main()
