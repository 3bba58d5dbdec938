"""conv_grouped_mma without a GPU: its configuration space, where it refuses, the staged input
tile against counting the pixels its taps read, its grid, and its code objects compiled for
sm_90a with NVRTC (no spills). The GPU check is tests/test_grouped_mma_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.grouped_mma import (FAMILY, MAX_THREADS, SMEM_OPT_IN, WEIGHT_FAMILY,
                                      WORKSPACE_CAP, generate_configs, threads)
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT
from tests.nvrtc_check import compile_failures


def problem(op="conv2d_fwd", **shape):
    base = dict(N=2, C=128, K=128, G=32, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


def test_config_space():
    configs = generate_configs()
    assert len(configs) == len({tuple(sorted(c.items())) for c in configs})
    for c in configs:
        assert threads(c) <= MAX_THREADS
        assert c["tile_h"] * c["tile_w"] % (16 * c["warps_m"]) == 0 and c["tile_w"] % 8 == 0
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        assert [i.settings for i in FAMILY.instances(op, "bf16")] == configs
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    assert FAMILY.instances("conv2d_fwd", "fp32") == []


def test_targets():
    assert FAMILY.unsupported_target("sm_90a") is None
    assert FAMILY.unsupported_target("sm_80") is None
    assert "sm_80" in FAMILY.unsupported_target("sm_75")
    assert FAMILY.unsupported_target("gfx942")


@pytest.mark.parametrize("shape, words", [
    (dict(C=128, K=256, G=32), "differ"),               # K/G 8, C/G 4
    (dict(C=96, K=96, G=4), "does not divide"),           # C/G 24
    (dict(C=256, K=256, G=2), "does not divide"),         # C/G 128
    (dict(C=12, K=12, G=3), "multiple of 8"),             # C/G 4, C 12
])
def test_refusals_name_the_problem(shape, words):
    p = problem(**shape)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        assert words in FAMILY.applicable(inst, p)


def test_widths_serve_the_groups_that_divide_them():
    for cg, widths in ((1, {16, 32, 64}), (4, {16, 32, 64}), (16, {16, 32, 64}), (32, {32, 64}),
                       (64, {64})):
        p = problem(C=cg * 8, K=cg * 8, G=8, H=7, W=7)
        served = {i.settings["width"] for i in FAMILY.instances("conv2d_fwd", "bf16")
                  if FAMILY.applicable(i, p) is None}
        assert served == widths, cg


def test_large_filters_refused_where_they_do_not_fit():
    p = problem(C=128, K=128, G=2, R=11, S=11, pad_h=5, pad_w=5, stride_h=2, stride_w=2)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        fits = FAMILY.shared_bytes(inst, p) <= SMEM_OPT_IN
        assert (FAMILY.applicable(inst, p) is None) == fits


def _read_extent(p: ConvProblem, tile: int, axis: str) -> int:
    """Rows (columns) of dy a tile of `tile` rows (columns) of one residue class of dx reads,
    the most over the classes and the tile's positions, counted tap by tap."""
    size, pad, dil, stride, taps = ((p.H, p.pad_h, p.dil_h, p.stride_h, p.R) if axis == "h"
                                    else (p.W, p.pad_w, p.dil_w, p.stride_w, p.S))
    worst = 0
    for a in range(stride):
        for start in range(0, -(-size // stride)):
            read = {(a + stride * (start + i) + pad - r * dil) // stride - start
                    for i in range(tile) for r in range(taps)
                    if (a + stride * (start + i) + pad - r * dil) % stride == 0}
            if read:
                worst = max(worst, max(read) - min(read) + 1)
    return worst


@pytest.mark.parametrize("shape", [
    dict(), dict(stride_h=2, stride_w=2), dict(R=5, S=5, pad_h=2, pad_w=2, stride_h=2, stride_w=2),
    dict(R=1, S=1, pad_h=0, pad_w=0, stride_h=2, stride_w=2), dict(dil_h=2, dil_w=2, pad_h=2,
                                                                   pad_w=2),
    dict(stride_h=3, stride_w=3, R=7, S=7, pad_h=3, pad_w=3), dict(stride_h=2, dil_h=3, pad_h=3)])
def test_staged_tile_holds_every_pixel_the_taps_read(shape):
    inst = FAMILY.instances("conv2d_bwd_data", "bf16")[0]
    c = inst.settings
    p = problem("conv2d_bwd_data", **shape)
    rows, cols = FAMILY.staged(inst, p)
    assert rows >= _read_extent(p, c["tile_h"], "h")
    assert cols >= _read_extent(p, c["tile_w"], "w")
    assert rows == max(_read_extent(p, c["tile_h"], "h"), c["tile_h"])
    f = FAMILY.instances("conv2d_fwd", "bf16")[0]
    q = problem(**shape)
    rows, slots = FAMILY.staged(f, q)
    assert rows == (c["tile_h"] - 1) * q.stride_h + (q.R - 1) * q.dil_h + 1
    cols = (c["tile_w"] - 1) * q.stride_w + (q.S - 1) * q.dil_w + 1
    assert cols <= slots < cols + q.stride_w


def test_grid_gives_every_block_the_same_number_of_tiles():
    for shape in (dict(N=32, H=56, W=56), dict(N=1, H=7, W=7), dict(N=32, C=1024, K=1024)):
        for op in ("conv2d_fwd", "conv2d_bwd_data"):
            p = problem(op, **shape)
            for inst in FAMILY.instances(op, "bf16")[::7]:
                if FAMILY.applicable(inst, p):
                    continue
                x, slabs, z = FAMILY.grid(inst, p)
                c = inst.settings
                tiles = p.N * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"])
                assert slabs == -(-p.C // (c["sg"] * c["width"])) and z == 1
                per_block = -(-tiles // x)
                assert -(-tiles // per_block) == x
                assert x * slabs <= max(SM_COUNT * FAMILY.blocks_per_sm(inst, p), slabs)


def test_backward_weight_splits_cover_the_tiles_within_the_workspace():
    for shape in (dict(N=32, H=56, W=56), dict(N=1, H=7, W=7), dict(N=32, C=1024, K=1024),
                  dict(N=64, C=2048, K=2048, G=64, H=56, W=56)):
        p = problem("conv2d_bwd_weight", **shape)
        for inst in WEIGHT_FAMILY.instances("conv2d_bwd_weight", "bf16"):
            c = inst.settings
            splits, per = WEIGHT_FAMILY.splits(inst, p)
            tiles = p.N * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"])
            assert (splits - 1) * per < tiles <= splits * per  # every split has a tile
            assert splits == 1 or per >= min(c["split_tiles"], tiles)
            assert WEIGHT_FAMILY.workspace_bytes(inst, p) <= max(
                WORKSPACE_CAP, 4 * p.tensor_elements()["weight"])
            [main, reduce] = WEIGHT_FAMILY.launches(inst, p)
            assert main.grid == (splits, -(-p.C // (c["sg"] * c["width"])),
                                 -(-p.R * p.S // c["taps"]))
            assert reduce.args[-1] == splits


def test_code_objects_compile_for_sm_90a_without_spills():
    """One code object per packing and warp layout, both directions; the GPU test compiles
    and verifies every one."""
    picked = {}
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            picked.setdefault((op, c["width"], c["sg"], c["warps_m"], c["stages"],
                               c["tile_h"] * c["tile_w"]), inst)
    weights = {}
    for inst in WEIGHT_FAMILY.instances("conv2d_bwd_weight", "bf16"):
        c = inst.settings
        weights.setdefault((c["width"], c["taps"], c["sg"], c["tile_h"] * c["tile_w"]), inst)
    failures = (compile_failures(FAMILY, picked.values(), lambda inst: inst.operator)
                + compile_failures(WEIGHT_FAMILY, weights.values(), lambda inst: inst.operator))
    assert not failures, "\n".join(failures[:20])
