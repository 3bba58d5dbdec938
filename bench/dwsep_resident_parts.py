"""Where dwsep_wgmma_resident's time goes: the kernel timed whole and with parts of its work cut
out of its source, side by side in one run on the wide pairs where it is the best family.

Variants (each a copy of wgmma_resident.cu, compiled as a family of its own):
- full: the kernel as shipped;
- nocopy: the producers copy no pointwise weight (the wgmma reads stale stages);
- nogemm: the consumers issue no wgmma (fence, commit and wait stay);
- nofill: the producers write zeros instead of the depthwise values;
- nofill_nocopy: neither, so the consumers' wgmma, the barriers and the epilogue are left.
A cut variant computes wrong outputs: it is timed, never verified; only `full` is the kernel's
time. The same farm timing policy as bench/vs_vendor.py (cold L2, medians).

Usage: python -m bench.dwsep_resident_parts [--out DIR] [--name dwsep_resident_parts_n32]
"""

from __future__ import annotations

import argparse

import farm.measure
from bench.common import write_result
from bench.vs_vendor import POLICY
from farm.worker import GpuWorker
from kernels.dwsep.families import DwsepWgmmaResident
from kernels.registry import operator_spec, register

OP = "dwsep_fwd"
FILL = "fill_chunk(resident + c * CHUNK_BYTES, t, rows, x, w_dw, scale, shift, p, c * 64);"
ZEROS = ("for (int i = t; i < TILE_P * 8; i += PRODUCER_THREADS) *reinterpret_cast<uint4*>("
         "resident + c * CHUNK_BYTES + 16 * i) = make_uint4(0u, 0u, 0u, 0u);")
COPY = "load_weight(stages + s * STAGE_BYTES, w_pw, p, k0, c * 64, t);"
GEMM = "for (int kk = 0; kk < 4; ++kk) wgmma_k16(acc, da + 2 * kk, db + 2 * kk);"
CUTS = {"full": {}, "nocopy": {COPY: ""}, "nogemm": {GEMM: ""}, "nofill": {FILL: ZEROS},
        "nofill_nocopy": {FILL: ZEROS, COPY: ""}}
CONFIGS = [dict(tile_p=64, tile_n=256, producers=2, stages=3, filter=3, k_blocks=1),
           dict(tile_p=64, tile_n=256, producers=2, stages=3, filter=3, k_blocks=2),
           dict(tile_p=64, tile_n=128, producers=2, stages=2, filter=3, k_blocks=2)]
SHAPES = [dict(N=32, C=728, H=19, W=19, K=728), dict(N=32, C=728, H=37, W=37, K=728),
          dict(N=32, C=1536, H=10, W=10, K=2048),
          dict(N=32, C=512, H=14, W=14, K=512, activation="relu6")]


def variant(tag: str, cuts: dict[str, str]) -> DwsepWgmmaResident:
    """wgmma_resident.cu with `cuts` replaced, as family resident_<tag> (kernel of that name)."""

    class Cut(DwsepWgmmaResident):
        name = short = f"resident_{tag}"

        def source(self) -> str:
            text = super().source()
            for old, new in cuts.items():
                if old not in text:
                    raise SystemExit(f"wgmma_resident.cu no longer has {old!r}")
                text = text.replace(old, new)
            return text.replace("dwsep_wgmma_resident(", f"{self.name}(")

        def configs(self, operator: str) -> list[dict]:
            return [c for c in super().configs(operator)
                    if any(all(c[k] == v for k, v in want.items()) for want in CONFIGS)]

    return register(Cut())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--name", default="dwsep_resident_parts_n32")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    families = [variant(tag, cuts) for tag, cuts in CUTS.items()]
    verify = farm.measure.ProblemBench.verify
    worker, spec, rows = GpuWorker(), operator_spec(OP), []
    for fields in SHAPES:
        problem = spec.problem("bf16", {"R": 3, "S": 3, "pad": 1, "pw_bias": 1, **fields})
        for family in families:
            # the cut variants compute wrong values: timed, not verified
            farm.measure.ProblemBench.verify = (
                verify if family.name == "resident_full" else lambda bench: (0.0, None))
            for instance, result in worker.measure_problem(
                    problem, family.instances(OP, "bf16"), POLICY):
                if result.status == "unsupported":
                    continue
                rows.append({"problem": problem.label(), "variant": family.name[9:],
                             "config": instance.name.split("bf16_", 1)[1],
                             "status": result.status, "median_us": result.median_us})
                print(f"{problem.label():38} {rows[-1]['variant']:14} {rows[-1]['config'][:70]:70}"
                      f" {result.median_us or float('nan'):8.1f}", flush=True)
    farm.measure.ProblemBench.verify = verify
    path = write_result(args.name, worker.fingerprint, {"policy": POLICY.model_dump(),
                                                        "rows": rows}, args.out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
