"""conv_dw_tc_bwd_weight without a GPU: its configuration space, where it refuses, the launches
and their splits over the dy tiles, and its code objects compiled for sm_90a with NVRTC. The GPU
check is tests/test_dw_tma_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.dw_tc import FAMILY, generate_configs, shared_bytes, threads
from kernels.conv.dw_tma import SM_SHARED, SMEM_OPT_IN, box
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT
from tests.nvrtc_check import compile_failures


def problem(**shape):
    base = dict(N=2, C=96, K=96, G=96, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op="conv2d_bwd_weight", dtype="bf16", **{**base, **shape})


def test_config_space():
    configs = generate_configs()
    assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
    for c in configs:
        assert (c["ch"], c["vec"], c["warps"]) == (64, 8, 8) and threads(c) == 256
        assert c["tile_w"] % 8 == 0 and c["tile_h"] * c["tile_w"] % 16 == 0
        assert shared_bytes(c) <= SMEM_OPT_IN
        assert c["occ"] * (shared_bytes(c) + 1024) <= SM_SHARED
        assert max(box(c)) <= 256  # a tensor map's box dimension
        if c["fr"] == 7:  # a larger tile's addresses beside 25 accumulator tiles spill
            assert c["tile_h"] * c["tile_w"] == 64 and c["occ"] == 1
    assert {(c["fr"], c["stride"], c["cluster"]) for c in configs} == {
        (f, s, k) for f in (3, 5, 7) for s in (1, 2) for k in (1, 4, 8, 16)}
    assert {c["occ"] for c in configs} == {1, 2}
    assert FAMILY.instances("conv2d_bwd_weight", "fp32") == []
    assert FAMILY.instances("conv2d_fwd", "bf16") == []
    assert FAMILY.unsupported_target("sm_90a") is None and FAMILY.unsupported_target("sm_80")


@pytest.mark.parametrize("shape, words", [
    (dict(C=96, K=96, G=48), "depthwise only"),
    (dict(C=44, K=44, G=44), "multiple of 8"),
    (dict(R=5, S=5, pad_h=2, pad_w=2), "compiled for"),
    (dict(dil_h=2, dil_w=2, pad_h=2, pad_w=2), "dilation"),
])
def test_refusals_name_the_problem(shape, words):
    p = problem(**shape)
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        if inst.settings["stride"] != 1 or "compiled" not in words and inst.settings["fr"] != 3:
            continue  # refused first for its stride or filter size
        if "compiled" in words and inst.settings["fr"] == 5:
            continue
        reason = FAMILY.applicable(inst, p)
        assert reason and words in reason, (inst.name, reason)


@pytest.mark.parametrize("shape", [
    dict(N=32, C=144, K=144, G=144, H=56, W=56),
    dict(N=32, C=576, K=576, G=576, H=14, W=14, stride_h=2, stride_w=2),
    dict(N=1, C=1152, K=1152, G=1152, H=7, W=7),
])
def test_splits_cover_the_dy_tiles(shape):
    """Blocks (split, channel block) over the dy tiles: a cluster's blocks meet in shared memory
    and write dw; otherwise at most one split a dy tile, all resident, and a second launch adds
    the workspace's slices."""
    p = problem(**shape)
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        if FAMILY.applicable(inst, p):
            continue
        c = inst.settings
        blocks = -(-p.C // 64)
        dy_tiles = p.N * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"])
        assert FAMILY.items(inst, p) == dy_tiles * blocks
        splits = FAMILY.splits(inst, p)
        launches = FAMILY.launches(inst, p)
        main = launches[0]
        assert main.grid == (splits, blocks, 1) and main.block == (256, 1, 1)
        assert main.shared_bytes == shared_bytes(c)
        x, dy = main.args[-2:]
        assert x.box == (64, box(c)[1], box(c)[0], 1) and x.swizzle == 128
        assert dy.dims == (p.C, p.Q, p.P, p.N) and dy.box == (64, c["tile_w"], c["tile_h"], 1)
        if c["cluster"] > 1:
            assert splits == c["cluster"] and len(launches) == 1 and main.args[2] == "dw"
            assert FAMILY.workspace_bytes(inst, p) == 0
            continue
        assert 1 <= splits <= dy_tiles
        assert splits * blocks <= max(SM_COUNT * c["occ"], blocks)
        reduce = launches[1]
        assert reduce.entry == "dw_tc_reduce" and reduce.args == ("workspace", "dw", p.C * 9,
                                                                splits)
        assert reduce.grid[0] * 32 * 4 >= min(p.C * 9, SM_COUNT * 4 * 32 * 4)
        assert FAMILY.workspace_bytes(inst, p) == 4 * splits * p.C * 9


def test_code_objects_compile_for_sm_90a_without_spills():
    picked = {}
    for inst in FAMILY.instances("conv2d_bwd_weight", "bf16"):
        c = inst.settings
        picked.setdefault((c["fr"], c["stride"], c["tile_h"] * c["tile_w"], c["cluster"] > 1,
                           c["occ"]), inst)
    failures = compile_failures(FAMILY, picked.values(), lambda inst: inst.operator)
    assert not failures, "\n".join(failures[:20])
