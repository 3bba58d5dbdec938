"""Speed-up over the vendor against arithmetic intensity, from `bench/vs_vendor.py` results (a
measured run or `--recording`): one point per shape, the intensity being the operator's useful
FLOPs over its minimal bytes (what the shape's `ours_tflops` and `ours_gbps` imply). Writes
the points and the geometric mean speed-up per intensity band and operator as JSON, and the
plot as HTML (plotly, its script from the CDN) beside it.

    python -m bench.speedup_vs_intensity bench/results/vs_vendor_networks.json \\
        [more.json ...] [--kinds dense grouped depthwise] --name speedup_vs_intensity

`--kinds` keeps the shapes of those classes only (a run of the dense families alone leaves the
other classes to the reference kernel).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from bench.common import RESULTS, write_result

BANDS = (0.0, 10.0, 30.0, 100.0, 300.0, math.inf)  # FLOP per byte
LABELS = [f"{low:g}-{high:g}" if math.isfinite(high) else f"{low:g}+"
          for low, high in zip(BANDS, BANDS[1:])]


def points(results: dict, kinds: list[str] | None = None) -> list[dict]:
    """One point per shape with a vendor time (of the classes `kinds`, all where None):
    operator, shape, class, intensity, speed-up."""
    out = []
    for s in results["figures"]["shapes"]:
        if not s.get("speedup") or not s.get("ours_gbps"):
            continue
        if kinds is not None and (s.get("kind") or "") not in kinds:
            continue
        out.append({"op": s["op"], "problem": s["problem"], "kind": s.get("kind") or "",
                    "batch": s.get("batch"), "layers": s.get("layers") or [s.get("shape")],
                    "flop_per_byte": s["ours_tflops"] * 1e3 / s["ours_gbps"],
                    "speedup": s["speedup"]})
    return out


def band_of(intensity: float) -> str:
    for label, low, high in zip(LABELS, BANDS, BANDS[1:]):
        if low <= intensity < high:
            return label
    raise ValueError(f"no band holds {intensity}")


def by_band(found: list[dict]) -> dict:
    """Per operator and intensity band: shapes, geomean speed-up, wins."""
    groups: dict[tuple[str, str], list[float]] = {}
    for p in found:
        groups.setdefault((p["op"], band_of(p["flop_per_byte"])), []).append(p["speedup"])
    return {f"{op} {band}": {"shapes": len(v), "wins": sum(x > 1 for x in v),
                             "geomean": math.exp(sum(map(math.log, v)) / len(v))}
            for (op, band), v in sorted(groups.items(),
                                        key=lambda kv: (kv[0][0], LABELS.index(kv[0][1])))}


def plot(found: list[dict], path: Path) -> Path:
    import plotly.express as px

    figure = px.scatter(
        found, x="flop_per_byte", y="speedup", color="op", symbol="kind", log_x=True,
        log_y=True, hover_data=["problem", "batch"],
        labels={"flop_per_byte": "arithmetic intensity (FLOP per minimal byte)",
                "speedup": "vendor time / our best time"},
        title="Speed-up over the vendor against arithmetic intensity")
    figure.add_hline(y=1.0, line_dash="dot")
    figure.write_html(path, include_plotlyjs="cdn")
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path)
    parser.add_argument("--name", default="speedup_vs_intensity")
    parser.add_argument("--out", default=None)
    parser.add_argument("--kinds", nargs="*", default=None, metavar="KIND",
                        help="keep the shapes of these classes only (dense, grouped, depthwise)")
    args = parser.parse_args()
    found = [p for path in args.results
             for p in points(json.loads(path.read_text()), args.kinds)]
    bands = by_band(found)
    for key, v in bands.items():
        print(f"{key:32} {v['shapes']:4} shapes  geomean x{v['geomean']:.2f}  wins {v['wins']}")
    folder = Path(args.out) if args.out else RESULTS
    html = plot(found, folder / f"{args.name}.html")
    figures = {"inputs": [p.name for p in args.results], "kinds": args.kinds,
               "bands_flop_per_byte": list(BANDS[:-1]),
               "by_band": bands, "points": found, "plot": html.name}
    print(f"wrote {write_result(args.name, {'note': 'from the inputs results'}, figures, args.out)}"
          f" and {html}")


if __name__ == "__main__":
    main()
