"""conv_wgmma_split: conv_wgmma's forward and backward-data with the reduction split over the
grid (split-K, conv/wgmma_split.cu), for the shapes whose output tiles leave multiprocessors
idle: the slices that fill the GPU (as many blocks as it holds at once, over the tiles of every
grid z slice), each of at least MIN_SLICE_K_TILES k-tiles, add their fp32 sums into a zeroed
workspace laid out as the output; the last slice of a tile writes it. Where that comes to one
slice the instance refuses the shape: conv_wgmma runs it unsplit. Configurations: conv_wgmma's
tiles of 64-row consumers, pipelines and TMA modes (backward-weight has its split there).
sm_90a only."""

from __future__ import annotations

import math
from typing import Any

from kernels.conv.igemm import GRID_Z_LIMIT, _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import (BLOCK_K, SM_COUNT, WgmmaConv, blocks_per_sm, generate_configs,
                                shared_bytes, threads)
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
MIN_SLICE_K_TILES = 2  # a slice's pipeline fills and drains: fewer k-tiles are all overhead


def taps(residue: int, pad: int, dil: int, stride: int, size: int) -> int:
    """Filter taps that reach input rows of `residue` modulo the stride (igemm_loaders.cuh's
    Taps: every stride / gcd(stride, dil)-th tap from the first that lands)."""
    step = stride // math.gcd(stride, dil)
    first = next((r for r in range(min(size, step)) if (residue + pad - r * dil) % stride == 0),
                 size)
    return (size - 1 - first) // step + 1 if first < size else 0


def reduction_k_tiles(p: ConvProblem) -> int:
    """k-tiles of the longest reduction of a grid z slice: C/G x R x S forward; backward-data
    the most taps of a stride residue x K/G."""
    if p.op == "conv2d_fwd":
        return _cdiv(p.c_per_group * p.R * p.S, BLOCK_K)
    rows = max(taps(r, p.pad_h, p.dil_h, p.stride_h, p.R) for r in range(p.stride_h))
    cols = max(taps(r, p.pad_w, p.dil_w, p.stride_w, p.S) for r in range(p.stride_w))
    return _cdiv(rows * cols * p.k_per_group, BLOCK_K)


class WgmmaSplitConv(WgmmaConv):
    name = "conv_wgmma_split"
    short = "wgmma_split"
    source_file = "conv/wgmma_split.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """conv_wgmma's, less the consumers of 128 rows (their 128 accumulators a thread and
        the split's epilogue spill)."""
        return ([c for c in generate_configs(operator) if c["wg_m"] == 64]
                if operator in OPERATORS else [])

    def unsplit_z(self, p: ConvProblem) -> int:
        """conv_wgmma's grid z: groups, times the stride residues in backward-data."""
        return super().grid_z(None, p)

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(slices, k-tiles per slice): as many as fill the GPU's resident blocks over the
        tiles of every z, each slice at least MIN_SLICE_K_TILES long; every slice of the
        longest reduction non-empty."""
        k_tiles = reduction_k_tiles(p)
        blocks = self.tiles(instance, p) * self.unsplit_z(p)
        wanted = SM_COUNT * blocks_per_sm(instance.settings) // max(1, blocks)
        wanted = max(1, min(wanted, k_tiles // MIN_SLICE_K_TILES,
                            GRID_Z_LIMIT // self.unsplit_z(p)))
        per = _cdiv(k_tiles, wanted)
        return _cdiv(k_tiles, per), per

    def grid_z(self, instance: Instance, p: ConvProblem) -> int:
        return self.unsplit_z(p) * self.splits(instance, p)[0]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        reason = super().applicable(instance, problem)
        if reason:
            return reason
        if self.splits(instance, problem)[0] == 1:
            return ("its tiles fill the GPU (or the reduction is too short to split): "
                    "conv_wgmma runs this shape unsplit")
        return None

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """The output's fp32 sums and an int counter per tile of every z."""
        p = problem
        out = p.tensor_elements()["output" if p.op == "conv2d_fwd" else "input"]
        return 4 * (out + self.unsplit_z(p) * self.tiles(instance, p))

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        splits, per = self.splits(instance, p)
        words = self.workspace_bytes(instance, p) // 4
        entry, operands = (("wgmma_fwd_split", ("x", "w", "y")) if p.op == "conv2d_fwd"
                           else ("wgmma_bwd_data_split", ("dy", "w", "dx")))
        return [Launch("igemm_zero", (grid_stride_blocks(words, 256), 1, 1), (256, 1, 1),
                       ("workspace", words)),
                Launch(entry, self.grid(instance, p), (threads(c), 1, 1),
                       (*operands, "workspace", conv_params(p), per, splits,
                        self.tiles(instance, p), *self.tensor_maps(instance, p)),
                       shared_bytes(c))]


FAMILY = register(WgmmaSplitConv())
