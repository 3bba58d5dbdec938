"""conv_wgmma_red without a GPU: conv_wgmma's split backward-weight with its sums added by
reductions that return nothing. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.params import ConvParams
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import FAMILY as WGMMA
from kernels.conv.wgmma_red import FAMILY


def problem(**shape):
    base = dict(N=32, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op="conv2d_bwd_weight", dtype="bf16", **{**base, **shape})


def twin(inst):
    """conv_wgmma's instance of the same configuration."""
    return WGMMA.instance(inst.operator, inst.dtype, inst.settings)


def test_configs_are_conv_wgmma_s_split_ones():
    instances = FAMILY.instances("conv2d_bwd_weight", "bf16")
    split = [i for i in WGMMA.instances("conv2d_bwd_weight", "bf16") if i.settings["split_k"] != 1]
    assert [i.settings for i in instances] == [i.settings for i in split]
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_data", "bf16") == []
    assert len({i.source_hash for i in instances}) == 1
    assert instances[0].source_hash != split[0].source_hash


def described(launches):
    """The launches less their parameter records (compared by identity)."""
    return [(x.entry, x.grid, x.block, x.shared_bytes,
             tuple(a for a in x.args if not isinstance(a, ConvParams))) for x in launches]


def test_launches_are_conv_wgmma_s_where_the_reduction_splits():
    p = problem()
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        assert FAMILY.applicable(inst, p) == WGMMA.applicable(twin(inst), p)
        if FAMILY.applicable(inst, p) is None:
            assert FAMILY.splits(inst, p)[0] > 1
            assert described(FAMILY.launches(inst, p)) == described(WGMMA.launches(twin(inst), p))
            assert FAMILY.workspace_bytes(inst, p) == WGMMA.workspace_bytes(twin(inst), p)


def test_a_reduction_of_one_slice_is_left_to_conv_wgmma():
    """A problem whose reduction is one k-tile cannot split: conv_wgmma runs it unsplit."""
    p = problem(N=1, H=4, W=4)
    inst = FAMILY.instances("conv2d_bwd_weight", "bf16")[0]
    assert FAMILY.splits(inst, p)[0] == 1
    assert "not split" in FAMILY.applicable(inst, p)


@pytest.mark.parametrize("entry", ["wgmma_bwd_weight_split"])
def test_the_sums_are_reductions_in_the_ptx(entry):
    """The split entry adds its fp32 sums with red.global.add.f32 and keeps one atomic, the
    tiles' count; conv_wgmma's own code adds them with atom.global.add.f32."""
    from tests.ptx import ptx_of

    inst = next(i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
                if i.settings["fused_reduce"])
    ours, theirs = ptx_of(FAMILY, inst, entry), ptx_of(WGMMA, twin(inst), entry)
    assert "red.global.add.f32" in ours and "atom.global.add.f32" not in ours
    assert "atom.global.add.u32" in ours or "atom.global.add.s32" in ours
    assert "atom.global.add.f32" in theirs
