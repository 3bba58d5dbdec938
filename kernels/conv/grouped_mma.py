"""conv_grouped_mma: grouped convolution forward and backward-data as block-diagonal GEMMs
over an input tile staged once in shared memory (conv/grouped_mma.cu), for groups of 1 to 64
channels with C/G == K/G: groups are packed into super-groups of `width` channels, whose
filter taps are dense width x width matrices zero off the diagonal blocks, so narrow groups
still fill mma.sync's k of 16. A block owns `sg` super-groups and walks output tiles of
tile_h x tile_w pixels (persistent), each read from memory once with its halo, every tap an
address offset into shared memory; `stages` 2 copies the next tile under this one's math.
Backward-data with a stride runs one grid z slice per residue class of dx's pixels. NVIDIA
(mma.sync, ldmatrix, cp.async: sm_80 and later), bf16 and fp16."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from kernels.conv.igemm import _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_split import taps
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch, refuse_below_sm
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1}
TILES = ((8, 8), (4, 16), (16, 8), (8, 16), (4, 32))
WIDTHS = ((16, 2), (16, 4), (16, 8), (32, 1), (32, 2), (64, 1))
SMEM_OPT_IN = 227 * 1024
SM_SHARED = 228 * 1024
SM_REGISTERS = 65536
MAX_THREADS = 512


def warp_tile(config: dict[str, Any]) -> tuple[int, int, int]:
    """(fragments of 16 pixels, output columns, warps along n) of one warp."""
    wn = min(config["width"], 32)
    frags = config["tile_h"] * config["tile_w"] // 16 // config["warps_m"]
    return frags, wn, config["width"] // wn


def threads(config: dict[str, Any]) -> int:
    return 32 * config["sg"] * warp_tile(config)[2] * config["warps_m"]


def generate_configs() -> list[dict[str, Any]]:
    """Every tile with every packing: fragments of at most 4 x 16 pixels a warp, at most 512
    threads; two stages, and one (a smaller footprint, more blocks a multiprocessor) on the
    square tiles."""
    out = []
    for th, tw in TILES:
        frags = th * tw // 16
        for width, sg in WIDTHS:
            for warps_m in (1, 2, 4):
                config = {"tile_h": th, "tile_w": tw, "width": width, "sg": sg,
                          "warps_m": warps_m}
                if frags % warps_m or frags // warps_m > 4 or threads(config) > MAX_THREADS:
                    continue
                if frags // warps_m < 2 and warps_m > 1:
                    continue
                out.append({**config, "stages": 2})
                if th == tw:
                    out.append({**config, "stages": 1})
    return out


class GroupedMmaConv(KernelFamily):
    name = "conv_grouped_mma"
    short = "grouped_mma"
    operators = OPERATORS
    source_file = "conv/grouped_mma.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in OPERATORS else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "GMMA_OP": OP_CODES[instance.operator]}

    def unsupported_target(self, target: str) -> str | None:
        return refuse_below_sm(self.name, target, 80, "NVIDIA's mma.sync and cp.async")

    # Geometry ------------------------------------------------------------------------------
    @staticmethod
    def staged(instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(rows, slots a row) of the largest staged input tile over the grid z slices."""
        c = instance.settings
        th, tw = c["tile_h"], c["tile_w"]
        if p.op == "conv2d_fwd":
            rows = (th - 1) * p.stride_h + (p.R - 1) * p.dil_h + 1
            cols = (tw - 1) * p.stride_w + (p.S - 1) * p.dil_w + 1
            return rows, p.stride_w * _cdiv(cols, p.stride_w)

        def extent(tile: int, pad: int, dil: int, stride: int, size: int) -> int:
            fall = stride // math.gcd(dil, stride) * dil // stride  # q from one tap to the next
            reach = max(taps(a, pad, dil, stride, size) for a in range(stride))
            return tile + max(reach - 1, 0) * fall

        return (extent(th, p.pad_h, p.dil_h, p.stride_h, p.R),
                extent(tw, p.pad_w, p.dil_w, p.stride_w, p.S))

    def stage_u16(self, instance: Instance, p: ConvProblem) -> int:
        rows, slots = self.staged(instance, p)
        return rows * slots * (self.slab(instance) // 8 + 1) * 8

    @staticmethod
    def slab(instance: Instance) -> int:
        return instance.settings["sg"] * instance.settings["width"]

    def shared_bytes(self, instance: Instance, p: ConvProblem) -> int:
        c = instance.settings
        weights = c["sg"] * p.R * p.S * c["width"] * (c["width"] + 8)
        out = c["tile_h"] * c["tile_w"] * (self.slab(instance) + 8)
        return 2 * (weights + c["stages"] * self.stage_u16(instance, p) + out)

    def blocks_per_sm(self, instance: Instance, p: ConvProblem) -> int:
        """Shared memory, threads, and registers estimated from the accumulators (ptxas: the
        accumulators and about 48 more)."""
        c = instance.settings
        frags, wn, _ = warp_tile(c)
        regs = frags * wn // 2 + wn // 4 + 48
        t = threads(c)
        return max(1, min(SM_SHARED // (self.shared_bytes(instance, p) + 1024), 2048 // t,
                          SM_REGISTERS // (t * regs)))

    @staticmethod
    def tiles(instance: Instance, p: ConvProblem) -> int:
        """Output tiles of a grid z slice: of y, of dy in backward-weight, of the largest
        stride residue class of dx in backward-data."""
        c = instance.settings
        out_h, out_w = ((_cdiv(p.H, p.stride_h), _cdiv(p.W, p.stride_w))
                        if p.op == "conv2d_bwd_data" else (p.P, p.Q))
        return p.N * _cdiv(out_h, c["tile_h"]) * _cdiv(out_w, c["tile_w"])

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """Persistent blocks, every one the same number of tiles: the resident blocks over the
        slabs and residue classes, then as few as give each that many tiles."""
        tiles = self.tiles(instance, p)
        slabs = _cdiv(p.C, self.slab(instance))
        z = 1 if p.op == "conv2d_fwd" else p.stride_h * p.stride_w
        resident = SM_COUNT * self.blocks_per_sm(instance, p)
        per_block = _cdiv(tiles * slabs * z, resident)
        return _cdiv(tiles, per_block), slabs, z

    # Applicability --------------------------------------------------------------------------
    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        other = self.other_problem(instance, p)
        if other:
            return other
        cg, kg, width = p.c_per_group, p.k_per_group, c["width"]
        if cg != kg:
            return f"C/G={cg} and K/G={kg} differ: super-groups need square group filters"
        if cg > width or width % cg:
            return f"C/G={cg} does not divide width={width} (groups a super-group)"
        if p.C % 8:
            return f"C={p.C} is not a multiple of 8 (16-byte copies of whole pixels)"
        smem = self.shared_bytes(instance, p)
        if smem > SMEM_OPT_IN:
            return (f"filter and tiles need {smem // 1024} KiB of shared memory, above "
                    f"{SMEM_OPT_IN // 1024} KiB")
        return None

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        names = ("x", "w", "y") if problem.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(problem.op, self.grid(instance, problem), (threads(instance.settings), 1, 1),
                       (*names, conv_params(problem), self.stage_u16(instance, problem)),
                       self.shared_bytes(instance, problem))]


FAMILY = register(GroupedMmaConv())


# Backward-weight (conv/grouped_mma_bwd_weight.cu): (width, taps a block) with a warp's
# 16 x width sums of every tap in registers (width / 2 x taps floats a thread: 72, 48, 32).
WEIGHT_WIDTHS = ((16, 9), (16, 3), (32, 3), (64, 1))
WEIGHT_SGS = (2, 4)
WEIGHT_TILES = ((8, 8), (16, 8), (8, 16), (4, 32))
SPLIT_TILES = (2, 8)  # the fewest tiles a split sums (fewer splits: a smaller workspace)
WORKSPACE_CAP = 32 << 20
REDUCE_BLOCK, REDUCE_COLUMNS = 256, 32  # grouped_mma_reduce: 32 entries of dw a block
RESIDENT_CAP = 4  # blocks a multiprocessor the splits aim to fill (more: more workspace)


def weight_threads(config: dict[str, Any]) -> int:
    return 32 * config["sg"] * config["width"] // 16


def generate_weight_configs() -> list[dict[str, Any]]:
    return [{"tile_h": th, "tile_w": tw, "width": width, "sg": sg, "taps": taps,
             "split_tiles": split, "stages": 2}
            for th, tw in WEIGHT_TILES for width, taps in WEIGHT_WIDTHS for sg in WEIGHT_SGS
            for split in SPLIT_TILES]


class GroupedMmaBwdWeight(GroupedMmaConv):
    """conv_grouped_mma's backward-weight: dw's super-group blocks summed over the output tiles,
    per split into an fp32 workspace laid out as dw, then a launch that adds the splits."""

    name = "conv_grouped_mma_bwd_weight"
    operators = ("conv2d_bwd_weight",)
    source_file = "conv/grouped_mma_bwd_weight.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_weight_configs() if operator in self.operators else []

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {k: v for k, v in KernelFamily.defines(self, instance).items()
                if k != "SPLIT_TILES"}

    def stage_u16(self, instance: Instance, p: ConvProblem) -> int:
        rows, slots = self.staged(instance, dataclasses.replace(p, op="conv2d_fwd"))
        return rows * slots * (self.slab(instance) // 8 + 1) * 8

    def shared_bytes(self, instance: Instance, p: ConvProblem) -> int:
        c = instance.settings
        dy = c["tile_h"] * c["tile_w"] * (self.slab(instance) // 8 + 1) * 8
        return 2 * c["stages"] * (self.stage_u16(instance, p) + dy)

    def blocks_per_sm(self, instance: Instance, p: ConvProblem) -> int:
        c = instance.settings
        regs = c["width"] // 2 * c["taps"] + 40
        t = weight_threads(c)
        return max(1, min(SM_SHARED // (self.shared_bytes(instance, p) + 1024), 2048 // t,
                          SM_REGISTERS // (t * regs)))

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(splits, tiles a split): the resident blocks over the slabs and tap slices, each
        split at least split_tiles tiles, the workspace at most WORKSPACE_CAP."""
        c = instance.settings
        tiles = self.tiles(instance, p)
        others = _cdiv(p.C, self.slab(instance)) * _cdiv(p.R * p.S, c["taps"])
        want = _cdiv(SM_COUNT * min(RESIDENT_CAP, self.blocks_per_sm(instance, p)), others)
        cap = max(1, WORKSPACE_CAP // (4 * p.tensor_elements()["weight"]))
        splits = max(1, min(want, _cdiv(tiles, c["split_tiles"]), cap))
        per = _cdiv(tiles, splits)
        return _cdiv(tiles, per), per

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        return 4 * self.splits(instance, problem)[0] * problem.tensor_elements()["weight"]

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        splits, per = self.splits(instance, p)
        grid = (splits, _cdiv(p.C, self.slab(instance)), _cdiv(p.R * p.S, c["taps"]))
        total = p.tensor_elements()["weight"]
        blocks = min(_cdiv(total, REDUCE_COLUMNS), SM_COUNT * 16)
        return [Launch("conv2d_bwd_weight", grid, (weight_threads(c), 1, 1),
                       ("x", "dy", "workspace", conv_params(p), self.stage_u16(instance, p), per),
                       self.shared_bytes(instance, p)),
                Launch("grouped_mma_reduce", (blocks, 1, 1), (REDUCE_BLOCK, 1, 1),
                       ("workspace", "dw", total, splits))]


WEIGHT_FAMILY = register(GroupedMmaBwdWeight())
