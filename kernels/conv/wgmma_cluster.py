"""conv_wgmma_cluster: conv_wgmma's backward-weight with the reduction over the output pixels
split over the blocks of a thread-block cluster (conv/wgmma_cluster.cu): each of dw's tiles is
summed by a cluster of `cluster` blocks, each over its share of the k-tiles, and the sums meet
in distributed shared memory: one launch, no workspace and no atomics, where conv_wgmma's
split adds fp32 sums into a zeroed workspace. For dw of few tiles (K/G x C/G R S) over a long
reduction: the 1x1 layers of 256 to 2,048 channels at 7x7 to 28x28. conv_wgmma's tiles of one
producer warpgroup, its deepest pipeline, `tma` 1 or 2; sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import (ALIGN, BARRIER_BYTES, BLOCK_K, MAX_STAGES, SMEM_OPT_IN, TILES,
                                WgmmaConv, blocks_per_sm, shared_bytes, threads)
from kernels.family import SM_COUNT, Instance, Launch
from kernels.registry import register

OPERATORS = ("conv2d_bwd_weight",)
CLUSTERS = (2, 4, 8)


def generate_configs() -> list[dict[str, Any]]:
    """Per tile of one producer warpgroup its deepest pipeline, whose stages hold the tile's
    fp32 sums at the end."""
    out = []
    for bm, bn, producers, wg_m in TILES:
        if producers != 1:
            continue
        stage = (bm + bn) * BLOCK_K * 2
        stages = min(MAX_STAGES, (SMEM_OPT_IN - ALIGN - BARRIER_BYTES) // stage)
        if 4 * bm * bn > stages * stage:
            continue
        out += [{"block_m": bm, "block_n": bn, "block_k": BLOCK_K, "wg_m": wg_m,
                 "stages": stages, "producers": 1, "tma": tma, "cluster": cluster}
                for tma in (1, 2) for cluster in CLUSTERS]
    return out


class WgmmaClusterConv(WgmmaConv):
    name = "conv_wgmma_cluster"
    short = "wgmma_cluster"
    source_file = "conv/wgmma_cluster.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in OPERATORS else []

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """A cluster of blocks for each of dw's tiles (x), the groups (z)."""
        return instance.settings["cluster"] * self.tiles(instance, p), 1, p.G

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        return 0

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(every tile's cluster of blocks over the groups, the blocks the GPU holds)."""
        grid = self.grid(instance, p)
        return grid[0] * grid[2], SM_COUNT * blocks_per_sm(instance.settings)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        return [Launch("wgmma_bwd_weight_cluster", self.grid(instance, p), (threads(c), 1, 1),
                       ("x", "dy", "dw", conv_params(p), *self.tensor_maps(instance, p)),
                       shared_bytes(c))]


FAMILY = register(WgmmaClusterConv())
