"""How full the GPU's waves are for our best instance on each shape of `bench/vs_vendor.py`
runs, where its family runs a persistent schedule and says so (KernelFamily.waves: the
convolutions' conv_wgmma and the families built on it): the instance's blocks of work over the
blocks the GPU holds at once, as the share of its waves' slots they use (98 tiles for 132
slots fill 0.74, 72 fill 0.55). No GPU: the work is the launch geometry of the run's shapes,
read back from their labels. Per operator, the shapes below `--below` against the others
(geometric mean speed-up), and those below it that lose most.

    python -m bench.wave_fill bench/results/vs_vendor_networks_dense_bww_cluster_all.json \\
        [more.json ...] [--kinds dense] [--below 0.75] --name wave_fill_h200_dense
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bench.common import geomean, write_result
from kernels.registry import families_for, operator_spec


def fill(work: int, slots: int) -> float:
    """The share of its waves' slots that `work` blocks use."""
    return work / (math.ceil(work / slots) * slots)


def shapes(runs: list[dict], kinds: list[str] | None, dtype: str = "bf16") -> list[dict]:
    """One row per shape whose best instance's family says its waves."""
    instances: dict[str, dict] = {}
    rows = []
    for run in runs:
        for s in run["figures"]["shapes"]:
            if not s.get("speedup") or (kinds is not None and s.get("kind") not in kinds):
                continue
            op = s["op"]
            if op not in instances:
                instances[op] = {i.name: (f, i) for f in families_for(op)
                                 for i in f.instances(op, dtype)}
            if s["best_instance"] not in instances[op]:
                continue
            family, instance = instances[op][s["best_instance"]]
            problem = operator_spec(op).problem_from_label(dtype, s["problem"])
            waves = family.waves(instance, problem)
            if waves is None:
                continue
            rows.append({"op": op, "batch": s.get("batch"), "problem": s["problem"],
                         "family": family.name, "work": waves[0], "slots": waves[1],
                         "fill": fill(*waves), "speedup": s["speedup"]})
    return rows


def summary(rows: list[dict], below: float) -> dict:
    out = {}
    for op in sorted({r["op"] for r in rows}):
        mine = [r for r in rows if r["op"] == op]
        low = [r for r in mine if r["fill"] < below]
        out[op] = {"shapes": len(mine), "below": len(low),
                   "speedup_below": geomean([r["speedup"] for r in low]),
                   "speedup_rest": geomean([r["speedup"] for r in mine if r["fill"] >= below]),
                   "worst_below": sorted(low, key=lambda r: r["speedup"])[:8]}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--kinds", nargs="*", default=None)
    parser.add_argument("--below", type=float, default=0.75)
    parser.add_argument("--name", default="wave_fill")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    runs = [json.loads(path.read_text()) for path in args.results]
    rows = shapes(runs, args.kinds)
    figures = {"inputs": [p.name for p in args.results], "kinds": args.kinds,
               "below": args.below, "by_operator": summary(rows, args.below), "shapes": rows}
    for op, s in figures["by_operator"].items():
        print(f"{op}: {s['shapes']} shapes on families that say their waves, {s['below']} fill "
              f"under {args.below}: speed-up {s['speedup_below'] or float('nan'):.3f} there, "
              f"{s['speedup_rest'] or float('nan'):.3f} elsewhere")
        for r in s["worst_below"]:
            print(f"    {r['problem']:40s} {r['work']:5d} blocks / {r['slots']:4d} slots "
                  f"fill {r['fill']:.2f}  x{r['speedup']:.2f}  {r['family']}")
    devices = {str(run["device"].get("gpu_name", run["device"])) for run in runs}
    path = write_result(args.name, {"analysis of": sorted(devices), "note": "no GPU involved"},
                        figures, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
