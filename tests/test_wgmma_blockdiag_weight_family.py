"""conv_wgmma_blockdiag_weight without a GPU: its configurations and rules, its two launches,
and the diagonal blocks of the super-groups' backward-weight (sum_blockdiag_planes' indexing,
replayed in NumPy) giving the grouped backward-weight. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_blockdiag import SUPER
from kernels.conv.wgmma_blockdiag_weight import FAMILY, supergroups, weight_groups_per_super
from kernels.conv.wgmma_planes import FAMILY as PLANES
from kernels.conv.wgmma_planes import planes_bytes
from kernels.family import TensorMap
from tests.test_wgmma_blockdiag_family import grouped_conv

OP = "conv2d_bwd_weight"


def problem(**shape):
    base = dict(N=2, C=128, K=128, G=8, H=14, W=14, R=3, S=3, stride_h=2, stride_w=2,
                pad_h=1, pad_w=1)
    return ConvProblem(op=OP, dtype="bf16", **{**base, **shape})


def test_configs_are_conv_wgmma_planes_64_row_ones():
    ours = [i.settings for i in FAMILY.instances(OP, "bf16")]
    assert len(ours) == 40 and ours == [
        i.settings for i in PLANES.instances(OP, "bf16") if i.settings["block_m"] == 64
        and i.settings["split_k"] in (0, 4) and i.settings["tma"] != 2]
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances(OP, "fp32") == []


def test_refusals():
    inst = FAMILY.instances(OP, "bf16")[0]
    assert "own" in FAMILY.applicable(inst, problem(G=1))
    assert "no 2 or more" in FAMILY.applicable(inst, problem(C=72, K=72, G=4))  # 18 a group
    assert "no 2 or more" in FAMILY.applicable(inst, problem(C=112, K=112, G=7))  # 7 is prime


@pytest.mark.parametrize("C, G, per", [(128, 8, 4), (192, 8, 2), (96, 6, 3), (144, 9, 3),
                                       (48, 6, 6), (440, 55, 5), (784, 49, 0), (128, 32, 16),
                                       (208, 26, 2)])
def test_super_groups(C, G, per):
    """The most groups, 2 or more, that divide G and make whole 8-channel runs within 64."""
    p = problem(C=C, K=C, G=G)
    cg = C // G
    assert weight_groups_per_super(p) == per
    if per:
        assert G % per == 0 and per * cg <= SUPER and per * cg % 8 == 0
        q = supergroups(p)
        assert (q.G, q.c_per_group) == (G // per, per * cg) and supergroups(q) == q
    assert not any(G % n == 0 and n * cg % 8 == 0 for n in range(max(per, 1) + 1,
                                                                   SUPER // cg + 1))


def test_launches_and_one_slice():
    """conv_wgmma's split launch over the super-groups (even where that is one slice), its
    planes in the workspace, then the diagonal blocks' sum."""
    p = problem(C=256, K=512, G=16, N=4)  # 16 channels a group, 32 outputs
    q = supergroups(p)
    assert (q.G, q.c_per_group, q.k_per_group) == (4, 64, 128)
    seen = set()
    for inst in FAMILY.instances(OP, "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        split, total = FAMILY.launches(inst, p)
        slices, per = FAMILY.splits(inst, p)
        seen.add(slices)
        assert split.entry == "wgmma_bwd_weight_split"
        assert split.args[:4] == ("x", "dy", "dw", "workspace")
        assert split.args[5:8] == (per, slices, 0)
        assert split.grid == FAMILY.grid(inst, p) == PLANES.grid(inst, q)
        assert split.grid[2] == q.G * slices
        assert [m.buffer for m in split.args if isinstance(m, TensorMap)] == (
            ["dy"] * (inst.settings["tma"] > 0))
        assert total.entry == "sum_blockdiag_planes"
        assert total.args == ("workspace", "dw", 512, 9, 16, 32, 4, slices)
        assert FAMILY.workspace_bytes(inst, p) == planes_bytes(q, slices) == (
            4 * 512 * 9 * SUPER * slices)
    assert 1 in seen and max(seen) > 1


def grouped_weight_grad(x, dy, G, R, stride, pad):
    """dw [K][R][S][C/G] of the grouped convolution, float64, by its definition."""
    N, H, W, C = x.shape
    K = dy.shape[-1]
    Cg, Kg = C // G, K // G
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    P, Q = dy.shape[1:3]
    dw = np.zeros((K, R, R, Cg))
    for r in range(R):
        for s in range(R):
            win = xp[:, r:r + stride * P:stride, s:s + stride * Q:stride, :].reshape(-1, C)
            for g in range(G):
                dw[g * Kg:(g + 1) * Kg, r, s] = dy.reshape(-1, K)[:, g * Kg:(g + 1) * Kg].T @ \
                    win[:, g * Cg:(g + 1) * Cg]
    return dw


def sum_blockdiag_planes(planes, K, RS, Cg, Kg, per):
    """sum_blockdiag_planes' loop, element by element as the kernel reads and writes them."""
    flat, width = planes.reshape(len(planes), -1), per * Cg
    out = np.zeros(K * RS * Cg)
    for i in range(out.size):
        krs, c = divmod(i, Cg)
        k = krs // RS
        out[i] = sum(plane[krs * width + (k // Kg) % per * Cg + c] for plane in flat)
    return out.reshape(K, 3, 3, Cg)


@pytest.mark.parametrize("C, K, G", [(64, 64, 4), (128, 256, 16), (128, 128, 32), (64, 128, 8),
                                     (96, 96, 6), (144, 144, 9), (48, 48, 6), (208, 104, 26)])
def test_diagonal_blocks_of_the_super_groups_weight_grad_are_the_grouped_one(C, K, G):
    per = weight_groups_per_super(problem(C=C, K=K, G=G))
    rng = np.random.default_rng(C + K + G)
    x = rng.standard_normal((2, 7, 6, C))
    w = rng.standard_normal((K, 3, 3, C // G))
    dy = rng.standard_normal(grouped_conv(x, w, G, stride=2, pad=1).shape)
    want = grouped_weight_grad(x, dy, G, 3, 2, 1)
    wide = grouped_weight_grad(x, dy, G // per, 3, 2, 1)  # the super-groups' dw'
    parts = rng.standard_normal((3, *wide.shape))  # three slices' planes that sum to dw'
    parts[-1] = wide - parts[:-1].sum(0)
    got = sum_blockdiag_planes(parts, K, 9, C // G, K // G, per)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
