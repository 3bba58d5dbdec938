"""conv_wgmma_stream: conv_wgmma_im2col's forward and stride-1 backward-data (the same tiles,
im2col and weight copies, producers and consumers, conv/wgmma_im2col.cu) on a stream-K
schedule: the blocks the GPU holds at once share a group's output tiles' k-tiles evenly, so
that a last wave of few tiles does not leave multiprocessors idle (72 to 98 tiles of 128 or
256 rows on 132 multiprocessors: the wide 1x1 layers of 7x7 and 14x14 maps). A tile that
blocks share is summed from their fp32 parts (one workspace slot a part, at most two a block;
the block that counts the tile last adds them and writes it); the counters are zeroed by a
launch before. Consumers of 64 rows (the parts' epilogue); sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.igemm import _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import SM_COUNT, WgmmaConv, blocks_per_sm, shared_bytes, threads
from kernels.conv.wgmma_im2col import WgmmaIm2colConv
from kernels.conv.wgmma_split import reduction_k_tiles
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")


def blocks(instance: Instance) -> int:
    """The grid's blocks: as many as the GPU holds at once."""
    return SM_COUNT * blocks_per_sm(instance.settings)


def counter_words(p: ConvProblem, tiles: int) -> int:
    """The workspace's words before the parts: a counter a tile of each group, to 16 bytes."""
    return _cdiv(p.G * tiles, 4) * 4


def stream_start(b: int, total: int, count: int) -> int:
    """Block b's first iteration of `total` shared by `count` blocks (as the kernel's)."""
    return total * b // count


def stream_block(it: int, total: int, count: int) -> int:
    """The block whose iterations hold `it` (as the kernel's)."""
    return min(((it + 1) * count - 1) // total, count - 1)


def stream_slot(b: int, first: int, total: int, count: int) -> int:
    """Block b's workspace slot for the shared tile whose first iteration is `first`: 2 b for
    the first tile of its range, 2 b + 1 for its last (as the kernel's)."""
    return 2 * b + (stream_start(b, total, count) < first)


class WgmmaStreamConv(WgmmaIm2colConv):
    name = "conv_wgmma_stream"
    short = "wgmma_stream"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """conv_wgmma_im2col's tiles and pipelines of 64-row consumers, but 128 x 256 (two
        consumers of 128 accumulators a thread spill beside the parts' epilogue at 168
        registers)."""
        return [{k: v for k, v in c.items() if k != "split_k"}
                for c in super().configs(operator) if c["split_k"] and c["wg_m"] == 64
                and (c["block_m"], c["block_n"]) != (128, 256)]

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return 1, reduction_k_tiles(p)

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """The resident blocks, at most one a k-tile of the group's tiles (so that each has
        one: a shared tile's sharers are the blocks its iterations fall in), the groups."""
        return min(blocks(instance), self.tiles(instance, p) * reduction_k_tiles(p)), 1, p.G

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        return WgmmaConv.applicable(self, instance, problem)

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """The tiles' counters, then per group and block two fp32 parts of a tile."""
        c, p = instance.settings, problem
        parts = p.G * blocks(instance) * 2 * c["block_m"] * c["block_n"]
        return 4 * (counter_words(p, self.tiles(instance, p)) + parts)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        entry, operands = {"conv2d_fwd": ("wgmma_fwd_stream", ("x", "w", "y")),
                           "conv2d_bwd_data": ("wgmma_bwd_data_stream", ("dy", "w", "dx"))}[p.op]
        words = counter_words(p, self.tiles(instance, p))
        return [Launch("igemm_zero", (grid_stride_blocks(words, 256), 1, 1), (256, 1, 1),
                       ("workspace", words)),
                Launch(entry, self.grid(instance, p), (threads(c), 1, 1),
                       (*operands, "workspace", conv_params(p), *self.tensor_maps(instance, p)),
                       shared_bytes(c))]


FAMILY = register(WgmmaStreamConv())
