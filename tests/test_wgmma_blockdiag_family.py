"""conv_wgmma_blockdiag without a GPU: its configurations and rules, its two launches, and the
block-diagonal filter (expand_blockdiag's arithmetic, replayed in NumPy) giving the grouped
convolution as the super-groups' one. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_blockdiag import FAMILY, SUPER, supergroups
from kernels.conv.wgmma_im2col import FAMILY as IM2COL
from kernels.family import TensorMap


def problem(op="conv2d_fwd", **shape):
    base = dict(N=2, C=128, K=128, G=8, H=14, W=14, R=3, S=3, stride_h=2, stride_w=2,
                pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


def test_configs_are_conv_wgmma_im2col_s_unsplit_forward_ones():
    ours = [i.settings for i in FAMILY.instances("conv2d_fwd", "bf16")]
    assert ours and ours == [i.settings for i in IM2COL.instances("conv2d_fwd", "bf16")
                             if i.settings["split_k"]]
    assert FAMILY.instances("conv2d_bwd_data", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []


def test_refusals():
    inst = FAMILY.instances("conv2d_fwd", "bf16")[0]
    assert "own" in FAMILY.applicable(inst, problem(G=1))
    assert "own" in FAMILY.applicable(inst, problem(G=2))  # 64 channels a group
    assert "divide" in FAMILY.applicable(inst, problem(C=192, K=192, G=8))  # 24 a group
    assert "multiple of 64" in FAMILY.applicable(inst, problem(C=96, K=96, G=6))


def test_launches():
    """The filter expanded into the workspace, then conv_wgmma_im2col's launch over the
    super-groups with the workspace in the filter's place."""
    p = problem(C=256, K=512, G=16)  # 16 channels a group, 32 outputs
    q = supergroups(p)
    assert (q.G, q.c_per_group, q.k_per_group) == (4, 64, 128)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        expand, main = FAMILY.launches(inst, p)
        assert expand.entry == "expand_blockdiag"
        assert expand.args == ("w", "workspace", 512, 9, 16, 32)
        assert FAMILY.workspace_bytes(inst, p) == 2 * 512 * 9 * SUPER
        (theirs,) = IM2COL.launches(inst, q)
        assert (main.entry, main.grid, main.block) == (theirs.entry, theirs.grid, theirs.block)
        assert main.args[:3] == ("x", "workspace", "y")
        maps = [a for a in main.args if isinstance(a, TensorMap)]
        assert [m.buffer for m in maps] == ["x", "workspace"]
        assert maps[1].dims == (SUPER * 9, 512)
        assert FAMILY.grid(inst, p) == IM2COL.grid(inst, q)


def expand_blockdiag(w, K, RS, Cg, Kg):
    """expand_blockdiag's loop, chunk by chunk of 8 elements as the kernel writes them."""
    flat, out = w.reshape(-1), np.zeros(K * RS * 64, w.dtype)
    for i in range(K * RS * 8):
        krs, k = i >> 3, (i >> 3) // RS
        c0 = (i & 7) * 8 - (k // Kg) % (64 // Cg) * Cg
        for t in range(8):
            c = c0 + t
            out[i * 8 + t] = flat[krs * Cg + c] if 0 <= c < Cg else 0
    return out.reshape(K, RS // 3, 3, 64) if RS % 3 == 0 else out


def grouped_conv(x, w, G, stride=1, pad=0):
    """y = the grouped convolution of x [N][H][W][C] with w [K][R][S][C/G], float64."""
    N, H, W, C = x.shape
    K, R, S, Cg = w.shape
    Kg = K // G
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    P, Q = (H + 2 * pad - R) // stride + 1, (W + 2 * pad - S) // stride + 1
    y = np.zeros((N, P, Q, K))
    for r in range(R):
        for s in range(S):
            win = xp[:, r:r + stride * P:stride, s:s + stride * Q:stride, :]
            for g in range(G):
                y[..., g * Kg:(g + 1) * Kg] += win[..., g * Cg:(g + 1) * Cg] @ w[
                    g * Kg:(g + 1) * Kg, r, s, :].T
    return y


@pytest.mark.parametrize("C, K, G", [(64, 64, 4), (128, 256, 16), (128, 128, 4), (64, 64, 8),
                                     (64, 128, 16)])
def test_super_groups_of_the_block_diagonal_filter_are_the_grouped_convolution(C, K, G):
    rng = np.random.default_rng(C + K + G)
    x = rng.standard_normal((2, 7, 6, C))
    w = rng.standard_normal((K, 3, 3, C // G))
    wide = expand_blockdiag(w, K, 9, C // G, K // G).reshape(K, 3, 3, SUPER)
    want = grouped_conv(x, w, G, stride=2, pad=1)
    got = grouped_conv(x, wide, C // SUPER, stride=2, pad=1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
