"""conv_wgmma_planes without a GPU: conv_wgmma's split backward-weight with each slice's sums
stored into a plane of its own, then summed by a second launch. The GPU check is
tests/test_wgmma_gpu.py."""

from __future__ import annotations

from kernels.conv.params import ConvParams
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_planes import FAMILY, PLANES_BYTES
from kernels.conv.wgmma_red import FAMILY as RED


def problem(**shape):
    base = dict(N=32, C=128, K=128, G=1, H=28, W=28, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op="conv2d_bwd_weight", dtype="bf16", **{**base, **shape})


def test_configs_are_conv_wgmma_red_s_that_end_in_a_launch():
    ours = [i.settings for i in FAMILY.instances("conv2d_bwd_weight", "bf16")]
    assert ours and ours == [i.settings for i in RED.instances("conv2d_bwd_weight", "bf16")
                             if not i.settings["fused_reduce"]]
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_data", "bf16") == []


def test_the_split_launch_then_the_planes_summed():
    p, served = problem(), 0
    n = 128 * 9 * 128
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        served += 1
        split, total = FAMILY.launches(inst, p)
        _, theirs, _ = RED.launches(inst, p)
        keep = [a for a in split.args if not isinstance(a, ConvParams)]
        assert (split.entry, split.grid, split.block, keep) == (
            theirs.entry, theirs.grid, theirs.block,
            [a for a in theirs.args if not isinstance(a, ConvParams)])
        planes = FAMILY.splits(inst, p)[0]
        assert planes > 1
        assert (total.entry, total.args) == ("sum_planes", ("workspace", "dw", n, planes))
        assert FAMILY.workspace_bytes(inst, p) == 4 * n * planes
    assert served


def test_planes_past_the_bound_are_left_to_conv_wgmma_red():
    p = problem(C=512, K=512, H=7, W=7)  # 2.4 M weights: a few planes pass 25 MiB
    refused = [i for i in FAMILY.instances("conv2d_bwd_weight", "bf16")
               if RED.applicable(i, p) is None and FAMILY.applicable(i, p) is not None]
    assert refused
    for inst in refused:
        assert FAMILY.workspace_bytes(inst, p) > PLANES_BYTES
        assert "MiB" in FAMILY.applicable(inst, p)


def test_the_sums_are_plain_stores_in_the_ptx():
    """The split entry stores its fp32 sums: no float atomic or reduction is left."""
    from tests.ptx import ptx_of

    inst = FAMILY.instances("conv2d_bwd_weight", "bf16")[0]
    ours = ptx_of(FAMILY, inst, "wgmma_bwd_weight_split")
    assert "atom.global.add.f32" not in ours and "red.global.add.f32" not in ours
    assert "st.global.v2.f32" in ours or "st.global.f32" in ours
