"""conv_wgmma_split without a GPU: its configuration space, how many slices it splits a
reduction into and where it refuses, the taps of a stride residue, its launches and workspace,
the toy cost model, and its code objects compiled for sm_90a with NVRTC (no spills). The GPU
check is tests/test_wgmma_gpu.py."""

from __future__ import annotations

import math

import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import SM_COUNT, blocks_per_sm, generate_configs, shared_bytes, threads
from kernels.conv.wgmma_split import (FAMILY, MIN_SLICE_K_TILES, reduction_k_tiles, taps)
from tests.nvrtc_check import compile_failures


def problem(op, **shape):
    base = dict(N=1, C=512, K=512, G=1, H=7, W=7, R=3, S=3, pad_h=1, pad_w=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


def test_config_space_is_conv_wgmmas_of_64_row_consumers_forward_and_backward_data():
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        assert [i.settings for i in FAMILY.instances(op, "bf16")] == [
            c for c in generate_configs(op) if c["wg_m"] == 64]
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    from farm.select.catalogue import candidate_families

    assert FAMILY in candidate_families("conv2d_fwd")
    assert FAMILY not in candidate_families("conv2d_bwd_weight")  # an active job names it not
    assert FAMILY.instances("conv2d_fwd", "fp32") == []
    assert FAMILY.targets == ("sm_90a",)


def test_taps_of_a_stride_residue_match_counting_them():
    for stride in (1, 2, 3, 4):
        for dil in (1, 2, 3):
            for size in (1, 2, 3, 4, 5, 7, 11):
                for pad in range(size):
                    for residue in range(stride):
                        want = sum((residue + pad - r * dil) % stride == 0 for r in range(size))
                        assert taps(residue, pad, dil, stride, size) == want


def test_reduction_k_tiles():
    assert reduction_k_tiles(problem("conv2d_fwd", C=520)) == math.ceil(520 * 9 / 64)
    # stride 2, 3x3, pad 1: residue 0 has taps 1 (one row), residue 1 taps 0 and 2
    q = problem("conv2d_bwd_data", K=96, H=14, W=14, stride_h=2, stride_w=2)
    assert reduction_k_tiles(q) == math.ceil(2 * 2 * 96 / 64)


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_slices_fill_the_gpu_and_refuse_where_there_is_one(op):
    shapes = [dict(), dict(C=1024, K=256, H=14, W=14, R=1, S=1, pad_h=0, pad_w=0),
              dict(G=4), dict(N=32, C=256, K=256, H=56, W=56),
              dict(C=64, K=512, H=15, W=13, stride_h=2, stride_w=2)]
    split_somewhere = False
    for shape in shapes:
        p = problem(op, **shape)
        for inst in FAMILY.instances(op, "bf16"):
            splits, per = FAMILY.splits(inst, p)
            k_tiles = reduction_k_tiles(p)
            assert splits * per >= k_tiles > (splits - 1) * per  # every slice non-empty
            blocks = FAMILY.tiles(inst, p) * FAMILY.unsplit_z(p)
            assert splits == 1 or (blocks * splits <= SM_COUNT * blocks_per_sm(inst.settings)
                                   and per >= MIN_SLICE_K_TILES)
            reason = FAMILY.applicable(inst, p)
            if splits == 1:
                assert reason is not None
            elif reason is None:
                split_somewhere = True
    assert split_somewhere
    big = problem(op, N=32, C=256, K=256, H=56, W=56)
    inst = FAMILY.instances(op, "bf16")[0]
    assert "conv_wgmma runs this shape unsplit" in FAMILY.applicable(inst, big)
    assert "Cg=12" in FAMILY.applicable(inst, problem(op, C=12))


@pytest.mark.parametrize("op", ["conv2d_fwd", "conv2d_bwd_data"])
def test_launches_zero_the_workspace_then_run_the_split_kernel(op):
    p = problem(op)
    inst = next(i for i in FAMILY.instances(op, "bf16") if FAMILY.applicable(i, p) is None)
    splits, per = FAMILY.splits(inst, p)
    zero, main = FAMILY.launches(inst, p)
    out = p.tensor_elements()["output" if op == "conv2d_fwd" else "input"]
    tiles = FAMILY.tiles(inst, p)
    words = out + FAMILY.unsplit_z(p) * tiles
    assert FAMILY.workspace_bytes(inst, p) == 4 * words
    assert zero.entry == "igemm_zero" and zero.args == ("workspace", words)
    assert main.entry == ("wgmma_fwd_split" if op == "conv2d_fwd" else "wgmma_bwd_data_split")
    assert main.args[3] == "workspace" and main.args[5:8] == (per, splits, tiles)
    assert main.grid == (min(tiles, SM_COUNT * blocks_per_sm(inst.settings)), 1,
                         FAMILY.unsplit_z(p) * splits)
    assert main.block == (threads(inst.settings), 1, 1)
    assert main.shared_bytes == shared_bytes(inst.settings)


def test_the_toy_cost_model_prices_every_instance():
    from kernels.conv.cost_model import synthetic_us

    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        p = problem(op)
        for inst in FAMILY.instances(op, "bf16"):
            assert math.isfinite(synthetic_us(p, inst)) and synthetic_us(p, inst) > 0


def test_code_objects_compile_for_sm_90a_without_spills():
    """One code object per tile, warpgroup shape and TMA mode of each direction (the deepest
    pipeline); the GPU test compiles and verifies every one."""
    picked = {}
    for op in ("conv2d_fwd", "conv2d_bwd_data"):
        for inst in FAMILY.instances(op, "bf16"):
            c = inst.settings
            picked.setdefault((op, c["block_m"], c["block_n"], c["wg_m"], c["producers"],
                               c["tma"] == 0), inst)
    failures = compile_failures(
        FAMILY, picked.values(),
        lambda inst: "wgmma_fwd_split" if inst.operator == "conv2d_fwd" else "wgmma_bwd_data_split")
    assert not failures, "\n".join(failures[:20])
