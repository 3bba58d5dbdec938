"""conv_wgmma_stream without a GPU: its configurations and launches, the stream-K schedule's
arithmetic (the kernel's formulas, here in Python) against a direct count of the blocks'
ranges, and its code objects compiled for sm_90a with NVRTC (no spills). The GPU check is
tests/test_wgmma_gpu.py."""

from __future__ import annotations

import itertools

import pytest

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_stream import (FAMILY, blocks, counter_words, stream_block,
                                       stream_slot, stream_start)
from tests.nvrtc_check import compile_failures

OPS = ("conv2d_fwd", "conv2d_bwd_data")


def problem(op, **shape):
    base = dict(N=32, C=1024, K=256, G=1, H=14, W=14, R=1, S=1)
    return ConvProblem(op=op, dtype="bf16", **{**base, **shape})


@pytest.mark.parametrize("op", OPS)
def test_configs_and_launches(op):
    instances = FAMILY.instances(op, "bf16")
    assert len(instances) == len({i.name for i in instances}) == 10
    assert FAMILY.instances("conv2d_bwd_weight", "bf16") == []
    p = problem(op, G=2, C=1024, K=512)
    for inst in instances:
        c = inst.settings
        assert c["wg_m"] == 64 and (c["block_m"], c["block_n"]) != (128, 256)
        assert FAMILY.applicable(inst, p) is None
        zero, main = FAMILY.launches(inst, p)
        tiles = FAMILY.tiles(inst, p)
        assert zero.entry == "igemm_zero" and zero.args == ("workspace", counter_words(p, tiles))
        assert counter_words(p, tiles) % 4 == 0 and counter_words(p, tiles) >= 2 * tiles
        assert main.entry == ("wgmma_fwd_stream" if op == "conv2d_fwd"
                              else "wgmma_bwd_data_stream")
        assert main.grid == (blocks(inst), 1, 2) and main.args[3] == "workspace"
        parts = 2 * blocks(inst) * 2 * c["block_m"] * c["block_n"]
        assert FAMILY.workspace_bytes(inst, p) == 4 * (counter_words(p, tiles) + parts)
    reason = FAMILY.applicable(instances[0], problem(op, C=96, K=96))
    assert "g=96 is not a multiple of 64" in reason
    tiny = problem(op, N=1, C=64, K=64, H=2, W=2)  # one tile of one k-tile: one block
    assert FAMILY.launches(instances[0], tiny)[1].grid == (1, 1, 1)


@pytest.mark.parametrize("tiles, k_tiles, count", [
    (98, 16, 132), (72, 25, 132), (3, 144, 132), (1, 1, 132), (400, 4, 132), (10, 7, 264),
    (7, 1, 5), (132, 3, 132)])
def test_the_schedule_covers_every_tile_once(tiles, k_tiles, count):
    """Every block's range (the grid has at most one block an iteration) split at tile
    edges: each tile's k-tiles covered exactly once; a tile one block covers whole is not
    shared; a shared tile's sharers are the blocks from
    stream_block of its first to that of its last iteration, each with a slot of its own that
    no other shared tile uses, and a block has at most two shared tiles."""
    total = tiles * k_tiles
    count = min(count, total)  # the grid: every block has an iteration
    covered = {t: [] for t in range(tiles)}
    shared_of = {b: [] for b in range(count)}
    for b in range(count):
        it, end = stream_start(b, total, count), stream_start(b + 1, total, count)
        while it < end:
            t, kb = divmod(it, k_tiles)
            ke = min(k_tiles, kb + end - it)
            assert ke > kb
            covered[t].append((kb, ke, b))
            if (kb, ke) != (0, k_tiles):
                shared_of[b].append(t)
            it += ke - kb
    slots = {}
    for t, parts in covered.items():
        spans = sorted((kb, ke) for kb, ke, _ in parts)
        assert spans[0][0] == 0 and spans[-1][1] == k_tiles
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        sharers = sorted(b for _, _, b in parts)
        first = t * k_tiles
        assert sharers == list(range(stream_block(first, total, count),
                                     stream_block(first + k_tiles - 1, total, count) + 1))
        if len(sharers) > 1:
            for b in sharers:
                slot = stream_slot(b, first, total, count)
                assert slot // 2 == b and slot not in slots
                slots[slot] = t
    assert all(len(v) <= 2 for v in shared_of.values())
    for it in range(total):  # the closed form against a search
        assert stream_block(it, total, count) == max(
            b for b in range(count) if stream_start(b, total, count) <= it)


def test_code_objects_compile_for_sm_90a_without_spills():
    picked = {}
    for op in OPS:
        for inst in FAMILY.instances(op, "bf16"):
            picked.setdefault((op, tuple(sorted(FAMILY.defines(inst).items()))), inst)
    failures = compile_failures(FAMILY, picked.values(), lambda inst: FAMILY.launches(
        inst, problem(inst.operator))[1].entry)
    assert not failures, "\n".join(failures[:20])
