"""conv_wgmma_cluster without a GPU: its configurations, grid and launch. The GPU check is
tests/test_wgmma_gpu.py."""

from __future__ import annotations

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import SMEM_OPT_IN, shared_bytes
from kernels.conv.wgmma_cluster import FAMILY


def problem(**shape):
    base = dict(N=32, C=1024, K=256, G=1, H=14, W=14, R=1, S=1)
    return ConvProblem(op="conv2d_bwd_weight", dtype="bf16", **{**base, **shape})


def test_configs():
    instances = FAMILY.instances("conv2d_bwd_weight", "bf16")
    assert len(instances) == len({i.name for i in instances}) == 54
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_weight", "fp32") == []
    for i in instances:
        c = i.settings
        assert shared_bytes(c) <= SMEM_OPT_IN and c["tma"] in (1, 2)
        # the tile's fp32 sums fit in the stages they are left in
        assert 4 * c["block_m"] * c["block_n"] <= c["stages"] * (c["block_m"] + c["block_n"]) * 128
        defines = FAMILY.defines(i)
        assert defines["IGEMM_OP"] == 2 and defines["CLUSTER"] == c["cluster"]
        assert "SPLIT_K" not in defines and "FUSED_REDUCE" not in defines


def test_grid_and_launch():
    """A cluster of blocks for each tile of dw (K/G by C/G R S), the groups along z; one launch
    and no workspace."""
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        c = inst.settings
        for p in (problem(), problem(G=4, C=512, K=512, R=3, S=3, pad_h=1, pad_w=1)):
            tiles = -(-p.k_per_group // c["block_m"]) * -(-p.c_per_group * p.R * p.S
                                                        // c["block_n"])
            assert FAMILY.grid(inst, p) == (c["cluster"] * tiles, 1, p.G)
            assert FAMILY.workspace_bytes(inst, p) == 0
            (launch,) = FAMILY.launches(inst, p)
            assert launch.entry == "wgmma_bwd_weight_cluster"
            assert launch.args[:3] == ("x", "dy", "dw")
            assert len(launch.args) == 4 + c["tma"]  # the tensor maps of dy, and of x with tma 2


def test_rules_are_conv_wgmma_s():
    inst = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16") if i.settings["tma"] == 2)
    assert FAMILY.applicable(inst, problem()) is None
    assert "tma=2" in FAMILY.applicable(inst, problem(R=3, S=3, pad_h=1, pad_w=1))
    assert "multiple of 8" in FAMILY.applicable(inst, problem(C=1020))


def test_features_and_toy_cost_model():
    import math

    from kernels.conv.cost_model import synthetic_us
    from kernels.registry import operator_spec

    spec = operator_spec("conv2d_bwd_weight")
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        c = inst.settings
        f = spec.instance_features(c)
        assert f["split"] == c["cluster"] and f["tile_m"] == c["block_m"]
        assert math.isfinite(synthetic_us(problem(), inst))
