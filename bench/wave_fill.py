"""How full the GPU's waves are for our best instance on each shape of `bench/vs_vendor.py`
runs: for the persistent Hopper families (conv_wgmma and the families built on it), the best
instance's blocks of work (its output tiles times grid z; a cluster family's blocks) over the
blocks the GPU holds at once (SM_COUNT times its blocks per multiprocessor), as the share of
the slots its waves use: 98 tiles for 132 slots fill 0.74, 72 fill 0.55. No GPU: the work is
the launch geometry of the run's shapes. Per operator, the shapes below `--below` against the
others (geometric mean speed-up), and the shapes below it that lose most.

    python -m bench.wave_fill bench/results/vs_vendor_networks_dense_bww_cluster_all.json \\
        [more.json ...] [--kinds dense] [--below 0.75] --name wave_fill_h200_dense
"""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from bench.common import write_result
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import WgmmaConv, blocks_per_sm
from kernels.family import SM_COUNT, Instance
from kernels.registry import families_for

PAIRS = {"s": ("stride_h", "stride_w"), "p": ("pad_h", "pad_w"), "d": ("dil_h", "dil_w")}


def parse_label(op: str, label: str, dtype: str = "bf16") -> ConvProblem:
    """The ConvProblem whose label() is `label` ("N32 C256 K256 G1 14x14 3x3 s2x2 p1x1")."""
    tokens = label.split()
    fields: dict[str, int] = {}
    sizes = [t for t in tokens if re.fullmatch(r"\d+x\d+", t)]
    if len(sizes) != 2:
        raise ValueError(f"{label!r} is not a convolution label: want H x W and R x S")
    fields["H"], fields["W"] = map(int, sizes[0].split("x"))
    fields["R"], fields["S"] = map(int, sizes[1].split("x"))
    for t in tokens:
        if re.fullmatch(r"[NCKG]\d+", t):
            fields[t[0]] = int(t[1:])
        elif re.fullmatch(r"[spd]\d+x\d+", t):
            a, b = PAIRS[t[0]]
            fields[a], fields[b] = map(int, t[1:].split("x"))
    return ConvProblem(op=op, dtype=dtype, **fields)


def fill(family: WgmmaConv, instance: Instance, p: ConvProblem) -> tuple[int, int, float]:
    """(blocks of work, slots, the share of its waves' slots they use)."""
    grid = family.grid(instance, p)
    if family.name == "conv_wgmma_cluster":  # one block per cluster member, no persistence
        work = grid[0] * grid[2]
    else:
        work = family.tiles(instance, p) * grid[2]
    slots = SM_COUNT * blocks_per_sm(instance.settings)
    return work, slots, work / (math.ceil(work / slots) * slots)


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def shapes(runs: list[dict], kinds: list[str] | None) -> list[dict]:
    """One row per shape whose best instance is of a persistent Hopper family."""
    found: dict[str, tuple] = {}
    rows = []
    for run in runs:
        for s in run["figures"]["shapes"]:
            if not s.get("speedup") or (kinds is not None and s.get("kind") not in kinds):
                continue
            op = s["op"]
            if op not in found:
                found[op] = {i.name: (f, i) for f in families_for(op)
                             if isinstance(f, WgmmaConv) for i in f.instances(op, "bf16")}
            if s["best_instance"] not in found[op]:
                continue
            family, instance = found[op][s["best_instance"]]
            work, slots, share = fill(family, instance, parse_label(op, s["problem"]))
            rows.append({"op": op, "batch": s.get("batch"), "problem": s["problem"],
                         "family": family.name, "work": work, "slots": slots, "fill": share,
                         "speedup": s["speedup"]})
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
    import json

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
               "below": args.below, "sm_count": SM_COUNT,
               "by_operator": summary(rows, args.below), "shapes": rows}
    for op, s in figures["by_operator"].items():
        print(f"{op}: {s['shapes']} shapes on persistent Hopper families, {s['below']} fill "
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
