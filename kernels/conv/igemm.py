"""conv_igemm: implicit-GEMM grouped convolution on the matrix units (mma.sync on NVIDIA, MFMA
on AMD), bf16 and fp16 with fp32 accumulation, every direction. See conv/igemm.cu for the
GEMM view of each direction.

Configuration: a block tile block_m x block_n x block_k computed by warps_m x warps_n warps of
32 threads, `stages` shared-memory stages (static shared memory, at most 48 KB), `vec`-element
global loads (16 bytes at vec=8) and, for backward-weight, `split_k` slices of the reduction.
"""

from __future__ import annotations

from typing import Any

from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from kernels.conv.params import conv_params
from kernels.family import Instance, KernelFamily, Launch, grid_stride_blocks
from kernels.registry import register

OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1, "conv2d_bwd_weight": 2}
SHARED_LIMIT = 48 * 1024  # static shared memory; more needs cuFuncSetAttribute
MAX_STAGES = 4
GRID_Z_LIMIT = 65535
ELEMENT_BYTES = 2

# (block_m, block_n, block_k, warps_m, warps_n). Warp tiles are multiples of 16 (mma.sync) and
# the 64-lane AMD wave tiles multiples of 32 (MFMA 32x32x8).
_DATA_TILES = [
    (256, 128, 32, 4, 2), (128, 256, 32, 2, 4), (128, 128, 32, 2, 4), (128, 128, 32, 2, 2),
    (256, 64, 32, 4, 1), (128, 64, 32, 2, 2), (128, 64, 64, 2, 2), (64, 128, 32, 2, 2),
    (64, 64, 32, 2, 2), (64, 64, 64, 2, 2), (128, 32, 32, 4, 1), (64, 32, 32, 2, 2),
    (64, 256, 32, 2, 4), (256, 32, 32, 4, 1),
]
# Backward-weight: M = K/G (often small), N = C/G*R*S, a long reduction split over the grid.
_WEIGHT_TILES = [
    (256, 128, 32, 4, 2), (128, 128, 32, 2, 4), (128, 64, 32, 2, 2), (64, 128, 32, 2, 2),
    (64, 64, 32, 2, 2), (64, 64, 64, 2, 2), (32, 128, 32, 1, 4), (32, 64, 32, 1, 4),
]
TILES = {"conv2d_fwd": _DATA_TILES, "conv2d_bwd_data": _DATA_TILES,
         "conv2d_bwd_weight": _WEIGHT_TILES}
# Narrower loads (channels per group not a multiple of 8) on the tiles that suit small channels.
NARROW = {4: {(128, 128, 32, 2, 4), (128, 64, 32, 2, 2), (64, 128, 32, 2, 2), (64, 64, 32, 2, 2),
              (128, 32, 32, 4, 1), (64, 32, 32, 2, 2), (32, 64, 32, 1, 4), (32, 128, 32, 1, 4)},
          2: {(128, 64, 32, 2, 2), (64, 64, 32, 2, 2), (128, 32, 32, 4, 1), (64, 32, 32, 2, 2),
              (32, 64, 32, 1, 4)},
          1: {(64, 64, 32, 2, 2), (64, 32, 32, 2, 2), (32, 64, 32, 1, 4)}}
SPLITS = (1, 4, 16, 64, 256)
NARROW_SPLITS = (1, 16, 128)
# The smallest block_m and block_n of each direction's tiles
SMALLEST = {op: (min(t[0] for t in tiles), min(t[1] for t in tiles))
            for op, tiles in TILES.items()}
# The channel counts each direction loads `vec` elements at a time
VECTOR_CHANNELS = {"conv2d_fwd": ("Cg",), "conv2d_bwd_data": ("Kg", "Cg"),
                   "conv2d_bwd_weight": ("Kg", "Cg")}


def shared_bytes(config: dict[str, Any]) -> int:
    c = config
    return c["stages"] * (c["block_m"] + c["block_n"]) * c["block_k"] * ELEMENT_BYTES


def _tile_fits(op: str, bm: int, bn: int, bk: int, wm: int, wn: int, vec: int) -> bool:
    """Every thread moves whole passes of vectors, and warp/wave tiles fit the instructions."""
    threads = 32 * wm * wn
    if bm % wm or bn % wn or (bm // wm) % 16 or (bn // wn) % 16:
        return False
    awm, awn = (wm, wn // 2) if wn % 2 == 0 else (wm // 2, wn)  # AMD: 64-lane waves
    if awm * awn * 64 != threads or (bm // awm) % 32 or (bn // awn) % 32:
        return False
    a_k_major, b_k_major = op != "conv2d_bwd_weight", op == "conv2d_fwd"
    for rows, cols in ((bm, bk) if a_k_major else (bk, bm), (bn, bk) if b_k_major else (bk, bn)):
        per_row = cols // vec
        if threads % per_row or rows % (threads // per_row):
            return False
    return True


def _stage_options(bm: int, bn: int, bk: int) -> list[int]:
    """The deepest pipeline that fits, then one stage less (less shared memory a block, so
    more blocks a multiprocessor) where that still leaves two."""
    deepest = min(MAX_STAGES, SHARED_LIMIT // ((bm + bn) * bk * ELEMENT_BYTES))
    return [s for s in (deepest, deepest - 1) if s >= 2]


def generate_configs(op: str) -> list[dict[str, Any]]:
    out = []
    for tile in TILES[op]:
        bm, bn, bk, wm, wn = tile
        for vec in (8, 4, 2, 1):
            if vec != 8 and tile not in NARROW[vec]:
                continue
            if not _tile_fits(op, bm, bn, bk, wm, wn, vec):
                continue
            stages = _stage_options(bm, bn, bk)
            if vec != 8:
                stages = stages[:1]
            for st in stages:
                config = {"block_m": bm, "block_n": bn, "block_k": bk, "warps_m": wm,
                          "warps_n": wn, "stages": st, "vec": vec}
                if op != "conv2d_bwd_weight":
                    out.append(config)
                    continue
                splits = (SPLITS if vec == 8 and st == stages[0] else
                          NARROW_SPLITS if st == stages[0] else (16,))
                out += [{**config, "split_k": s} for s in splits]
    return out


def split_slices(k_tiles: int, requested: int, groups: int) -> tuple[int, int]:
    """(slices, k-tiles a slice) of a reduction of `k_tiles` asked in `requested` slices, at
    most the k-tiles and the grid z's limit over the groups; every slice non-empty."""
    wanted = max(1, min(requested, k_tiles, GRID_Z_LIMIT // groups))
    per = _cdiv(k_tiles, wanted)
    return _cdiv(k_tiles, per), per


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def block_tiles(rows: int, columns: int, block_m: int, block_n: int) -> int:
    """The block_m x block_n tiles over a GEMM slice of `rows` x `columns`."""
    return _cdiv(rows, block_m) * _cdiv(columns, block_n)


class IGemmConv(KernelFamily):
    name = "conv_igemm"
    short = "igemm"
    operators = CONV_OPERATORS
    source_file = "conv/igemm.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs(operator)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        """The base macros plus the direction; split_k is a launch parameter only, left out so
        that instances differing only in it share one code object."""
        values = {k: v for k, v in super().defines(instance).items() if k != "SPLIT_K"}
        return {**values, "IGEMM_OP": OP_CODES[instance.operator]}

    # Geometry ----------------------------------------------------------------------------
    @staticmethod
    def gemm_rows(p: ConvProblem) -> int:
        """Rows of the largest grid-z slice: bwd_data runs one slice per stride residue."""
        if p.op == "conv2d_bwd_data":
            return p.N * _cdiv(p.H, p.stride_h) * _cdiv(p.W, p.stride_w)
        return p.gemm[0]

    def grid_z(self, instance: Instance, p: ConvProblem) -> int:
        if p.op == "conv2d_bwd_data":
            return p.G * p.stride_h * p.stride_w
        if p.op == "conv2d_bwd_weight":
            return p.G * self.splits(instance, p)[0]
        return p.G

    def requested_splits(self, instance: Instance, p: ConvProblem) -> int:
        """The slices of backward-weight's reduction the configuration asks for."""
        return instance.settings.get("split_k", 1)

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(slices, k-tiles per slice) of backward-weight's reduction; every slice non-empty."""
        return split_slices(_cdiv(p.gemm[2], instance.settings["block_k"]),
                            self.requested_splits(instance, p), p.G)

    def tiles(self, instance: Instance, p: ConvProblem) -> int:
        """Block tiles of the largest grid-z slice (grid x)."""
        c = instance.settings
        return block_tiles(self.gemm_rows(p), p.gemm[1], c["block_m"], c["block_n"])

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        return self.tiles(instance, p), 1, self.grid_z(instance, p)

    # Rules -------------------------------------------------------------------------------
    def operand_refusal(self, instance: Instance, p: ConvProblem) -> str | None:
        """Why the instance's loads cannot serve the problem's channel counts, or None."""
        vec = instance.settings["vec"]
        for name in VECTOR_CHANNELS[p.op]:
            value = p.c_per_group if name == "Cg" else p.k_per_group
            if value % vec:
                return (f"{name}={value} is not a multiple of vec={vec} "
                        f"({vec * ELEMENT_BYTES}-byte loads along the channels)")
        return None

    def smallest_tiles(self, op: str) -> tuple[int, int]:
        """The smallest block_m and block_n of the direction's tiles."""
        return SMALLEST[op]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        if p.op != instance.operator:
            return f"instance is for {instance.operator}, problem is {p.op}"
        if p.dtype not in ("bf16", "fp16"):
            return f"{self.name} runs on the matrix units in bf16/fp16 only, not {p.dtype}"
        reason = self.operand_refusal(instance, p)
        if reason:
            return reason
        grid_z = self.grid_z(instance, p)
        if grid_z > GRID_Z_LIMIT:
            return f"grid z = {grid_z} over the {GRID_Z_LIMIT} limit"
        if self.tiles(instance, p) > 2**31 - 1:
            return "too many tiles for grid x"
        m, n, _ = p.gemm
        small_m, small_n = self.smallest_tiles(p.op)
        for dim, size, tile, smallest in (("M", m, c["block_m"], small_m),
                                          ("N", n, c["block_n"], small_n)):
            if tile > smallest and tile >= 4 * size:  # a smaller tile of the space covers it
                return (f"block_{dim.lower()}={tile} is 4x or more the GEMM {dim}={size}: "
                        f"mostly idle work, a smaller tile covers it")
        return None

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        if problem.op == "conv2d_bwd_weight" and self.splits(instance, problem)[0] > 1:
            return 4 * problem.tensor_elements()["weight"]
        return 0

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        block = (32 * c["warps_m"] * c["warps_n"], 1, 1)
        grid, params = self.grid(instance, p), conv_params(p)
        if p.op == "conv2d_fwd":
            return [Launch("conv2d_fwd", grid, block, ("x", "w", "y", params))]
        if p.op == "conv2d_bwd_data":
            return [Launch("conv2d_bwd_data", grid, block, ("dy", "w", "dx", params))]
        splits, per = self.splits(instance, p)
        if splits == 1:
            return [Launch("conv2d_bwd_weight", grid, block, ("x", "dy", "dw", params))]
        n = p.tensor_elements()["weight"]
        small = (grid_stride_blocks(n, 256), 1, 1)
        return [Launch("igemm_zero", small, (256, 1, 1), ("workspace", n)),
                Launch("igemm_bwd_weight_split", grid, block,
                       ("x", "dy", "workspace", params, per)),
                Launch("igemm_reduce", small, (256, 1, 1), ("workspace", "dw", n))]

FAMILY = register(IGemmConv())
