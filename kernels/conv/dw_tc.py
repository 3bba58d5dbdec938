"""conv_dw_tc_bwd_weight: depthwise backward-weight on the tensor cores (conv/dw_tc_bwd_weight.cu,
sm_90a only). conv_dw_tma_bwd_weight's tiles of 64 channels and its ways for the splits' sums
(a workspace and a second launch, or a thread-block cluster), with each warp's products as
mma.sync over 16 dy pixels at a time: A the input under two taps of 8 channels, B those
channels' dy, the diagonal of the 8 x 8 channel products kept. Per 16 pixels and 8 channels a
warp issues ceil(R * S / 2) mma.sync and as many ldmatrix, where the CUDA cores take R * S
multiply-adds per value and the unpacking of every input."""

from __future__ import annotations

import itertools
from typing import Any

from kernels.conv.dw_tma import SM_REGISTERS, SM_SHARED, STRIDES, DepthwiseTmaBwdWeight, box
from kernels.conv.igemm import _cdiv
from kernels.conv.problem import ConvProblem
from kernels.family import Instance
from kernels.registry import register

CHANNELS = 64  # a block's channels: 8 groups of 8, the 128-byte rows of the swizzled boxes
WARPS = 8  # one a group of 8 channels
FILTERS = (3, 5, 7)
TILES = ((8, 8), (4, 16), (8, 16), (16, 8), (16, 16))
CLUSTERS = (1, 4, 8, 16)


def threads(config: dict[str, Any]) -> int:
    return 32 * config["warps"]


def shared_bytes(config: dict[str, Any]) -> int:
    """The stages (input box and dy box, each on a 1024-byte boundary) or, after them, the
    block's sums, whichever is larger."""
    rows, cols = box(config)
    taps = config["fr"] ** 2
    stage = (_cdiv(rows * cols * 2 * CHANNELS, 1024)
             + _cdiv(config["tile_h"] * config["tile_w"] * 2 * CHANNELS, 1024)) * 1024
    sums = CHANNELS * taps * 4
    return 1024 + max(config["stages"] * stage, sums) + 64


def generate_configs() -> list[dict[str, Any]]:
    """Every filter, stride and tile, 2 to 4 stages, the splits' sums in a workspace or a
    cluster of 4, 8 or 16; occ the blocks a multiprocessor whose registers (255 a thread, or 128
    for 3x3 filters and 5x5 at stride 1 on 64-pixel tiles) and shared memory fit. 7x7
    filters on 64-pixel tiles only (NVRTC: a warp's 25 accumulator tiles and a larger tile's
    addresses spill)."""
    out = []
    for fr, stride, (th, tw), cluster in itertools.product(
            FILTERS, STRIDES["conv2d_fwd"], TILES, CLUSTERS):
        if fr == 7 and th * tw > 64:
            continue
        for stages in (2, 3, 4):
            base = {"ch": CHANNELS, "vec": 8, "fr": fr, "stride": stride, "tile_h": th,
                    "tile_w": tw, "warps": WARPS, "stages": stages, "cluster": cluster}
            occs = {SM_REGISTERS // (threads(base) * cap)
                    for cap in ((255, 128) if fr == 3 or (fr, stride, th * tw) == (5, 1, 64)
                               else (255,))}
            for occ in sorted(o for o in occs if o):
                config = {**base, "occ": occ}
                if occ * (shared_bytes(config) + 1024) <= SM_SHARED:
                    out.append(config)
    return out


class DepthwiseTcBwdWeight(DepthwiseTmaBwdWeight):
    name = "conv_dw_tc_bwd_weight"
    short = "dw_tc"
    source_file = "conv/dw_tc_bwd_weight.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in self.operators else []

    @staticmethod
    def items(instance: Instance, p: ConvProblem) -> int:
        """(tile of dy, channel block) items: the splits walk dy's tiles."""
        c = instance.settings
        return p.N * _cdiv(p.P, c["tile_h"]) * _cdiv(p.Q, c["tile_w"]) * _cdiv(p.C, CHANNELS)

    # dw_tc_reduce: a block's 8 warps over 32 runs of 4 consecutive entries
    reduce_entry, reduce_entries = "dw_tc_reduce", 128
    block_threads = staticmethod(threads)
    block_shared_bytes = staticmethod(shared_bytes)


FAMILY = register(DepthwiseTcBwdWeight())
