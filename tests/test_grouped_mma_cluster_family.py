"""conv_grouped_mma_cluster without a GPU: its configurations, where it runs, its grid and
launch, the shared memory that holds its sums, features and toy cost, and its code objects
compiled for sm_90a with NVRTC (no spills). The GPU check is tests/test_grouped_mma_gpu.py."""

from __future__ import annotations

import math

from kernels.conv.grouped_mma import SMEM_OPT_IN, WEIGHT_FAMILY
from kernels.conv.grouped_mma_cluster import FAMILY, MAX_THREADS, threads
from kernels.conv.problem import ConvProblem
from tests.nvrtc_check import compile_failures

OP = "conv2d_bwd_weight"


def problem(**shape):
    base = dict(N=32, C=512, K=512, G=32, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=OP, dtype="bf16", **{**base, **shape})


def test_configs_and_targets():
    instances = FAMILY.instances(OP, "bf16")
    assert len(instances) == len({i.name for i in instances}) == 168
    assert all(threads(i.settings) <= MAX_THREADS for i in instances)
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances(OP, "fp32") == []
    for i in instances:
        defines = FAMILY.defines(i)
        assert defines["CLUSTER"] == i.settings["cluster"] in (4, 8)
        assert defines["STAGES"] == i.settings["stages"] and "SPLIT_TILES" not in defines
    assert FAMILY.unsupported_target("sm_90a") is None
    assert "sm_90a" in FAMILY.unsupported_target("sm_80")


def test_grid_launch_and_shared_memory():
    """One cluster a slab and tap slice, one launch, no workspace; the staged ring holds the
    block's fp32 sums at the end."""
    for inst in FAMILY.instances(OP, "bf16"):
        c = inst.settings
        for p in (problem(), problem(N=1, H=7, W=7, C=1024, K=1024),
                  problem(C=144, K=144, G=9, H=56, W=56, stride_h=2, stride_w=2)):
            if FAMILY.applicable(inst, p):
                continue
            slab = c["sg"] * c["width"]
            assert FAMILY.grid(inst, p) == (c["cluster"], -(-p.C // slab), -(-9 // c["taps"]))
            assert FAMILY.workspace_bytes(inst, p) == 0
            (launch,) = FAMILY.launches(inst, p)
            assert launch.entry == "grouped_mma_bwd_weight_cluster"
            assert launch.args[:3] == ("x", "dy", "dw")
            assert launch.block == (threads(c), 1, 1)
            assert 4 * c["taps"] * slab * c["width"] <= launch.shared_bytes <= SMEM_OPT_IN


def test_rules_are_conv_grouped_mma_s():
    inst = FAMILY.instances(OP, "bf16")[0]
    for shape in (dict(C=128, K=256, G=32), dict(C=96, K=96, G=4), dict(C=12, K=12, G=3)):
        p = problem(**shape)
        assert FAMILY.applicable(inst, p) == WEIGHT_FAMILY.applicable(inst, p) is not None


def test_features_and_toy_cost_model():
    from kernels.conv.cost_model import synthetic_us
    from kernels.registry import operator_spec

    spec = operator_spec(OP)
    small, large = problem(N=8, H=7, W=7), problem(N=32, H=56, W=56)
    for inst in FAMILY.instances(OP, "bf16"):
        f = spec.instance_features(inst.settings)
        assert f["split"] == inst.settings["cluster"] and f["threads"] == threads(
            inst.settings)
        assert math.isfinite(synthetic_us(small, inst))
        assert synthetic_us(large, inst) > synthetic_us(small, inst)


def test_code_objects_compile_for_sm_90a_without_spills():
    """One code object per packing, tile size and ring depth; the GPU test compiles and
    verifies every one."""
    picked = {}
    for inst in FAMILY.instances(OP, "bf16"):
        c = inst.settings
        picked.setdefault((c["width"], c["taps"], c["sg"], c["kq"], c["stages"]), inst)
    failures = compile_failures(FAMILY, picked.values(),
                                lambda inst: "grouped_mma_bwd_weight_cluster")
    assert not failures, "\n".join(failures[:20])
