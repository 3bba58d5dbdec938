"""What a change to the farm costs the convolutions, side by side in one run: the same probes
run under this checkout and under a baseline checkout (--baseline DIR, another revision's
source tree), interleaved (baseline, current, baseline, current, ...) so drift hits both alike.

Probes:
- selection latency (CPU): one model bundle (trained here on SYNTHETIC data, exported once),
  loaded by each tree's Selector; p50 and p90 of one `select` call over the same shapes, C
  export and LightGBM backends;
- measurement overhead (GPU, with --gpu): bench/measure_overhead.py under each tree, the wall
  time of one measured pair over its timed launches per series, flush method and size.
Writes bench/results/change_cost.json with both sides' figures and their ratios.
Usage: python -m bench.change_cost --baseline /path/to/old/checkout [--gpu] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import write_result

ROOT = Path(__file__).resolve().parents[1]
PROBE = r"""
import json, sys, time
import numpy as np
from farm.select.selector import Selector
bundle, shapes_file, backend = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = json.load(open(shapes_file))
selector = Selector.load(bundle, backend)
for shape in shapes[:50]:
    selector.select(shape)
times = []
for _ in range(5 if backend == "c" else 1):
    for shape in shapes:
        start = time.perf_counter()
        selector.select(shape)
        times.append(time.perf_counter() - start)
print(json.dumps({"p50_us": float(np.percentile(times, 50) * 1e6),
                  "p90_us": float(np.percentile(times, 90) * 1e6), "calls": len(times)}))
"""


def run_in(tree: Path, args: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tree), *[p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                      if p and Path(p).resolve() != ROOT]])}
    return subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True,
                          text=True, check=True, **kwargs)


def make_bundle(folder: Path) -> tuple[Path, Path]:
    """A conv2d_fwd model trained on SYNTHETIC rows, exported, and the shapes to ask it."""
    from farm.select.data import load_dataset
    from farm.select.export import bundle_files, write_bundle
    from farm.select.synthetic import seed_synthetic, synthetic_problems
    from farm.select.train import TrainConfig, train
    from farm.store import open_store

    store = open_store(f"sqlite:///{folder / 'farm.db'}")
    seed_synthetic(store, synthetic_problems("conv2d_fwd", "bf16", 150, 150, seed=3))
    model = train(load_dataset(store, "conv2d_fwd", "sm_90", "bf16"), TrainConfig())
    bundle = write_bundle(folder / "bundle", bundle_files(model))
    shapes = [p.shape() for p in synthetic_problems("conv2d_fwd", "bf16", 0, 400, seed=17)]
    (folder / "shapes.json").write_text(json.dumps(shapes))
    return bundle, folder / "shapes.json"


def selection(trees: dict[str, Path], rounds: int, folder: Path) -> dict:
    bundle, shapes = make_bundle(folder)
    probe = folder / "probe.py"
    probe.write_text(PROBE)
    out: dict = {name: {"c": [], "lightgbm": []} for name in trees}
    for _ in range(rounds):
        for name, tree in trees.items():
            for backend in ("c", "lightgbm"):
                done = run_in(tree, [str(probe), str(bundle), str(shapes), backend])
                out[name][backend].append(json.loads(done.stdout.strip().splitlines()[-1]))
    summary = {}
    for backend in ("c", "lightgbm"):
        p50 = {name: statistics.median(r["p50_us"] for r in out[name][backend])
               for name in trees}
        summary[backend] = {"p50_us": p50, "ratio": p50["current"] / p50["baseline"],
                            "rounds": out_rounds(out, backend)}
        print(f"selection ({backend}): baseline p50 {p50['baseline']:.2f} us, current "
              f"{p50['current']:.2f} us, ratio {summary[backend]['ratio']:.3f}")
    return summary


def out_rounds(out: dict, backend: str) -> dict:
    return {name: [round(r["p50_us"], 3) for r in runs[backend]] for name, runs in out.items()}


def overhead(trees: dict[str, Path], rounds: int, folder: Path) -> dict:
    runs: dict[str, list[dict]] = {name: [] for name in trees}
    for index in range(rounds):
        for name, tree in trees.items():
            target = folder / f"{name}{index}"
            run_in(tree, ["-m", "bench.measure_overhead", "--out", str(target)], timeout=900)
            runs[name].append(json.loads((target / "measure_overhead.json").read_text()))
    summary = {}
    for name, results in runs.items():
        per: dict[str, list[float]] = {}
        for result in results:
            for pair in result["figures"]["pairs"]:
                key = f"{pair['series']} {pair['flush_method']} {pair['target_us']}us"
                per.setdefault(key, []).append(pair["overhead_ratio"])
        summary[name] = {k: statistics.median(v) for k, v in per.items()}
    ratios = {k: summary["current"][k] / summary["baseline"][k] for k in summary["current"]
              if k in summary["baseline"]}
    for key, ratio in ratios.items():
        print(f"overhead {key:40s} baseline {summary['baseline'][key]:.3f} current "
              f"{summary['current'][key]:.3f} ratio {ratio:.3f}")
    return {"overhead": summary, "ratio": ratios,
            "geomean_ratio": statistics.geometric_mean(ratios.values()) if ratios else None}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--baseline", type=Path, required=True)
    parser.add_argument("--gpu", action="store_true", help="also the measurement overhead")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "current": ROOT}
    revision = run_in(args.baseline, ["-c", "import subprocess; print(subprocess.run(['git', "
                      "'rev-parse', '--short', 'HEAD'], capture_output=True, text=True)"
                      ".stdout.strip())"]).stdout.strip()
    figures: dict = {"baseline": str(args.baseline), "baseline_revision": revision or None,
                     "rounds": args.rounds}
    with tempfile.TemporaryDirectory() as tmp:
        figures["selection"] = selection(trees, args.rounds, Path(tmp))
        if args.gpu:
            figures["measurement"] = overhead(trees, args.rounds, Path(tmp))
    device = {"cpu": os.uname().machine, "cores": os.cpu_count()}
    if args.gpu:
        from farm.gpu import list_devices

        found = list_devices()
        device = {**device, **(found[0] if found else {})}
    print(f"wrote {write_result('change_cost', device, figures, args.out)}")


if __name__ == "__main__":
    main()
