"""conv_pointwise without a GPU: its configurations, rules and grid, and the kernel's index
walks replayed in Python (each lane's 16-byte copies of a chunk, the warps' chunks) against
the rows and channels they must cover once each. The GPU check is tests/test_pointwise_gpu.py."""

from __future__ import annotations

import pytest

from kernels.conv.pointwise import (FAMILY, SMEM_OPT_IN, blocks_per_sm, channels, round16,
                                    shared_bytes)
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT

OPS = ("conv2d_fwd", "conv2d_bwd_data")


def problem(op, **shape):
    base = dict(N=2, C=64, K=32, G=1, H=14, W=14, R=1, S=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


@pytest.mark.parametrize("op", OPS)
def test_configs(op):
    instances = FAMILY.instances(op, "bf16")
    assert len(instances) == len({i.name for i in instances}) == 36
    assert FAMILY.instances(op, "fp32") == []
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    assert {FAMILY.defines(i)["CONV_OP"] for i in instances} == {OPS.index(op)}
    assert FAMILY.unsupported_target("sm_90a") is None
    assert FAMILY.unsupported_target("sm_80") is None
    assert "sm_80" in FAMILY.unsupported_target("sm_75")
    assert FAMILY.unsupported_target("gfx942") is not None


def test_refusals():
    fwd = FAMILY.instances("conv2d_fwd", "bf16")[0]
    bwd = FAMILY.instances("conv2d_bwd_data", "bf16")[0]
    assert FAMILY.applicable(fwd, problem("conv2d_fwd")) is None
    assert FAMILY.applicable(bwd, problem("conv2d_bwd_data", C=24, K=40)) is None
    for shape in (dict(R=3, S=3, pad_h=1, pad_w=1), dict(stride_h=2, stride_w=2),
                  dict(G=2), dict(pad_h=1, pad_w=1)):
        refusal = FAMILY.applicable(fwd, problem("conv2d_fwd", **shape))
        assert "1x1 convolutions of stride 1" in refusal
    assert "multiples of 8" in FAMILY.applicable(bwd, problem("conv2d_bwd_data", C=20))
    assert "multiples of 8" in FAMILY.applicable(fwd, problem("conv2d_fwd", K=12))
    assert FAMILY.applicable(bwd, problem("conv2d_fwd")).startswith("instance is for")
    wide = problem("conv2d_fwd", C=1024, K=1024)
    assert "shared memory" in FAMILY.applicable(fwd, wide)


def test_shared_memory_and_grid():
    """The weight padded to odd 16-byte chunks a row, the warps' stages; persistent grids no
    larger than the resident blocks, and no more blocks than chunks need."""
    c = {"warps": 4, "rows": 32, "cols": 64, "stages": 3}
    j, nc = 24, 40  # J16 = 32 (+ 8 = 40 a row, 5 chunks), NC16 = 48 (+ 8 = 56)
    assert shared_bytes(c, j, nc) == 2 * (48 * 40 + 4 * (3 * 32 * 40 + 32 * 56))
    for inst in FAMILY.instances("conv2d_bwd_data", "bf16"):
        big = problem("conv2d_bwd_data", N=32, C=96, K=24, H=56, W=56)
        if FAMILY.applicable(inst, big):
            continue
        x, y, z = FAMILY.grid(inst, big)
        assert (y, z) == (1, 1) and x == SM_COUNT * blocks_per_sm(inst.settings, *channels(big))
        tiny = problem("conv2d_bwd_data", N=1, C=96, K=24, H=3, W=3)
        assert FAMILY.grid(inst, tiny)[0] == 1
        assert shared_bytes(inst.settings, *channels(big)) <= SMEM_OPT_IN


def lane_copies(lane: int, rows: int, j: int) -> list[tuple[int, int]]:
    """load_chunk's (row, 16-byte column) walk of one lane, as the kernel steps it."""
    per_row = round16(j) // 8
    step_rows, step_cols = 32 // per_row, 32 - (32 // per_row) * per_row
    row, col, out = lane // per_row, lane % per_row, []
    for _ in range(lane, rows * per_row, 32):
        out.append((row, col))
        row, col = row + step_rows, col + step_cols
        if col >= per_row:
            col, row = col - per_row, row + 1
    return out


@pytest.mark.parametrize("j", [8, 16, 24, 40, 64, 72, 136, 200, 256, 384])
@pytest.mark.parametrize("rows", [32, 64])
def test_chunk_copies_cover_the_chunk_once(j, rows):
    seen = [rc for lane in range(32) for rc in lane_copies(lane, rows, j)]
    assert sorted(seen) == [(r, c) for r in range(rows) for c in range(round16(j) // 8)]


@pytest.mark.parametrize("chunks,warps,blocks", [(1, 4, 1), (7, 8, 1), (12544, 8, 264),
                                                 (100, 4, 25), (1000, 4, 132)])
def test_warps_take_every_chunk_once(chunks, warps, blocks):
    taken = [c for b in range(blocks) for w in range(warps)
             for c in range(b * warps + w, chunks, blocks * warps)]
    assert sorted(taken) == list(range(chunks))



def test_features_and_toy_cost_model():
    """The selection features map the family's warps and chunk to threads and a tile; the toy
    cost model (synthetic measurements only) prices every instance."""
    import math

    from kernels.conv.cost_model import synthetic_us
    from kernels.registry import operator_spec

    for op in OPS:
        spec, p = operator_spec(op), problem(op, N=32, H=56, W=56)
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            f = spec.instance_features(c)
            assert (f["threads"], f["tile_m"], f["tile_n"]) == (32 * c["warps"], c["rows"],
                                                                 c["cols"])
            us = synthetic_us(p, inst)
            assert math.isfinite(us) and us > 5.0
