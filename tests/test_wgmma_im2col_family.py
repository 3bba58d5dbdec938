"""conv_wgmma_im2col without a GPU: its configurations and rules, its tensor maps, and the
kernel's k-loop replayed in NumPy over an emulation of the im2col copies (the walk over window
origins, W then H then N, the taps' offsets, zeros outside the tensor) against a direct
convolution. The GPU check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import numpy as np
import pytest

from farm.launch import pack_args
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import SMEM_OPT_IN, shared_bytes
from kernels.conv.wgmma_im2col import FAMILY, slices, window
from kernels.family import Im2col, TensorMap

OPS = ("conv2d_fwd", "conv2d_bwd_data")


def problem(op, **shape):
    base = dict(N=2, C=64, K=64, G=1, H=8, W=8, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


@pytest.mark.parametrize("op", OPS)
def test_configs(op):
    instances = FAMILY.instances(op, "bf16")
    assert len(instances) == len({i.name for i in instances}) >= 12
    assert FAMILY.instances(op, "fp32") == [] and FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    for i in instances:
        assert "tma" not in i.settings and i.settings["producers"] == 1
        assert FAMILY.defines(i)["TMA"] == 2 and shared_bytes(i.settings) <= SMEM_OPT_IN
        assert "SPLIT_K" not in FAMILY.defines(i)
        assert i.settings["split_k"] in (0, 1) and (i.settings["split_k"] or i.settings["wg_m"] == 64)


def smallest(op):
    return next(i for i in FAMILY.instances(op, "bf16")
                if (i.settings["block_m"], i.settings["block_n"]) == (64, 64))


def test_refusals():
    fwd, bwd = smallest("conv2d_fwd"), smallest("conv2d_bwd_data")
    assert "Cg=96 is not a multiple of 64" in FAMILY.applicable(fwd, problem("conv2d_fwd", C=96))
    assert FAMILY.applicable(bwd, problem("conv2d_bwd_data", C=96)) is None  # stored, not reduced
    assert "Kg=96" in FAMILY.applicable(bwd, problem("conv2d_bwd_data", K=96))
    assert "stride 1 only" in FAMILY.applicable(
        bwd, problem("conv2d_bwd_data", stride_h=2, stride_w=2))
    assert FAMILY.applicable(fwd, problem("conv2d_fwd", stride_h=2, stride_w=2)) is None
    assert "corners" in FAMILY.applicable(fwd, problem("conv2d_fwd", H=300, W=300,
                                                       pad_h=130, pad_w=130))
    assert "Kg=36" in FAMILY.applicable(fwd, problem("conv2d_fwd", K=288, G=8, C=512))


def test_split_instances():
    """Split where the tiles leave the GPU idle (7x7 maps, a long reduction), into the zeroed
    workspace; refused where the tiles fill it."""
    inst = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
                if not i.settings["split_k"] and i.settings["block_n"] == 128)
    small = problem("conv2d_bwd_data", N=32, C=512, K=512, H=7, W=7)
    assert FAMILY.applicable(inst, small) is None
    splits, per = FAMILY.splits(inst, small)
    assert splits > 1 and splits * per >= 512 * 9 // 64 > (splits - 1) * per
    zero, main = FAMILY.launches(inst, small)
    assert zero.entry == "igemm_zero" and main.entry == "wgmma_bwd_data_im2col_split"
    assert main.grid[2] == splits and main.args[3] == "workspace"
    assert FAMILY.workspace_bytes(inst, small) == 4 * (32 * 49 * 512 + FAMILY.tiles(inst, small))
    big = problem("conv2d_bwd_data", N=32, C=128, K=128, H=56, W=56)
    assert "fill the GPU" in FAMILY.applicable(inst, big)
    whole = next(i for i in FAMILY.instances("conv2d_bwd_data", "bf16")
                 if i.settings["split_k"] and i.settings["block_n"] == 128)
    assert FAMILY.applicable(whole, big) is None and FAMILY.workspace_bytes(whole, big) == 0
    assert [launch.entry for launch in FAMILY.launches(whole, small)] == ["wgmma_bwd_data_im2col"]


def test_slices_count_each_blocks_own_time():
    """C512 K512 7x7 3x3 (72 k-tiles) on 132 multiprocessors: 100 tiles of 64 x 128 make one
    wave unsplit, where two slices would make two waves of 36 k-tiles and each block's own
    time; 52 tiles of 128 x 128 split in two and 36 of 192 x 128 in three, one wave each."""
    assert slices(100, 132, 72, 16) == 1
    assert slices(52, 132, 72, 16) == 2
    assert slices(36, 132, 72, 16) == 3
    assert slices(36, 132, 72, 2) == 2  # at most the grid's z
    assert slices(100, 1320, 72, 16) == 12  # room for 12 slices of 6 k-tiles in one wave


def test_tensor_maps():
    p = problem("conv2d_fwd", N=32, C=128, K=256, H=28, W=26, stride_h=2, stride_w=2)
    inst = next(i for i in FAMILY.instances("conv2d_fwd", "bf16")
                if (i.settings["block_m"], i.settings["block_n"]) == (128, 256))
    x_map, w_map = FAMILY.tensor_maps(inst, p)
    assert x_map == TensorMap("x", (128, 26, 28, 32), (256, 256 * 26, 256 * 26 * 28), (64, 128),
                              im2col=Im2col(lower=(-1, -1), upper=(-2, -2), strides=(2, 2)))
    assert w_map == TensorMap("w", (1152, 256), (2304,), (64, 256))
    p = problem("conv2d_bwd_data", N=4, C=96, K=128, H=9, W=7, R=5, S=3, pad_h=1, pad_w=1)
    dy_map, w_map = FAMILY.tensor_maps(inst, p)  # P = Q = 7; shifts 1 - 2 (W), 1 - 4 (H)
    assert dy_map.im2col == Im2col(lower=(-1, -3), upper=(-1, -1))
    assert dy_map.dims == (128, 7, 7, 4) and w_map.dims == (96, 3, 5, 128)
    launch = FAMILY.launches(inst, p)[0]
    assert launch.entry == "wgmma_bwd_data_im2col" and launch.args[:3] == ("dy", "w", "dx")

    class Encoder:  # the device's side: one 128-byte map per TensorMap, in order
        seen: list = []

        def tensor_map(self, pointer, spec):
            self.seen.append((pointer, spec))
            return bytes(128)

    packed = pack_args(launch, {"dy": 16, "w": 32, "dx": 48}, Encoder())
    assert [s.buffer for _, s in Encoder.seen] == ["dy", "w"] and packed is not None


def im2col_copy(tensor: np.ndarray, spec: TensorMap, c: int, w: int, h: int, n: int,
                off_w: int, off_h: int) -> np.ndarray:
    """One im2col copy as the hardware defines it: box[1] pixels from window origin (w, h) of
    image n, W fastest, within [lower, size - 1 + upper] (strides apart), each pixel's box[0]
    channels from c at origin + offsets; zeros outside the tensor."""
    images, height, width, channels = tensor.shape
    box, steps = spec.im2col, spec.im2col.strides
    out = np.zeros((spec.box[1], spec.box[0]), tensor.dtype)
    w_last, h_last = width - 1 + box.upper[0], height - 1 + box.upper[1]
    for i in range(spec.box[1]):
        y, x = h + off_h, w + off_w
        if 0 <= n < images and 0 <= y < height and 0 <= x < width:
            part = tensor[n, y, x, c:c + spec.box[0]]
            out[i, :part.size] = part
        w += steps[0]
        if w > w_last:
            w, h = box.lower[0], h + steps[1]
            if h > h_last:
                h, n = box.lower[1], n + 1
    return out


def direct(p: ConvProblem, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """y[n, p, q, g, k] = sum over r, s, c of x[n, p sh - ph + r dh, q sw - pw + s dw, g, c]
    w[g, k, r, s, c]."""
    pad = np.pad(x, ((0, 0), (p.pad_h, p.pad_h + p.stride_h), (p.pad_w, p.pad_w + p.stride_w),
                     (0, 0)))
    cg, kg = p.c_per_group, p.k_per_group
    y = np.zeros((p.N, p.P, p.Q, p.K))
    for r in range(p.R):
        for s in range(p.S):
            rows = pad[:, r * p.dil_h::p.stride_h, s * p.dil_w::p.stride_w][:, :p.P, :p.Q]
            for g in range(p.G):
                y[..., g * kg:(g + 1) * kg] += np.einsum(
                    "npqc,kc->npqk", rows[..., g * cg:(g + 1) * cg],
                    w[g * kg:(g + 1) * kg, r, s, :])
    return y


def forward_by_copies(p: ConvProblem, inst, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """wgmma_fwd_im2col's tiles, k-tile by k-tile: A by im2col copies, B = w's [K][CRS] rows."""
    a_map, _ = FAMILY.tensor_maps(inst, p)
    bm, cg, kg, M = inst.settings["block_m"], p.c_per_group, p.k_per_group, p.N * p.P * p.Q
    wm = w.reshape(p.K, -1)
    y = np.zeros((M, p.K))
    for g in range(p.G):
        for m0 in range(0, M, bm):
            n, t = divmod(m0, p.P * p.Q)
            oh, ow = divmod(t, p.Q)
            acc = np.zeros((bm, kg))
            for kk in range(0, cg * p.R * p.S, 64):
                tap = kk // cg
                r, s = divmod(tap, p.S)
                a = im2col_copy(x, a_map, g * cg + kk - tap * cg, ow * p.stride_w - p.pad_w,
                                oh * p.stride_h - p.pad_h, n, s * p.dil_w, r * p.dil_h)
                acc += a @ wm[g * kg:(g + 1) * kg, kk:kk + 64].T
            rows = min(bm, M - m0)
            y[m0:m0 + rows, g * kg:(g + 1) * kg] = acc[:rows]
    return y.reshape(p.N, p.P, p.Q, p.K)


def bwd_data_by_copies(p: ConvProblem, inst, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """wgmma_bwd_data_im2col's tiles: A = dy by im2col copies with the taps reversed, B = w's
    [K][R][S][Cg] rows of one tap."""
    a_map, _ = FAMILY.tensor_maps(inst, p)
    bm, cg, kg, M = inst.settings["block_m"], p.c_per_group, p.k_per_group, p.N * p.H * p.W
    last_r, last_s = (p.R - 1) * p.dil_h, (p.S - 1) * p.dil_w
    dx = np.zeros((M, p.C))
    for g in range(p.G):
        for m0 in range(0, M, bm):
            n, t = divmod(m0, p.H * p.W)
            h, x0 = divmod(t, p.W)
            acc = np.zeros((bm, cg))
            for kk in range(0, kg * p.R * p.S, 64):
                tap, k = divmod(kk, kg)
                r, s = divmod(tap, p.S)
                a = im2col_copy(dy, a_map, g * kg + k, x0 + p.pad_w - last_s, h + p.pad_h - last_r,
                                n, last_s - s * p.dil_w, last_r - r * p.dil_h)
                acc += a @ w[g * kg + k:g * kg + k + 64, r, s, :]
            rows = min(bm, M - m0)
            dx[m0:m0 + rows, g * cg:(g + 1) * cg] = acc[:rows]
    return dx.reshape(p.N, p.H, p.W, p.C)


def bwd_data_direct(p: ConvProblem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    """dx[n, p sh - ph + r dh, q sw - pw + s dw, g, c] += dy[n, p, q, g, k] w[g, k, r, s, c]."""
    cg, kg = p.c_per_group, p.k_per_group
    dx = np.zeros((p.N, p.H + 2 * p.pad_h + p.stride_h, p.W + 2 * p.pad_w + p.stride_w, p.C))
    for r in range(p.R):
        for s in range(p.S):
            for g in range(p.G):
                rows = slice(r * p.dil_h, r * p.dil_h + p.P * p.stride_h, p.stride_h)
                cols = slice(s * p.dil_w, s * p.dil_w + p.Q * p.stride_w, p.stride_w)
                dx[:, rows, cols, g * cg:(g + 1) * cg] += np.einsum(
                    "npqk,kc->npqc", dy[..., g * kg:(g + 1) * kg], w[g * kg:(g + 1) * kg, r, s])
    return dx[:, p.pad_h:p.pad_h + p.H, p.pad_w:p.pad_w + p.W]


SHAPES = [
    dict(N=3, C=128, K=64, H=7, W=5, R=3, S=3, pad_h=1, pad_w=1),
    dict(N=2, C=64, K=64, H=9, W=7, R=3, S=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1),
    dict(N=2, C=128, K=128, G=2, H=6, W=7, R=3, S=1, pad_h=1, pad_w=0),
    dict(N=1, C=64, K=64, H=9, W=8, R=3, S=3, dil_h=2, dil_w=2, pad_h=2, pad_w=2),
    dict(N=2, C=64, K=64, H=11, W=10, R=5, S=3, stride_h=3, stride_w=2, pad_h=2, pad_w=0),
    dict(N=2, C=64, K=64, H=6, W=6, R=3, S=3),
]


@pytest.mark.parametrize("shape", SHAPES)
def test_copies_compute_the_convolution(shape):
    rng = np.random.default_rng(7)
    inst = smallest("conv2d_fwd")
    p = problem("conv2d_fwd", **shape)
    assert FAMILY.applicable(inst, p) is None
    x = rng.standard_normal((p.N, p.H, p.W, p.C))
    w = rng.standard_normal((p.K, p.R, p.S, p.c_per_group))
    np.testing.assert_allclose(forward_by_copies(p, inst, x, w), direct(p, x, w), atol=1e-9)
    if (p.stride_h, p.stride_w) != (1, 1):
        return
    q = problem("conv2d_bwd_data", **shape)
    inst = smallest("conv2d_bwd_data")
    assert FAMILY.applicable(inst, q) is None
    dy = rng.standard_normal((q.N, q.P, q.Q, q.K))
    np.testing.assert_allclose(bwd_data_by_copies(q, inst, dy, w), bwd_data_direct(q, dy, w),
                               atol=1e-9)


def test_window_spans_the_outputs():
    """The walk visits exactly P x Q origins an image: the box's extent over its strides."""
    for shape in SHAPES:
        p = problem("conv2d_fwd", **shape)
        box = window(p)
        along_w = (p.W - 1 + box.upper[0] - box.lower[0]) // p.stride_w + 1
        along_h = (p.H - 1 + box.upper[1] - box.lower[1]) // p.stride_h + 1
        assert (along_h, along_w) == (p.P, p.Q)


@pytest.mark.parametrize("op, entry", [("conv2d_fwd", "wgmma_fwd_im2col_split"),
                                       ("conv2d_bwd_data", "wgmma_bwd_data_im2col_split")])
def test_split_sums_are_reductions_in_the_ptx(op, entry):
    """The split entries add their fp32 sums with red.global.add.f32 (red_sums.cuh): no float
    atomic, whose reply each add would wait for; the tiles' counts stay atomics."""
    from tests.ptx import ptx_of

    inst = next(i for i in FAMILY.instances(op, "bf16") if i.settings["split_k"])
    ptx = ptx_of(FAMILY, inst, entry)
    assert "red.global.add.f32" in ptx and "atom.global.add.f32" not in ptx
    assert "atom.global.add.u32" in ptx or "atom.global.add.s32" in ptx


def test_tiles_of_192_rows_make_whole_waves_where_128_does_not():
    """6,272 rows (14x14 at N = 32) by 256 outputs: 132 tiles of 192 x 64, one a
    multiprocessor, where 128 x 128 makes 98."""
    p = ConvProblem(op="conv2d_fwd", dtype="bf16", N=32, C=1024, K=256, G=1, H=14, W=14, R=1,
                    S=1)
    unsplit = {(i.settings["block_m"], i.settings["block_n"]): i
               for i in FAMILY.instances("conv2d_fwd", "bf16")
               if i.settings["split_k"] == 1 and FAMILY.applicable(i, p) is None}
    assert FAMILY.tiles(unsplit[192, 64], p) == 132 and FAMILY.tiles(unsplit[128, 128], p) == 98
    assert FAMILY.grid(unsplit[192, 64], p)[0] == 132


def test_one_slice_is_whether_the_fewest_waves_come_to_one_slice():
    """The rule keys' one_slice answers as slices(...) == 1 does, on every kind of grid."""
    import random

    from kernels.conv.wgmma_im2col import one_slice

    draw = random.Random(5)
    answers = set()
    for _ in range(20000):
        case = (draw.randint(1, 5000), draw.choice([132, 264, 396, 528]), draw.randint(1, 400),
                draw.choice([1, 2, 7, 100, 65535]))
        answers.add(one_slice(*case))
        assert one_slice(*case) == (slices(*case) == 1), case
    assert answers == {True, False}
