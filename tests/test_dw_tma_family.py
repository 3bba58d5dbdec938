"""conv_dw_tma and conv_dw_tma_bwd_weight without a GPU: their configuration spaces, where they
refuse, the tensor maps of each launch, the persistent grid and the splits, and their code
objects compiled for sm_90a with NVRTC. The GPU check is tests/test_dw_tma_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.dw_tma import (FAMILY, SM_SHARED, SMEM_OPT_IN, WEIGHT_FAMILY, blocks_per_sm,
                                 box, generate_configs, register_cap, shared_bytes, threads,
                                 weight_shared_bytes)
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT
from tests.nvrtc_check import compile_failures


def problem(op="conv2d_fwd", **shape):
    base = dict(N=2, C=96, K=96, G=96, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


def test_config_space():
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        configs = generate_configs(op)
        assert len({tuple(sorted(c.items())) for c in configs}) == len(configs)
        for c in configs:
            assert shared_bytes(c) <= SMEM_OPT_IN
            assert c["occ"] * (shared_bytes(c) + 1024) <= SM_SHARED
            assert 64 <= threads(c) <= 512 and threads(c) % 32 == 0
            assert c["occ"] * threads(c) <= 2048 and register_cap(c) >= 128
            assert max(box(c)) <= 256  # a tensor map's box dimension
            if c["rows"] > 1:  # bands of at least 2 rows, 2 stages
                assert c["tile_h"] % c["rows"] == 0 and c["tile_h"] // c["rows"] >= 2
                assert c["stages"] == 2
        assert {c["rows"] for c in configs} == {1, 2, 4}
        banded = {(c["ch"], c["tile_h"], c["tile_w"], c["fr"], c["stride"]) for c in configs
                  if c["rows"] > 1}
        assert banded and all(c["ch"] // c["vec"] * c["tile_w"] // c.get("cols", 1) * c["rows"]
                              == threads(c) for c in configs)
        # columns a thread: 2 or 4, 64-channel blocks only, the key absent where it is 1 (the
        # names of the one-column instances do not change)
        blocked = [c for c in configs if "cols" in c]
        assert blocked and {c["cols"] for c in blocked} == {2, 4}
        assert all(c["ch"] == 64 and c["tile_w"] % c["cols"] == 0 and list(c)[-1] == "cols"
                   and c["tile_h"] // c["rows"] * c["cols"] <= 8 for c in blocked)
    assert {c["stride"] for c in generate_configs("conv2d_bwd_data")} == {1}
    # 4 channels a thread of a 3x3 filter: forward at stride 2 only, never backward-weight
    narrow = {(c["fr"], c["stride"]) for op in ("conv2d_fwd", "conv2d_bwd_data")
              for c in generate_configs(op) if c["vec"] != {3: 8, 5: 4, 7: 2}[c["fr"]]}
    assert narrow == {(3, 2)}
    assert all(c["vec"] == 8 for c in WEIGHT_FAMILY.configs("conv2d_bwd_weight") if c["fr"] == 3)
    assert {c["stride"] for c in generate_configs("conv2d_fwd")} == {1, 2}
    assert FAMILY.instances("conv2d_fwd", "fp32") == []
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []


def test_targets():
    assert FAMILY.unsupported_target("sm_90a") is None
    for other in ("sm_80", "sm_90", "gfx942"):
        assert "sm_90a" in FAMILY.unsupported_target(other)


@pytest.mark.parametrize("shape, words", [
    (dict(C=96, K=96, G=48), "depthwise only"),
    (dict(C=44, K=44, G=44), "multiple of 8"),
    (dict(R=9, S=9, pad_h=4, pad_w=4), "compiled for"),
    (dict(R=3, S=5, pad_h=1, pad_w=2), "compiled for"),
    (dict(dil_h=2, dil_w=2, pad_h=2, pad_w=2), "dilation"),
])
def test_refusals_name_the_problem(shape, words):
    p = problem(**shape)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        if inst.settings["stride"] != 1 or "compiled" not in words and inst.settings["fr"] != 3:
            continue  # refused first for its stride or filter size
        reason = FAMILY.applicable(inst, p)
        assert reason and words in reason, (inst.name, reason)


def test_each_problem_meets_its_compiled_case():
    """A stride-1 3x3 problem meets the stride-1 3x3 instances only; backward-data has no
    stride 2; padding past R - 1 has no mirror in backward-data."""
    s1, s2 = problem(), problem(stride_h=2, stride_w=2)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        three = inst.settings["fr"] == 3
        assert (FAMILY.applicable(inst, s1) is None) == (three and inst.settings["stride"] == 1)
        assert (FAMILY.applicable(inst, s2) is None) == (three and inst.settings["stride"] == 2)
        assert FAMILY.compiled_case(s2) == {"fr": 3, "stride": 2}
    back = problem("conv2d_bwd_data", stride_h=2, stride_w=2)
    wide = problem("conv2d_bwd_data", pad_h=3, pad_w=3)
    for inst in FAMILY.instances("conv2d_bwd_data", "bf16"):
        assert FAMILY.applicable(inst, back) is not None
        if inst.settings["fr"] == 3:
            assert "padding" in FAMILY.applicable(inst, wide)
        assert (FAMILY.applicable(inst, problem("conv2d_bwd_data")) is None) == (
            inst.settings["fr"] == 3)


def test_tensor_map_boxes_one_item():
    for op, name in (("conv2d_fwd", "x"), ("conv2d_bwd_data", "dy")):
        p = problem(op, N=3, C=200, K=200, G=200, H=9, W=13)
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            tmap = FAMILY.tensor_map(inst, p)
            h, w = (p.H, p.W) if op == "conv2d_fwd" else (p.P, p.Q)
            assert tmap.buffer == name and tmap.dims == (p.C, w, h, p.N)
            assert tmap.strides == (2 * p.C, 2 * p.C * w, 2 * p.C * w * h)
            assert tmap.box == (c["ch"], box(c)[1], box(c)[0], 1)
            assert tmap.swizzle == (128 if c["ch"] == 64 else 0)


def test_grid_is_persistent_and_covers_the_items():
    p = problem(N=32, C=576, K=576, G=576, H=56, W=56)
    for inst in FAMILY.instances("conv2d_fwd", "bf16"):
        items = FAMILY.items(inst, p)
        grid = FAMILY.grid(inst, p)
        assert grid[1:] == (1, 1)
        assert grid[0] <= min(items, SM_COUNT * blocks_per_sm(inst.settings))
        c = inst.settings
        assert items == 32 * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"]) * -(-576 // c["ch"])


@pytest.mark.parametrize("channels", [72, 144, 576, 1152])
def test_grid_keeps_each_block_on_one_channel_block_where_that_costs_little(channels):
    """More items than resident blocks: the grid is a multiple of the channel blocks when that
    keeps at least 7/8 of the resident blocks, else all of them; fewer: one block an item."""
    for n, size in ((32, 56), (1, 7)):
        p = problem(N=n, C=channels, K=channels, G=channels, H=size, W=size)
        for inst in FAMILY.instances("conv2d_fwd", "bf16"):
            items, resident = FAMILY.items(inst, p), SM_COUNT * blocks_per_sm(inst.settings)
            blocks = -(-channels // inst.settings["ch"])
            grid = FAMILY.grid(inst, p)[0]
            if items <= resident:
                assert grid == items
            elif grid % blocks:
                assert grid == resident and 8 * (resident // blocks * blocks) < 7 * resident
            else:
                assert 8 * grid >= 7 * resident and grid > resident - blocks


def test_code_objects_compile_for_sm_90a():
    """One code object per channel block, tile, stride, register bound, bands of rows and
    columns a thread, both directions: those with 255 registers spill nothing. The GPU test compiles and verifies every one."""
    picked = {}
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            picked.setdefault((op, c["ch"], c["vec"], c["fr"], c["tile_h"] * c["tile_w"],
                               c["stride"], register_cap(c), c["rows"], c.get("cols", 1)), inst)
    failures = compile_failures(FAMILY, picked.values(), lambda inst: inst.operator,
                                lambda inst: register_cap(inst.settings) == 255)
    assert not failures, "\n".join(failures[:20])


def test_backward_weight_configurations_fit():
    configs = WEIGHT_FAMILY.configs("conv2d_bwd_weight")
    assert configs and {c["stride"] for c in configs} == {1, 2}
    assert {c["fr"] for c in configs} == {3, 5, 7}
    assert {c["cluster"] for c in configs} == {1, 4, 8, 16}
    assert {c["rows"] for c in configs} == {1, 2, 4}
    for c in configs:
        assert register_cap(c) >= 128 and c["stages"] <= 3
        assert c["tile_h"] % c["rows"] == 0 and threads(c) <= 512
        assert c["occ"] * (weight_shared_bytes(c) + 1024) <= SM_SHARED
        sums = c["fr"] ** 2 * (c["vec"] * (threads(c) + 1) + c["ch"]) * 4
        assert weight_shared_bytes(c) >= sums
    assert WEIGHT_FAMILY.instances("conv2d_fwd", "bf16") == []
    assert WEIGHT_FAMILY.instances("conv2d_bwd_weight", "fp32") == []


def test_backward_weight_splits_the_tiles_over_the_resident_blocks_or_a_cluster():
    for shape in (dict(N=32, C=144, K=144, G=144, H=56, W=56), dict(N=1, C=1152, K=1152,
                                                                   G=1152, H=7, W=7),
                  dict(N=1, C=144, K=144, G=144, H=7, W=7, stride_h=2, stride_w=2)):
        p = problem("conv2d_bwd_weight", **shape)
        for inst in WEIGHT_FAMILY.instances("conv2d_bwd_weight", "bf16"):
            if WEIGHT_FAMILY.applicable(inst, p):
                continue
            c = inst.settings
            blocks = -(-p.C // c["ch"])
            tiles = p.N * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"])  # dy's tiles
            assert WEIGHT_FAMILY.items(inst, p) == tiles * blocks
            splits = WEIGHT_FAMILY.splits(inst, p)
            launches = WEIGHT_FAMILY.launches(inst, p)
            main = launches[0]
            assert main.grid == (splits, blocks, 1) and main.block == (threads(c), 1, 1)
            x, dy = main.args[-2:]
            assert x.buffer == "x" and x.box == (c["ch"], box(c)[1], box(c)[0], 1)
            assert dy.buffer == "dy" and dy.dims == (p.C, p.Q, p.P, p.N)
            assert dy.box == (c["ch"], c["tile_w"], c["tile_h"], 1)
            if c["cluster"] > 1:  # the cluster's blocks meet in shared memory and write dw
                assert splits == c["cluster"] and len(launches) == 1
                assert main.args[2] == "dw" and WEIGHT_FAMILY.workspace_bytes(inst, p) == 0
                continue
            assert 1 <= splits <= tiles
            assert splits * blocks <= max(SM_COUNT * c["occ"], blocks)  # all resident
            reduce = launches[1]
            assert main.args[2] == "workspace"
            assert reduce.args == ("workspace", "dw", p.C * 9, splits)
            assert reduce.block == (256, 1, 1) and reduce.grid[0] * 32 >= min(p.C * 9, 132 * 4 * 32)
            assert WEIGHT_FAMILY.workspace_bytes(inst, p) == 4 * splits * p.C * 9


def test_backward_weight_code_objects_compile_for_sm_90a_without_spills():
    picked = {}
    for inst in WEIGHT_FAMILY.instances("conv2d_bwd_weight", "bf16"):
        c = inst.settings
        picked.setdefault((c["ch"], c["fr"], c["stride"], c["rows"], c["cluster"] > 1,
                           register_cap(c)), inst)
    failures = compile_failures(WEIGHT_FAMILY, picked.values(), lambda inst: inst.operator)
    assert not failures, "\n".join(failures[:20])
