"""What some instances add to our best against the vendor library: one `bench/vs_vendor.py` run
read back, per shape our best verified time with every instance and without those whose name
contains a pattern, each against the vendor's time of the same run. No GPU: both figures come
from the run's pairs (its `_pairs.parquet`), so they share the run's vendor times and machine.

Prints and writes (bench/results/NAME.json) per operator, batch size and shape class (the run's
`kind`): the shapes, the geometric mean of the speed-up with and without the instances, and on
the shapes those instances serve; then the shapes they speed up most.

Usage: python -m bench.ablation bench/results/vs_vendor_X.json --without _tma2 --name NAME
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

import pandas as pd

from bench.common import write_result


def geomean(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(math.exp(values.map(math.log).mean())) if len(values) else None


def best_times(pairs: pd.DataFrame, pattern: str, regex: bool = False) -> pd.DataFrame:
    """Per (op, batch, problem): the vendor's time and our best with and without the
    instances whose name contains `pattern` (a regular expression found anywhere in the name
    where `regex`; NaN where nothing of ours is left)."""
    ok = pairs[pairs["status"] == "ok"]
    keys = ["op", "batch", "problem"]
    vendor = ok[ok["family"] == "vendor"].groupby(keys)["median_us"].min()
    ours = ok[ok["family"] != "vendor"]
    found = re.compile(pattern if regex else re.escape(pattern)).search
    dropped = ours["instance"].map(lambda name: found(name) is not None).astype(bool)
    return pd.DataFrame({"vendor_us": vendor,
                         "with_us": ours.groupby(keys)["median_us"].min(),
                         "without_us": ours[~dropped].groupby(keys)["median_us"].min(),
                         "only_us": ours[dropped].groupby(keys)["median_us"].min()}
                        ).dropna(subset=["vendor_us", "with_us"])


def summarise(times: pd.DataFrame, kinds: dict[tuple, str]) -> list[dict]:
    times = times.assign(kind=[kinds.get(k, "?") for k in times.index])
    out = []
    for (op, batch, kind), rows in times.groupby(
            [times.index.get_level_values("op"), times.index.get_level_values("batch"),
             "kind"]):
        served = rows[rows["only_us"].notna()]
        out.append({"op": op, "batch": int(batch), "kind": kind, "shapes": len(rows),
                    "with": geomean(rows["vendor_us"] / rows["with_us"]),
                    "without": geomean(rows["vendor_us"] / rows["without_us"]),
                    "served": len(served),
                    "served_with": geomean(served["vendor_us"] / served["with_us"]),
                    "served_without": geomean(served["vendor_us"] / served["without_us"]),
                    "won": int((served["only_us"] < served["without_us"]).sum())})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a bench/vs_vendor.py result (its _pairs.parquet "
                                              "beside it)")
    parser.add_argument("--without", required=True, metavar="PATTERN",
                        help="leave out the instances whose name contains this")
    parser.add_argument("--regex", action="store_true",
                        help="PATTERN is a regular expression (e.g. '_ch(24|48)_')")
    parser.add_argument("--name", required=True)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    run = json.loads(args.run.read_text())
    pairs_path = args.run.with_name(args.run.stem + "_pairs.parquet")
    if not pairs_path.exists():
        raise SystemExit(f"{pairs_path} not found: the run's pairs are needed")
    kinds = {(s["op"], s["batch"], s["problem"]): s.get("kind", "?")
             for s in run["figures"]["shapes"]}
    times = best_times(pd.read_parquet(pairs_path), args.without, args.regex)
    rows = summarise(times, kinds)
    fmt = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    print(f"{args.run.name} ({run['device'].get('gpu_name')}, {run['date']}), "
          f"without '{args.without}':")
    for r in rows:
        print(f"  {r['op']} N{r['batch']} {r['kind']:9s} {r['shapes']:3d} shapes: "
              f"{fmt(r['without'])} -> {fmt(r['with'])}; on the {r['served']} they serve "
              f"{fmt(r['served_without'])} -> {fmt(r['served_with'])} (faster on {r['won']})")
    gain = (times["without_us"] / times["with_us"]).sort_values(ascending=False)
    top = [{"op": k[0], "batch": int(k[1]), "problem": k[2], "gain": float(v),
            "with_us": float(times.loc[k, "with_us"]), "vendor_us": float(times.loc[k, "vendor_us"])}
           for k, v in gain.head(10).items() if not math.isnan(v)]
    figures = {"run": args.run.name, "run_date": run["date"], "run_command": run["command"],
               "without": args.without, "regex": args.regex, "classes": rows, "largest_gains": top}
    print(f"wrote {write_result(args.name, run['device'], figures, args.out)}")


if __name__ == "__main__":
    main()
