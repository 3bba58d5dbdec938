"""conv_stem_bwd_weight: backward-weight of convolutions with few input channels a group (the
stems: 1 to 4, and groups of 8 to 32) as a GEMM on mma.sync (conv/stem_bwd_weight.cu): dw's
K/G x (R x S x C/G) summed over every output pixel, with operand B an im2col of a staged input
tile. With 1 to 4 channels a group (no copy fetches a 6-byte pixel whole) the tile is staged
element by element and B gathered by one 16-bit load an element; with a multiple of 8 it comes
by 16-byte copies and B by ldmatrix.trans. dy^T by ldmatrix. A block owns 16 mt output channels
by 8 nt wn columns and walks a split of the tp x tq output tiles (two stages: the next tile's
copies under this one's products); its wp warps along the pixels add up in shared memory, each
split stores its sums in its own fp32 slice of a workspace, and a second launch adds the slices
up. NVIDIA sm_80 and later, bf16 and fp16.

Configuration: `mt` (16-channel tiles a warp), `nt` (8-column tiles a warp), `wn` and `wp`
(warps along the columns and the pixels), `tp` and `tq` (a tile's output rows and columns)."""

from __future__ import annotations

from typing import Any

from kernels.conv.grouped_mma import SM_REGISTERS, SM_SHARED, SMEM_OPT_IN
from kernels.conv.igemm import _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.stem import GRID_LIMIT  # blocks along y (here channel and column slices), z
from kernels.family import (SM_COUNT, Instance, KernelFamily, Launch, grid_stride_blocks,
                             refuse_below_sm)
from kernels.registry import register

OPERATOR = "conv2d_bwd_weight"
WIDEST = 4  # the most input channels a group staged element by element
WIDEST_COPIED = 32  # the most staged by 16-byte copies (C/G a multiple of 8; wider: the GEMMs)
CHANNEL_STEP = 8  # K/G a multiple of it: dy's rows are copied 16 bytes at a time
WARPS = ((1, 4), (2, 2), (4, 1), (2, 4), (4, 2))  # (wn, wp)
NTS = (1, 2, 3, 5)
WIDEST_BLOCK = 8 * max(NTS) * max(wn for wn, _ in WARPS)  # the most columns a block sums
TILES = ((4, 32), (8, 16), (8, 8))  # (tp, tq): 128 output pixels, or 64 for small maps
SPLIT_TILES = 4  # the fewest tiles a split sums (more splits: more slices to add up)


def threads(config: dict[str, Any]) -> int:
    return 32 * config["wn"] * config["wp"]


def generate_configs() -> list[dict[str, Any]]:
    return [{"mt": mt, "nt": nt, "wn": wn, "wp": wp, "tp": tp, "tq": tq}
            for mt in (1, 2, 4) for nt in NTS for wn, wp in WARPS for tp, tq in TILES]


def copied(cg: int) -> bool:
    """Whether a pixel's C/G input channels are whole 16-byte pieces (the kernel's copy mode)."""
    return cg % 8 == 0


def serves_groups_of(cg: int) -> bool:
    """Whether the input's C/G channels a pixel stage: element by element, or 16 bytes a copy."""
    return cg <= WIDEST or (copied(cg) and cg <= WIDEST_COPIED)


def pixel_pitch(cg: int) -> int:
    """A staged input pixel's 16-bit elements (the kernel's pixel_pitch): C/G, 8 more where C/G
    is copied in an even number of 16-byte pieces (ldmatrix's rows in distinct banks)."""
    return cg + 8 if copied(cg) and (cg // 8) % 2 == 0 else cg


def outgrown(tp: int, tq: int, p: ConvProblem) -> bool:
    """Whether a larger tile of TILES covers the output map with no more padded pixels."""
    def padded(h: int, w: int) -> int:
        return _cdiv(p.P, h) * h * _cdiv(p.Q, w) * w
    return any(h * w > tp * tq and padded(h, w) <= padded(tp, tq) for h, w in TILES)


def columns(p: ConvProblem) -> int:
    """dw's columns a group: R x S x C/G."""
    return p.R * p.S * p.c_per_group


class StemBwdWeight(KernelFamily):
    name = "conv_stem_bwd_weight"
    short = "stem_mma"
    source_file = "conv/stem_bwd_weight.cu"
    operators = (OPERATOR,)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator == OPERATOR else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def unsupported_target(self, target: str) -> str | None:
        return refuse_below_sm(self.name, target, 80, "NVIDIA's mma.sync and cp.async")

    @staticmethod
    def staged(c: dict[str, Any], p: ConvProblem) -> tuple[int, int]:
        """(rows, 16-bit elements a row) of a tile's staged input."""
        rows = (c["tp"] - 1) * p.stride_h + (p.R - 1) * p.dil_h + 1
        cols = (c["tq"] - 1) * p.stride_w + (p.S - 1) * p.dil_w + 1
        return rows, cols * pixel_pitch(p.c_per_group)

    def shared_bytes(self, instance: Instance, p: ConvProblem) -> int:
        """Two stages of dy's tile and the staged input (16-bit), or the block's sums (fp32)
        after them."""
        c = instance.settings
        rows, row = self.staged(c, p)
        tile = 2 * 2 * (c["tp"] * c["tq"] * (16 * c["mt"] + 8) + _cdiv(rows * row, 8) * 8)
        return max(tile, 4 * 16 * c["mt"] * 8 * c["nt"] * c["wn"])

    def blocks_per_sm(self, instance: Instance, p: ConvProblem) -> int:
        """Shared memory, threads, and registers: the accumulators and A fragments and about
        90 more (100 in 256-thread blocks, which have no launch bound on their blocks; NVRTC,
        sm_90: 116 to 190 a thread), at least 112, rounded up to the allocation's 8, and for
        128-thread blocks at most the launch bound's three blocks a multiprocessor allow."""
        c = instance.settings
        t = threads(c)
        regs = max(112, 4 * c["mt"] * (c["nt"] + 1) + c["nt"] + (90 if t == 128 else 100))
        regs = -(-regs // 8) * 8
        if t == 128:
            regs = min(regs, SM_REGISTERS // (3 * t) // 8 * 8)
        return max(1, min(SM_SHARED // (self.shared_bytes(instance, p) + 1024), 2048 // t,
                          SM_REGISTERS // (t * regs)))

    @staticmethod
    def tiles(c: dict[str, Any], p: ConvProblem) -> int:
        return p.N * _cdiv(p.P, c["tp"]) * _cdiv(p.Q, c["tq"])

    @staticmethod
    def slices(c: dict[str, Any], p: ConvProblem) -> int:
        """Grid y: the channel slices of 16 mt by the column slices of 8 nt wn."""
        return _cdiv(p.k_per_group, 16 * c["mt"]) * _cdiv(columns(p), 8 * c["nt"] * c["wn"])

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(splits, tiles a split): as many as the resident blocks over the slices and groups
        (one wave), each split at least SPLIT_TILES tiles."""
        c = instance.settings
        tiles = self.tiles(c, p)
        want = SM_COUNT * self.blocks_per_sm(instance, p) // (self.slices(c, p) * p.G)
        per = _cdiv(tiles, max(1, min(want, _cdiv(tiles, SPLIT_TILES))))
        return _cdiv(tiles, per), per

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        other = self.other_problem(instance, p)
        if other:
            return other
        if not serves_groups_of(p.c_per_group):
            return (f"C/G={p.c_per_group}: it serves 1 to {WIDEST} input channels a group, or "
                    f"multiples of 8 up to {WIDEST_COPIED} (the implicit GEMMs, wider groups)")
        if p.k_per_group % CHANNEL_STEP:
            return (f"K/G={p.k_per_group} is not a multiple of {CHANNEL_STEP} (dy's rows are "
                    "copied 16 bytes at a time)")
        cols, per_warp = columns(p), 8 * c["nt"]
        if _cdiv(cols, per_warp * c["wn"]) > _cdiv(cols, WIDEST_BLOCK):
            return (f"{per_warp * c['wn']} columns a block for R*S*C/G={cols}: wider blocks "
                    "read dy fewer times")
        if (c["wn"] - 1) * per_warp >= cols:
            return (f"{c['wn']} warps of {per_warp} columns for R*S*C/G={cols}: a warp would "
                    "have none")
        if c["mt"] > 1 and 16 * (c["mt"] - 1) >= p.k_per_group:
            return (f"mt={c['mt']} tiles of 16 output channels for K/G={p.k_per_group}: one "
                    "would be idle")
        if outgrown(c["tp"], c["tq"], p):
            return (f"tiles of {c['tp']}x{c['tq']} outputs on a {p.P}x{p.Q} map: larger tiles "
                    "cover it with no more padding")
        smem = self.shared_bytes(instance, p)
        if smem > SMEM_OPT_IN:
            return (f"the tiles need {smem // 1024} KiB of shared memory, above "
                    f"{SMEM_OPT_IN // 1024} KiB")
        if max(self.slices(c, p), p.G) > GRID_LIMIT:
            return f"a grid of {self.slices(c, p)} x {p.G} blocks along y and z, over {GRID_LIMIT}"
        return None

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """A split's fp32 slice of dw each."""
        return 4 * problem.tensor_elements()["weight"] * self.splits(instance, problem)[0]

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        splits, per = self.splits(instance, p)
        n = p.tensor_elements()["weight"]
        return [Launch("stem_bwd_weight", (splits, self.slices(c, p), p.G), (threads(c), 1, 1),
                       ("x", "dy", "workspace", conv_params(p), per),
                       self.shared_bytes(instance, p)),
                Launch("stem_bwd_weight_sum", (grid_stride_blocks(n, 32), 1, 1), (256, 1, 1),
                       ("workspace", "dw", n, splits))]


FAMILY = register(StemBwdWeight())
