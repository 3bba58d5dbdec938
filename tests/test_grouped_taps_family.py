"""conv_grouped_taps without a GPU: its configurations, where it refuses (naming the filter,
stride or dilation it is not compiled for), its footprint against conv_grouped_mma's, and a
sample of its code objects compiled for sm_90a with NVRTC without spills. The GPU check is
tests/test_grouped_taps_gpu.py."""

from __future__ import annotations

import dataclasses

import pytest

from kernels.conv.grouped_mma import FAMILY as GROUPED_MMA
from kernels.conv.grouped_taps import FAMILY, FILTERS, STRIDES, resident_blocks, shared_bytes
from kernels.conv.problem import ConvProblem
from tests.nvrtc_check import compile_failures


def problem(**shape):
    base = dict(N=2, C=128, K=128, G=8, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op="conv2d_fwd", dtype="bf16", **{**base, **shape})


def test_configs_cover_every_filter_and_stride_once():
    configs = [i.settings for i in FAMILY.instances("conv2d_fwd", "bf16")]
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs})
    assert {(c["fr"], c["stride"]) for c in configs} == {(f, s) for f in FILTERS
                                                         for s in STRIDES}
    backward = [i.settings for i in FAMILY.instances("conv2d_bwd_data", "bf16")]
    assert {c["stride"] for c in backward} == {1}
    assert len(backward) == len([c for c in configs if c["stride"] == 1])
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    assert FAMILY.instances("conv2d_fwd", "fp32") == []


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
@pytest.mark.parametrize("shape, words", [
    (dict(R=5, S=5, pad_h=2, pad_w=2), "compiled for 3x3"),
    (dict(stride_h=2, stride_w=1), "compiled for 1"),
    (dict(dil_h=2, dil_w=2, pad_h=2, pad_w=2), "dilation 2x2"),
    (dict(C=128, K=256), "differ"),
])
def test_refusals_name_the_problem(op, shape, words):
    p = dataclasses.replace(problem(**shape), op=op)
    for inst in FAMILY.instances(op, "bf16"):
        if (inst.settings["fr"], inst.settings["stride"]) == (3, 1):
            assert words in FAMILY.applicable(inst, p)


def test_footprint_is_conv_grouped_mma_s_and_fits():
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        c = inst.settings
        p = problem(R=c["fr"], S=c["fr"], stride_h=c["stride"], stride_w=c["stride"])
        assert shared_bytes(c) == GROUPED_MMA.shared_bytes(inst, p)
        assert resident_blocks(c) * (shared_bytes(c) + 1024) <= 228 * 1024 or \
            resident_blocks(c) == 1
        if FAMILY.applicable(inst, p) is None:
            assert FAMILY.grid(inst, p)[1] == -(-128 // (c["sg"] * c["width"]))


def test_a_sample_compiles_for_sm_90a_without_spills():
    by_kind = {}
    for inst in FAMILY.instances("conv2d_fwd", "bf16") + FAMILY.instances("conv2d_bwd_data",
                                                                           "bf16"):
        c = inst.settings
        key = (inst.operator, c["fr"], c["stride"], c["stages"])
        if threads_fill(inst) > threads_fill(by_kind.get(key, inst)) or key not in by_kind:
            by_kind[key] = inst
    failures = compile_failures(FAMILY, by_kind.values(), lambda inst: inst.operator,
                                lambda inst: True)
    assert not failures, "\n".join(failures)


def threads_fill(inst) -> int:
    """The accumulators a thread holds: the instances most likely to spill."""
    c = inst.settings
    return c["tile_h"] * c["tile_w"] // 16 // c["warps_m"] * min(c["width"], 32) \
        * resident_blocks(c)
