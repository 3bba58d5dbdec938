"""bench/wave_fill.py and the hooks it reads: convolution labels read back into problems, and
the waves of the persistent Hopper families' launch geometry."""

import pytest

from bench.wave_fill import fill, shapes, summary
from farm.problems import ProblemError
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import FAMILY
from kernels.conv.wgmma_cluster import FAMILY as CLUSTER
from kernels.registry import get_family, operator_spec


@pytest.mark.parametrize("shape", [
    dict(N=32, C=256, K=256, G=1, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=8, C=64, K=96, G=4, H=17, W=15, R=5, S=3, stride_h=2, stride_w=2, pad_h=2,
         pad_w=1, dil_h=2, dil_w=3),
    dict(N=1, C=768, K=3072, G=1, H=7, W=7, R=1, S=1)])
def test_labels_read_back(shape):
    for op in ("conv2d_fwd", "conv2d_bwd_weight"):
        p = ConvProblem(op=op, dtype="bf16", **shape)
        assert operator_spec(op).problem_from_label("bf16", p.label()) == p
    with pytest.raises(ProblemError, match="not a convolution's label"):
        operator_spec("conv2d_fwd").problem_from_label("bf16", "N32 C8")


def instance(family, op, **settings):
    return next(i for i in family.instances(op, "bf16")
                if all(i.settings.get(k) == v for k, v in settings.items()))


def test_waves_count_tiles_over_the_resident_slots():
    # forward 1x1: 6,272 pixels x 256 outputs in 128 x 128 tiles, one block a multiprocessor
    p = operator_spec("conv2d_fwd").problem_from_label("bf16", "N32 C1024 K256 G1 14x14 1x1")
    inst = instance(FAMILY, "conv2d_fwd", block_m=128, block_n=128, wg_m=64, stages=7,
                    producers=1, tma=2)
    assert FAMILY.waves(inst, p) == (98, 132) and fill(98, 132) == pytest.approx(98 / 132)
    # the cluster family: every tile's blocks, K/G x C/G R S = 256 x 2304 in 256 x 128 tiles
    q = operator_spec("conv2d_bwd_weight").problem_from_label(
        "bf16", "N32 C256 K256 G1 14x14 3x3 p1x1")
    inst = instance(CLUSTER, "conv2d_bwd_weight", block_m=256, block_n=128, cluster=4, tma=1)
    assert CLUSTER.waves(inst, q) == (72, 132)
    naive = get_family("conv_naive").instances("conv2d_fwd", "bf16")[0]
    assert get_family("conv_naive").waves(naive, p) is None  # a family that does not say


def test_rows_and_summary_from_a_run():
    best = instance(FAMILY, "conv2d_fwd", block_m=128, block_n=128, wg_m=64, stages=7,
                    producers=1, tma=2).name
    naive = get_family("conv_naive").instances("conv2d_fwd", "bf16")[0].name
    run = {"figures": {"shapes": [
        {"op": "conv2d_fwd", "batch": 32, "problem": "N32 C1024 K256 G1 14x14 1x1",
         "kind": "dense", "best_instance": best, "speedup": 0.9},
        {"op": "conv2d_fwd", "batch": 32, "problem": "N32 C64 K64 G64 56x56 3x3 p1x1",
         "kind": "depthwise", "best_instance": best, "speedup": 1.5},
        {"op": "conv2d_fwd", "batch": 32, "problem": "N32 C32 K32 G1 7x7 1x1",
         "kind": "dense", "best_instance": naive, "speedup": 0.5},
        {"op": "conv2d_fwd", "batch": 32, "problem": "N32 C256 K256 G1 56x56 1x1",
         "kind": "dense", "best_instance": best, "speedup": 1.1}]}}
    rows = shapes([run], ["dense"])
    # 100,352 pixels x 256 outputs: 1,568 tiles in 12 waves of 132; the naive one says none
    assert [r["work"] for r in rows] == [98, 1568]
    assert rows[1]["fill"] == pytest.approx(1568 / (12 * 132))
    [(op, s)] = summary(rows, 0.75).items()
    assert op == "conv2d_fwd" and s["below"] == 1
    assert s["speedup_below"] == pytest.approx(0.9) and s["speedup_rest"] == pytest.approx(1.1)
