"""conv_pointwise_cluster without a GPU: its configurations, rules, grid and shared memory. The
GPU check is tests/test_pointwise_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.pointwise_cluster import FAMILY, MAX_PIXELS, shared_bytes
from kernels.conv.problem import ConvProblem

OPS = ("conv2d_fwd", "conv2d_bwd_data")


def problem(op, **shape):
    base = dict(N=32, C=48, K=1152, G=1, H=1, W=1, R=1, S=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


@pytest.mark.parametrize("op", OPS)
def test_configs(op):
    instances = FAMILY.instances(op, "bf16")
    assert len(instances) == len({i.name for i in instances}) == 36
    assert FAMILY.instances(op, "fp32") == []
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    assert {FAMILY.defines(i)["CONV_OP"] for i in instances} == {OPS.index(op)}
    assert FAMILY.unsupported_target("sm_90a") is None
    assert FAMILY.unsupported_target("sm_80") is not None


def test_refusals():
    inst = FAMILY.instances("conv2d_bwd_data", "bf16")[0]
    assert FAMILY.applicable(inst, problem("conv2d_bwd_data")) is None
    assert FAMILY.applicable(inst, problem("conv2d_bwd_data", N=1, H=64, W=64)) is None
    big = problem("conv2d_bwd_data", N=2, H=64, W=64)  # 8192 pixels
    assert str(MAX_PIXELS) in FAMILY.applicable(inst, big)
    assert "multiples of 8" in FAMILY.applicable(inst, problem("conv2d_bwd_data", C=10))
    refusal = FAMILY.applicable(inst, problem("conv2d_bwd_data", R=3, S=3, pad_h=1, pad_w=1))
    assert "1x1 convolutions of stride 1" in refusal


def test_grid_and_shared_memory():
    """A cluster's blocks for each tile of the output's channels (forward K, backward-data C),
    tiles of pixels along y; the stages or the tile's fp32 sums, whichever is larger."""
    for op, outputs in (("conv2d_fwd", 1152), ("conv2d_bwd_data", 48)):
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            x, y, z = FAMILY.grid(inst, problem(op))
            assert x == c["cluster"] * -(-outputs // c["tn"]) and y == -(-32 // c["tm"]) and z == 1
            assert shared_bytes(c, op) >= 4 * c["tm"] * c["tn"]
            assert shared_bytes(c, op) <= 227 * 1024
    c = {"cluster": 4, "tm": 16, "tn": 64, "stages": 2}
    assert shared_bytes(c, "conv2d_fwd") == 2 * 2 * (16 * 72 + 64 * 72)
    assert shared_bytes(c, "conv2d_bwd_data") == 2 * 2 * (16 * 72 + 64 * 72)
    c = {"cluster": 4, "tm": 16, "tn": 128, "stages": 3}
    assert shared_bytes(c, "conv2d_bwd_data") == 2 * 3 * (16 * 72 + 64 * 136)


def test_features_and_toy_cost_model():
    """The selection features: a block of 128 threads, the tile, the cluster as the split; the
    toy cost model prices every instance and favours the larger clusters."""
    import math

    from kernels.conv.cost_model import synthetic_us
    from kernels.registry import operator_spec

    for op in OPS:
        spec, p = operator_spec(op), problem(op)
        times = {}
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            f = spec.instance_features(c)
            assert (f["threads"], f["tile_m"], f["tile_n"], f["split"]) == (
                128, c["tm"], c["tn"], c["cluster"])
            times[c["cluster"]] = synthetic_us(p, inst)
            assert math.isfinite(times[c["cluster"]])
        assert times[8] < times[2]
