"""conv_wgmma_blockdiag_bwd_weight without a GPU: its configurations and rules, its three
launches, and the extraction (extract_blockdiag's arithmetic, replayed in NumPy) giving the
grouped backward-weight from the super-groups' one. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_blockdiag import SUPER, supergroups
from kernels.conv.wgmma_blockdiag_bwd_weight import FAMILY
from kernels.conv.wgmma_red import FAMILY as RED


def problem(**shape):
    base = dict(N=32, C=256, K=256, G=32, H=56, W=56, R=3, S=3, stride_h=2, stride_w=2,
                pad_h=1, pad_w=1)
    return ConvProblem(op="conv2d_bwd_weight", dtype="bf16", **{**base, **shape})


def test_configs_are_conv_wgmma_red_s_that_end_in_a_launch():
    ours = [i.settings for i in FAMILY.instances("conv2d_bwd_weight", "bf16")]
    assert ours and ours == [i.settings for i in RED.instances("conv2d_bwd_weight", "bf16")
                             if not i.settings["fused_reduce"] and i.settings["tma"] != 2]
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_data", "bf16") == []


def test_refusals():
    inst = FAMILY.instances("conv2d_bwd_weight", "bf16")[0]
    assert "own" in FAMILY.applicable(inst, problem(G=1))
    assert "own" in FAMILY.applicable(inst, problem(G=4))  # 64 channels a group
    assert "divide" in FAMILY.applicable(inst, problem(C=192, K=192, G=8))  # 24 a group
    assert "multiple of 64" in FAMILY.applicable(inst, problem(C=96, K=96, G=6))
    assert "not split" in FAMILY.applicable(inst, problem(N=1, H=4, W=4, stride_h=1,
                                                          stride_w=1))


def test_launches_are_conv_wgmma_red_s_on_the_super_groups_then_the_extraction():
    p = problem()
    q = supergroups(p)
    assert (q.G, q.c_per_group, q.k_per_group) == (4, 64, 64)
    served = 0
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        assert FAMILY.applicable(inst, p) == RED.applicable(inst, q)
        if FAMILY.applicable(inst, p):
            continue
        served += 1
        zero, split, extract = FAMILY.launches(inst, p)
        theirs = RED.launches(inst, q)
        assert [x.entry for x in theirs] == ["igemm_zero", "wgmma_bwd_weight_split",
                                             "igemm_reduce"]
        assert (zero.args, split.grid, split.args[:4]) == (
            theirs[0].args, theirs[1].grid, theirs[1].args[:4])
        assert extract.entry == "extract_blockdiag"
        assert extract.args == ("workspace", "dw", 256, 9, 8, 8)
        assert FAMILY.workspace_bytes(inst, p) == 4 * 256 * 9 * SUPER
        assert FAMILY.splits(inst, p) == RED.splits(inst, q)
    assert served


def extract_blockdiag(ws, K, RS, Cg, Kg):
    """extract_blockdiag's loop, element by element as the kernel writes them."""
    flat, out = ws.reshape(-1), np.zeros(K * RS * Cg, ws.dtype)
    for i in range(out.size):
        krs, c = divmod(i, Cg)
        k = krs // RS
        out[i] = flat[krs * 64 + (k // Kg) % (64 // Cg) * Cg + c]
    return out


def grouped_weight_grad(x, dy, G, R, S, stride, pad):
    """dw [K][R][S][C/G] of the grouped convolution of x [N][H][W][C], float64."""
    N, H, W, C = x.shape
    _, P, Q, K = dy.shape
    Cg, Kg = C // G, K // G
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    dw = np.zeros((K, R, S, Cg))
    for r in range(R):
        for s in range(S):
            win = xp[:, r:r + stride * P:stride, s:s + stride * Q:stride, :].reshape(-1, C)
            for g in range(G):
                dw[g * Kg:(g + 1) * Kg, r, s, :] = dy.reshape(-1, K)[:, g * Kg:(g + 1) * Kg].T \
                    @ win[:, g * Cg:(g + 1) * Cg]
    return dw


@pytest.mark.parametrize("C, K, G", [(64, 64, 4), (128, 256, 16), (128, 128, 4), (64, 64, 8)])
def test_the_super_groups_block_diagonal_is_the_grouped_weight_gradient(C, K, G):
    rng = np.random.default_rng(C + K + G)
    x = rng.standard_normal((2, 7, 6, C))
    dy = rng.standard_normal((2, 4, 3, K))
    want = grouped_weight_grad(x, dy, G, 3, 3, stride=2, pad=1)
    wide = grouped_weight_grad(x, dy, C // SUPER, 3, 3, stride=2, pad=1)  # K x 3 x 3 x 64
    got = extract_blockdiag(wide, K, 9, C // G, K // G).reshape(K, 3, 3, C // G)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
