"""SYNTHETIC replay recordings for the farm's tests: invented timings from a toy model, never a
measurement. The environment says so ("SYNTHETIC test GPU (not measured)"), the metadata has
synthetic=true, and find_recording() never offers one to `farm run` or `farm demo`.

    python -m tests.data.synthetic_recording   # rewrites tests/data/synthetic_recording.parquet

conv_faulty instances get the statuses a GPU gives them, with the replay device's faults:
out_of_bounds ends the process ("exit"), hang never returns ("hang").
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd

from kernels.conv.problem import ConvProblem
from farm.recording import write_recording
from farm.specs import load_spec
from farm.timing import TimingPolicy
from kernels.family import Instance

HERE = Path(__file__).resolve().parent
SYNTHETIC_FILE = HERE / "synthetic_recording.parquet"
ENVIRONMENT = {"fingerprint": "synthetic0000000000000000000000000", "arch": "sm_90",
               "gpu_name": "SYNTHETIC test GPU (not measured)", "sm_count": 132,
               "driver": "synthetic", "compiler": "synthetic", "runtime": "synthetic",
               "farm_version": "0", "details": {}}
FAULTS = {0: ("ok", None), 1: ("wrong_result", None), 2: ("wrong_result", None),
          3: ("launch_error", "exit"), 4: ("timeout", "hang")}
NOTE = "SYNTHETIC: invented timings for the farm's tests; not measured on any GPU"


def _fraction(*parts: str) -> float:
    digest = hashlib.sha256("|".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def row(problem: ConvProblem, instance: Instance) -> dict:
    status, fault = "ok", None
    if instance.family == "conv_faulty":
        status, fault = FAULTS[instance.settings["fault"]]
    efficiency = 0.02 + 0.6 * _fraction(instance.name, problem.key)
    median = problem.flops / (400e12 * efficiency) * 1e6 + 4.0
    timed = status == "ok"
    return {"family": instance.family, "instance": instance.name, "kernel_key": instance.key,
            "operator": instance.operator, "dtype": instance.dtype,
            "config": json.dumps({"dtype": instance.dtype, **instance.settings}, sort_keys=True),
            "source_hash": instance.source_hash, "layout": problem.layout,
            "shape": json.dumps(problem.shape()), "problem_key": problem.key,
            "status": status, "median_us": median if timed else None,
            "min_us": median * 0.98 if timed else None,
            "max_us": median * 1.2 if timed else None,
            "p90_us": median * 1.03 if timed else None, "samples": 20 if timed else 0,
            "spread": 0.05 if timed else None,
            "tflops": problem.flops / median / 1e6 if timed else None,
            "gbps": problem.min_bytes / median / 1e3 if timed else None,
            "verify_error": 1e-3 if timed else None,
            "message": None if timed else f"synthetic {status}",
            "policy": json.dumps(TimingPolicy().model_dump()), "telemetry": "{}",
            "fault": fault}


def build(pairs: list[tuple[ConvProblem, Instance]], out: Path) -> Path:
    frame = pd.DataFrame([row(p, i) for p, i in pairs])
    return write_recording(frame, ENVIRONMENT, [], out, note=NOTE, synthetic=True)


def standard_pairs(families: tuple[str, ...] = ("conv_naive", "vendor")
                   ) -> list[tuple[ConvProblem, Instance]]:
    """The standard sweep's pairs of a few stable families (the file stays small; a replay
    answers not_recorded for the other families' pairs)."""
    from farm.cluster.pairs import select_instances

    pairs = []
    for spec_file in ("all_networks_fwd", "all_networks_bwd_data", "all_networks_bwd_weight"):
        resolved = load_spec(HERE.parents[1] / "jobs" / "examples" / f"{spec_file}.yaml")
        instances = [i for i in select_instances(resolved.spec) if i.family in families]
        pairs += [(p, i) for p in resolved.problems for i in instances]
    return pairs


if __name__ == "__main__":
    path = build(standard_pairs(), SYNTHETIC_FILE)
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
