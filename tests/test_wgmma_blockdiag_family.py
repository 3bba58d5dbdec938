"""conv_wgmma_blockdiag without a GPU: its configurations and rules, its two launches, and the
block-diagonal filter (expand_blockdiag's arithmetic, replayed in NumPy) giving the grouped
convolution as the super-groups' one. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_blockdiag import (FAMILY, SUPER, groups_per_super, padded,
                                           padded_width)
from kernels.conv.wgmma_im2col import FAMILY as IM2COL
from kernels.family import TensorMap


def problem(op="conv2d_fwd", **shape):
    base = dict(N=2, C=128, K=128, G=8, H=14, W=14, R=3, S=3, stride_h=2, stride_w=2,
                pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


def test_configs_are_conv_wgmma_im2col_s_unsplit_forward_ones_with_and_without_w_s_tiles():
    ours = [i.settings for i in FAMILY.instances("conv2d_fwd", "bf16")]
    theirs = [i.settings for i in IM2COL.instances("conv2d_fwd", "bf16") if i.settings["split_k"]]
    assert ours and ours == [{**c, "fused_filter": f} for f in (0, 1) for c in theirs]
    assert FAMILY.instances("conv2d_bwd_data", "bf16") == []
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []


def test_refusals():
    inst = FAMILY.instances("conv2d_fwd", "bf16")[0]
    assert "own" in FAMILY.applicable(inst, problem(G=1))
    assert "own" in FAMILY.applicable(inst, problem(G=2))  # 64 channels a group
    assert "whole 8-channel runs" in FAMILY.applicable(inst, problem(C=72, K=72, G=4))  # 18 a group
    assert "multiples of 8" in FAMILY.applicable(inst, problem(C=96, K=36, G=6))
    assert "multiples of 8" in FAMILY.applicable(inst, problem(C=36, K=36, G=3))


@pytest.mark.parametrize("C, K, G, per", [
    (256, 256, 16, 4), (144, 144, 9, 4), (192, 192, 8, 2), (96, 96, 2, 1), (320, 320, 8, 1),
    (64, 64, 16, 16), (120, 120, 10, 4), (48, 96, 12, 16), (72, 72, 4, 0), (224, 224, 2, 1),
    (336, 672, 2, 1), (200, 200, 2, 0), (256, 256, 2, 0)])
def test_super_groups(C, K, G, per):
    """The most whole groups whose channels and outputs are 8-channel runs, within 64; one
    group above 64 channels; none for groups of whole k-tiles (conv_wgmma_im2col's)."""
    p = problem(C=C, K=K, G=G)
    assert groups_per_super(p) == per
    cg, kg = C // G, K // G
    if not per:  # 18 channels a group: 1 to 3 groups make no 8-channel runs; 100; 128
        assert cg % SUPER == 0 or not any(n * cg % 8 == 0
                                          for n in range(1, max(1, SUPER // cg) + 1))
        assert padded(p) == p
        return
    assert per * cg % 8 == 0 and per * kg % 8 == 0
    assert per * cg <= SUPER or per == 1
    assert not any(n * cg % 8 == 0 and n * kg % 8 == 0 for n in range(per + 1, SUPER // cg + 1))
    width = padded_width(p)
    assert width % SUPER == 0 and 0 <= width - per * cg < SUPER
    v = padded(p)
    assert (v.G, v.c_per_group, v.k_per_group) == (-(-G // per), width, per * kg)
    assert v.K >= K and v.K - K < per * kg
    assert padded(v) == v


def test_launches():
    """The filter expanded into the workspace, then conv_wgmma_im2col's launch over the padded
    super-groups, with the real x and the expanded filter's maps and the super-groups' params."""
    p = problem(C=144, K=288, G=9)  # 16 channels a group, 32 outputs: 4 a super-group, 3 of them
    v = padded(p)
    assert (v.G, v.C, v.K) == (3, 192, 384)
    seen = 0
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        if FAMILY.applicable(inst, p) or inst.settings["fused_filter"]:
            continue
        seen += 1
        expand, main = FAMILY.launches(inst, p)
        assert expand.entry == "expand_blockdiag"
        assert expand.args == ("w", "workspace", 288, 9, 16, 32, 4, 64)
        assert FAMILY.workspace_bytes(inst, p) == 2 * 288 * 9 * SUPER
        (theirs,) = IM2COL.launches(im2col_twin(inst), v)
        assert (main.grid, main.block, main.shared_bytes) == (
            theirs.grid, theirs.block, theirs.shared_bytes)
        assert main.entry == "wgmma_fwd_blockdiag"
        assert main.args[:3] == ("x", "workspace", "y") and main.args[4] == 4
        params = main.args[3]
        assert (params.C, params.K, params.G, params.Cg, params.Kg) == (144, 288, 3, 64, 128)
        maps = [a for a in main.args if isinstance(a, TensorMap)]
        assert [m.buffer for m in maps] == ["x", "workspace"]
        assert maps[0].dims == (144, 14, 14, 2)
        assert maps[1].dims == (SUPER * 9, 288)
        assert FAMILY.grid(inst, p) == IM2COL.grid(im2col_twin(inst), v)
    assert seen


def im2col_twin(inst):
    """conv_wgmma_im2col's instance of the same tile and pipeline."""
    settings = {k: v for k, v in inst.settings.items() if k != "fused_filter"}
    (twin,) = [i for i in IM2COL.instances(inst.operator, inst.dtype) if i.settings == settings]
    return twin


def test_w_s_tiles_straight_into_the_filter_tile():
    """fused_filter: one launch, no workspace, w's 4D map with a box of K/G rows a group (one
    group a super-group: the tile's rows); refused where the tile's rows are not whole boxes of
    8-row multiples, or where w's rows of C/G channels are not whole 16-byte runs (a tensor
    map's strides)."""
    p = problem(C=144, K=288, G=9)  # 4 groups of 16 channels, 32 outputs a super-group
    wide = problem(C=224, K=224, G=2)  # one group of 112 a super-group, 2 k-tiles a tap
    odd = problem(C=96, K=96, G=4)  # 2 groups of 24: 24-row boxes do not tile 64 or 128 rows
    narrow = problem(C=64, K=512, G=16)  # 4 channels a group: w's rows are 8 bytes
    seen = 0
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        if not inst.settings["fused_filter"]:
            continue
        bn = inst.settings["block_n"]
        assert "fused_filter" in FAMILY.applicable(inst, odd)
        assert "16-byte" in FAMILY.applicable(inst, narrow)
        for q, per, rows in ((p, 4, 32), (wide, 1, bn)):
            if FAMILY.applicable(inst, q):
                continue
            seen += 1
            assert FAMILY.workspace_bytes(inst, q) == 0
            (main,) = FAMILY.launches(inst, q)
            assert main.entry == "wgmma_fwd_blockdiag" and main.args[:3] == ("x", "w", "y")
            assert main.args[4] == per
            filt = main.args[-1]
            cg = q.c_per_group
            assert filt.buffer == "w" and filt.dims == (cg, 9, q.K, 1)
            assert filt.strides == (2 * cg, 2 * cg * 9, 2 * cg * 9 * q.K)
            assert filt.box == (64, 1, rows, 1)
    assert seen


def expand_blockdiag(w, K, RS, Cg, Kg, per, width):
    """expand_blockdiag's loop, chunk by chunk of 8 elements as the kernel writes them."""
    flat, row = w.reshape(-1), width // 8
    out = np.zeros(K * RS * width, w.dtype)
    for i in range(K * RS * row):
        krs = i // row
        k = krs // RS
        c0 = (i - krs * row) * 8 - (k // Kg) % per * Cg
        for t in range(8):
            c = c0 + t
            out[i * 8 + t] = flat[krs * Cg + c] if 0 <= c < Cg else 0
    return out


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


def padded_conv(x, wide, G, per, Cg, Kg, stride, pad):
    """The kernel's convolution over padded super-groups: super-group g's `width` channels of x
    from g per Cg on (zeros past C) with the rows of w' [K][R][S][width] of its outputs, from
    g per Kg to at most K."""
    N, H, W, C = x.shape
    K, width = wide.shape[0], wide.shape[3]
    xz = np.concatenate([x, np.zeros((N, H, W, width))], axis=3)
    y = None
    for g in range(-(-G // per)):
        c0, k0 = g * per * Cg, g * per * Kg
        k1 = min(K, k0 + per * Kg)
        part = grouped_conv(xz[..., c0:c0 + width], wide[k0:k1], 1, stride, pad)
        y = np.zeros(part.shape[:3] + (K,)) if y is None else y
        y[..., k0:k1] = part
    return y


@pytest.mark.parametrize("C, K, G", [(64, 64, 4), (128, 256, 16), (128, 128, 4), (64, 64, 8),
                                     (64, 128, 16), (144, 144, 9), (96, 96, 4), (96, 96, 2),
                                     (120, 120, 10), (48, 96, 12), (80, 80, 2), (224, 224, 2),
                                     (336, 672, 2)])
def test_padded_super_groups_of_the_block_diagonal_filter_are_the_grouped_convolution(C, K, G):
    p = problem(C=C, K=K, G=G)
    per, width, cg, kg = groups_per_super(p), padded_width(p), C // G, K // G
    rng = np.random.default_rng(C + K + G)
    x = rng.standard_normal((2, 7, 6, C))
    w = rng.standard_normal((K, 3, 3, cg))
    wide = expand_blockdiag(w, K, 9, cg, kg, per, width).reshape(K, 3, 3, width)
    want = grouped_conv(x, w, G, stride=2, pad=1)
    got = padded_conv(x, wide, G, per, cg, kg, stride=2, pad=1)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
