"""The Python Selector's latency on saved model bundles, this checkout beside another revision
(the whole farm at that revision: its rules, their keys, the Selector), one shape per call on
one core.

For each bundle (a `farm models export` folder): the same shapes (the first --shapes of the
operator's generated shapes of --seed, then its networks' layers) asked of a fresh Selector once
each in order (first sight: every rule key's mask computed for the first time), then in --rounds
rounds, this tree and the baseline alternating, each in a fresh interpreter; the median over
rounds of each p50 and p99 (microseconds per `select`), and how many choices match this
checkout's.

Usage: python -m bench.select_python --bundle DIR [DIR ...] [--baseline REV] [--shapes 1000]
           [--rounds 3] [--core 1] [--name N] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from bench.common import write_cpu_result
from bench.trees import code_trees, run_in_tree

# Runs in a fresh interpreter with the code tree under test first on sys.path; it uses only
# the API that every revision of the farm has (read_bundle, Selector, the operator's shapes).
DRIVER = r"""
import json, os, sys, time
import numpy as np
bundle, count, seed, core = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if core >= 0:
    os.sched_setaffinity(0, {core})
from farm.select.export import read_bundle
from farm.select.selector import Selector
from farm.select.synthetic import network_shapes
from kernels.registry import operator_spec

files = read_bundle(bundle)
selector = Selector(files, "c")
spec = operator_spec(selector.operator)
shapes = [spec.problem(selector.dtype, s) for s in
          spec.synthetic_shapes(count, seed=seed) + network_shapes(selector.operator)][:count]

def timed():
    times, picks = [], []
    for p in shapes:
        start = time.perf_counter()
        picks.append(selector.select(p))
        times.append(time.perf_counter() - start)
    return float(np.percentile(times, 50) * 1e6), float(np.percentile(times, 99) * 1e6), picks

first = timed()
steady = timed()
print("RESULT " + json.dumps({"operator": selector.operator, "candidates": len(selector.names),
                              "shapes": len(shapes), "first_p50_us": first[0],
                              "first_p99_us": first[1], "p50_us": steady[0],
                              "p99_us": steady[1], "picks": steady[2]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, nargs="+", required=True)
    parser.add_argument("--baseline", help="a git revision to measure side by side")
    parser.add_argument("--shapes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--core", type=int, default=-1, help="time on this core alone")
    parser.add_argument("--name", default="select_python")
    parser.add_argument("--out")
    args = parser.parse_args()
    missing = [str(b) for b in args.bundle if not b.is_dir()]
    if missing:
        raise SystemExit(f"no bundle folder {', '.join(missing)}")
    figures: dict = {"baseline": args.baseline, "core": args.core, "bundles": {}}
    with tempfile.TemporaryDirectory() as tmp, code_trees(args.baseline, Path(tmp)) as trees:
        for bundle in args.bundle:
            runs: dict[str, list[dict]] = {code: [] for code in trees}
            for _ in range(args.rounds):
                for code, (tree, _) in trees.items():  # alternate the trees
                    runs[code].append(run_in_tree(
                        tree, DRIVER, str(bundle.resolve()), str(args.shapes), str(args.seed),
                        str(args.core)))
            mine = runs["current"][0]["picks"]
            entry = {"operator": runs["current"][0]["operator"],
                     "candidates": runs["current"][0]["candidates"],
                     "shapes": runs["current"][0]["shapes"]}
            for code, found in runs.items():
                entry[code] = {k: statistics.median(r[k] for r in found)
                               for k in ("p50_us", "p99_us", "first_p50_us", "first_p99_us")}
                entry[code]["commit"] = trees[code][1]
                entry[code]["same_choices"] = sum(a == b for a, b in zip(found[0]["picks"], mine))
            figures["bundles"][bundle.name] = entry
            print(bundle.name, entry, flush=True)
    write_cpu_result(args.name, "the Python Selector on saved bundles, one shape per call",
                     figures, args.out)


if __name__ == "__main__":
    main()
