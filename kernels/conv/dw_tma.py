"""conv_dw_tma: depthwise convolution (C/G == K/G == 1) forward and unit-stride backward-data on
Hopper's tensor memory accelerator (conv/dw_tma.cu, sm_90a only): persistent blocks take
(block of `ch` channels, output tile) items, each item's haloed input tile arriving in shared
memory by one bulk tensor copy (zeros outside the input: the padding) `stages` - 1 items ahead;
a thread owns `vec` channels of one output column (or of `cols` adjacent ones, sharing their
input reads) in one of `rows` bands of the tile's rows and walks the band's input rows once,
writing each output row as soon as its last input row is in.
Compiled per filter size (`fr`, R == S: 3, 5 or 7, with `vec` 8, 4 or 2 so that the taps fit in
registers; 3x3 at stride 2 with 4 too) and stride (both directions; backward-data stride 1 only);
`ch` 16 or 32 for narrow layers, where 64 would leave most of a block idle. bf16 and fp16, C a
multiple of 8 (the tensor map's row pitch). `occ` blocks share a multiprocessor: the launch bounds
hold the registers to 255, 168 or 128 a thread so that they fit, and the persistent grid launches
no more than are resident."""

from __future__ import annotations

import itertools
from typing import Any

from kernels.conv.igemm import _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch, TensorMap
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1}
CHANNEL_BLOCKS = (64, 32, 16)
VECTORS = {3: 8, 5: 4, 7: 2}  # channels a thread, by filter size: FR * FR * vec taps in registers
# 3x3 filters at stride 2 also with 4 channels a thread: half the taps' registers, twice the
# threads a pixel (a stride-2 output reads twice the input columns of a stride-1 one)
NARROW_STRIDE2 = (3, 4, 2)
BLOCK_THREADS = (256, 128, 64)
STRIDES = {"conv2d_fwd": (1, 2), "conv2d_bwd_data": (1,)}
SMEM_OPT_IN = 227 * 1024
SM_SHARED = 228 * 1024
SM_REGISTERS = 65536
REGISTER_CAPS = (255, 168, 128)  # a thread's registers under the launch bounds (occ)
BANDS = (1, 2, 4)  # bands of a tile's rows, a thread in one
COLUMN_BLOCKS = (2, 4)  # adjacent output columns a thread (64-channel blocks), beside 1
MAX_BANDED_THREADS = 512


def threads(config: dict[str, Any]) -> int:
    """A block's threads: vec channels of `cols` columns each, in every band of rows."""
    return (config["ch"] // config["vec"] * config["tile_w"] // config.get("cols", 1)
            * config.get("rows", 1))


def box(config: dict[str, Any]) -> tuple[int, int]:
    """(rows, columns) of the input under an output tile, with its halo."""
    c, f, s = config, config["fr"], config["stride"]
    return (c["tile_h"] - 1) * s + f, (c["tile_w"] - 1) * s + f


def shared_bytes(config: dict[str, Any]) -> int:
    rows, cols = box(config)
    stage = _cdiv(rows * cols * 2 * config["ch"], 1024) * 1024
    return 1024 + config["stages"] * stage + 64


def tiles(ch: int, vec: int) -> list[tuple[int, int]]:
    """(tile_h, tile_w) of blocks of 256, 128 and 64 threads: 4 or 8 rows where a tile is 32
    columns or more, else 8 or 16."""
    out = []
    for block in BLOCK_THREADS:
        tw = block // (ch // vec)
        if 4 <= tw <= 64:
            out += [(th, tw) for th in ((4, 8) if tw >= 32 else (8, 16))]
    return out


def generate_configs(op: str) -> list[dict[str, Any]]:
    """Every channel block, tile, filter and stride (and NARROW_STRIDE2) with 2, 3 and 4 stages, and
    the blocks a multiprocessor (occ) that hold the registers to 255, 168 and 128 a thread
    (128: tiles of at most 8 rows in one band, bands of 2 rows; the others spill), where that
    many blocks' shared memory fits. A tile's rows in one band a thread, or (2 stages) in 2 or
    4 bands of at least 2 rows, at most MAX_BANDED_THREADS a block: for small maps, whose few
    items leave each thread a long chain. Then the same with 2 or 4 output columns a thread
    (`cols`, COLUMN_BLOCKS) where the block has 64 channels (one pixel's row of the box a
    quarter-warp's reads: columns apart cost no bank conflicts), each band whole warps, at most
    8 rows x columns a thread (255 registers, or 168 for 3x3 filters)."""
    out = []
    cases = [(fr, vec, stride) for fr, vec in VECTORS.items() for stride in STRIDES[op]]
    if NARROW_STRIDE2[2] in STRIDES[op]:
        cases.append(NARROW_STRIDE2)
    for fr, vec, stride in cases:
        for ch in CHANNEL_BLOCKS:
            for (th, tw), rows, cols in itertools.product(tiles(ch, vec), BANDS,
                                                          (1, *COLUMN_BLOCKS)):
                base = {"ch": ch, "vec": vec, "tile_h": th, "tile_w": tw, "fr": fr,
                        "stride": stride}
                band = threads({**base, "cols": cols})  # a band's threads
                if rows > 1 and (th % rows or th // rows < 2
                                 or band * rows > MAX_BANDED_THREADS):
                    continue
                if cols > 1 and (ch != 64 or tw % cols or band % 32
                                 or th // rows * cols > 8):
                    continue
                if cols > 1:  # (NVRTC: 5x5 and 7x7 taps spill at 168)
                    caps = REGISTER_CAPS[:2] if fr == 3 else REGISTER_CAPS[:1]
                else:
                    caps = REGISTER_CAPS if th // rows <= (8 if rows == 1 else 2) \
                        else REGISTER_CAPS[:2]
                occs = sorted({SM_REGISTERS // (band * rows * cap) for cap in caps})
                columns = {"cols": cols} if cols > 1 else {}  # last: the names before it
                for stages, occ in itertools.product((2, 3, 4) if rows == 1 else (2,), occs):
                    config = {**base, "stages": stages, "occ": occ, "rows": rows, **columns}
                    if occ and occ * (shared_bytes(config) + 1024) <= SM_SHARED:
                        out.append(config)
    return out


def channels_last_map(name: str, p: ConvProblem, h: int, w: int, rows_cols: tuple[int, int],
                      config: dict[str, Any]) -> TensorMap:
    """The tensor map of an N x h x w x C tensor, boxed as `rows_cols` pixels of `ch` channels
    (128-byte swizzled where a box row is 128 bytes)."""
    rows, cols = rows_cols
    return TensorMap(name, (p.C, w, h, p.N), (2 * p.C, 2 * p.C * w, 2 * p.C * w * h),
                     (config["ch"], cols, rows, 1), swizzle=128 if config["ch"] == 64 else 0)


def register_cap(config: dict[str, Any]) -> int:
    """A thread's registers under the launch bounds of occ blocks a multiprocessor."""
    return min(255, SM_REGISTERS // (threads(config) * config["occ"]))


def blocks_per_sm(config: dict[str, Any]) -> int:
    """occ: the launch bounds fit its registers, the configurations its shared memory."""
    return config["occ"]


class DepthwiseTmaConv(KernelFamily):
    name = "conv_dw_tma"
    short = "dw_tma"
    operators = OPERATORS
    source_file = "conv/dw_tma.cu"
    targets = ("sm_90a",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs(operator) if operator in OPERATORS else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "DW_OP": OP_CODES[instance.operator]}

    def compiled_case(self, problem: ConvProblem) -> dict[str, Any]:
        return {"fr": problem.R, "stride": problem.stride_h}

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        other = self.other_problem(instance, p)
        if other:
            return other
        if p.c_per_group != 1 or p.k_per_group != 1:
            return f"depthwise only (C/G == K/G == 1), problem has C/G={p.c_per_group} " \
                   f"K/G={p.k_per_group}"
        if p.C % 8:
            return f"C={p.C} is not a multiple of 8 (the tensor map's 16-byte row pitch)"
        if (p.R, p.S) != (c["fr"], c["fr"]):
            return f"compiled for {c['fr']}x{c['fr']} filters, problem has {p.R}x{p.S}"
        if (p.stride_h, p.stride_w) != (c["stride"], c["stride"]):
            return (f"compiled for stride {c['stride']}, problem has "
                    f"{p.stride_h}x{p.stride_w}")
        if (p.dil_h, p.dil_w) != (1, 1):
            return f"dilation {p.dil_h}x{p.dil_w}: this family reads undilated windows"
        if p.op == "conv2d_bwd_data" and max(p.pad_h, p.pad_w) > p.R - 1:
            return f"padding {p.pad_h}x{p.pad_w} beyond R-1={p.R - 1} (backward-data)"
        return None

    @staticmethod
    def items(instance: Instance, p: ConvProblem) -> int:
        """(tile, channel block) items over the map a direction's tiles cover: dx in
        backward-data, y in forward and dy in backward-weight."""
        c = instance.settings
        out_h, out_w = (p.H, p.W) if p.op == "conv2d_bwd_data" else (p.P, p.Q)
        return (p.N * _cdiv(out_h, c["tile_h"]) * _cdiv(out_w, c["tile_w"])
                * _cdiv(p.C, c["ch"]))

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """The resident blocks, at most one an item; where there are more items than that,
        rounded down to a multiple of the channel blocks if that keeps 7/8 of them. Block b
        takes items b, b + grid, ... whose channel block is then always b's: its taps stay in
        registers, where a grid of another size has them read again every item."""
        resident = SM_COUNT * blocks_per_sm(instance.settings)
        items, blocks = self.items(instance, p), _cdiv(p.C, instance.settings["ch"])
        whole = resident // blocks * blocks
        if items > resident and 8 * whole >= 7 * resident:
            return whole, 1, 1
        return min(items, resident), 1, 1

    @staticmethod
    def tensor_map(instance: Instance, p: ConvProblem) -> TensorMap:
        """The correlation's input (x, or dy in backward-data), boxed as one item's tile."""
        name, h, w = ("x", p.H, p.W) if p.op == "conv2d_fwd" else ("dy", p.P, p.Q)
        return channels_last_map(name, p, h, w, box(instance.settings), instance.settings)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        names = ("x", "w", "y") if problem.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(problem.op, self.grid(instance, problem),
                       (threads(instance.settings), 1, 1),
                       (*names, conv_params(problem), self.tensor_map(instance, problem)),
                       shared_bytes(instance.settings))]


FAMILY = register(DepthwiseTmaConv())


# Backward-weight (conv/dw_tma_bwd_weight.cu): the same tiles of dy with the input under them;
# the splits' sums meet either in slices of a workspace laid out as dw, added by a second
# launch (cluster 1), or in the distributed shared memory of a thread-block cluster whose
# blocks are the splits (cluster 4, 8 or 16: one launch, no workspace; 16 is a non-portable
# cluster size, which farm/gpu/cuda.py allows for the kernels compiled with it).
REDUCE_BLOCK = 256  # dw_tma_reduce: 8 warps over the slices of 32 consecutive entries
REDUCE_ENTRIES = 32
WEIGHT_ROWS = (1, 2, 4)  # bands of a tile's rows, one a thread: more threads a block
WEIGHT_CLUSTERS = (1, 4, 8, 16)
MAX_WEIGHT_THREADS = 512


def weight_shared_bytes(config: dict[str, Any]) -> int:
    """The stages (input box and dy box, each on a 1024-byte boundary) or, after them, the
    block's thread sums (FR * FR * vec rows of threads + 1 floats) and its channels' sums,
    whichever is larger."""
    rows, cols = box(config)
    ch, stage, taps = config["ch"], 0, config["fr"] ** 2
    for pixels in (rows * cols, config["tile_h"] * config["tile_w"]):
        stage += _cdiv(pixels * 2 * ch, 1024) * 1024
    sums = (taps * config["vec"] * (threads(config) + 1) + ch * taps) * 4
    return 1024 + max(config["stages"] * stage, sums) + 64


def generate_weight_configs() -> list[dict[str, Any]]:
    """conv_dw_tma's forward tiles of at most 8 rows, each in bands of rows (at most 512
    threads), and the splits' sums met in a workspace (1 or 2 bands, 2 or 3 stages) or in a
    cluster of 4 or 8 blocks (1, 2 or 4 bands, 2 stages). A thread holds its band's dy rows
    and FR x FR x vec sums in registers: at most 255 (occ the blocks that fit), or 128 for 3x3
    bands of at most 2 rows of 16 or 32 channels (NVRTC: no spills; 64 channels' swizzled
    addresses spill there, as do 7x7 stride-2 bands of 8 rows at 255); that many blocks'
    shared memory must fit."""
    out, tiles_seen = [], set()
    for c in generate_configs("conv2d_fwd"):
        if c.pop("rows") > 1 or c["tile_h"] > 8 or "cols" in c or c["vec"] != VECTORS[c["fr"]]:
            continue
        tile = tuple((k, v) for k, v in c.items() if k not in ("occ", "stages"))
        if tile in tiles_seen:
            continue
        tiles_seen.add(tile)
        for rows, cluster in itertools.product(WEIGHT_ROWS, WEIGHT_CLUSTERS):
            base = {**c, "rows": rows, "cluster": cluster}
            band = c["tile_h"] // rows
            if (c["tile_h"] % rows or threads(base) > MAX_WEIGHT_THREADS
                    or (cluster == 1 and rows == 4)
                    or (c["fr"] == 7 and c["stride"] == 2 and band > 4)):
                continue
            cap = 128 if c["fr"] == 3 and band <= 2 and c["ch"] <= 32 else 255
            occ = SM_REGISTERS // (threads(base) * cap)
            for stages in (2, 3) if cluster == 1 else (2,):
                config = {**base, "stages": stages, "occ": occ}
                if occ and occ * (weight_shared_bytes(config) + 1024) <= SM_SHARED:
                    out.append(config)
    return out


class DepthwiseTmaBwdWeight(DepthwiseTmaConv):
    """conv_dw_tma's backward-weight: the splits of the output tiles, one block per split and
    channel block; the splits' FR x FR sums meet in a workspace or in a cluster's shared
    memory."""

    name = "conv_dw_tma_bwd_weight"
    operators = ("conv2d_bwd_weight",)
    source_file = "conv/dw_tma_bwd_weight.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_weight_configs() if operator in self.operators else []

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return KernelFamily.defines(self, instance)

    def splits(self, instance: Instance, p: ConvProblem) -> int:
        """A cluster's blocks; without a cluster, the resident blocks over the channel blocks,
        at most one a dy tile."""
        c = instance.settings
        if c["cluster"] > 1:
            return c["cluster"]
        spatial = self.items(instance, p) // _cdiv(p.C, c["ch"])
        return max(1, min(spatial, SM_COUNT * c["occ"] // _cdiv(p.C, c["ch"])))

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        if instance.settings["cluster"] > 1:
            return 0
        return 4 * self.splits(instance, problem) * problem.tensor_elements()["weight"]

    # the workspace's reduction: its entry point and the entries a block adds at a time
    reduce_entry, reduce_entries = "dw_tma_reduce", REDUCE_ENTRIES

    @staticmethod
    def block_threads(config: dict[str, Any]) -> int:
        return threads(config)

    @staticmethod
    def block_shared_bytes(config: dict[str, Any]) -> int:
        return weight_shared_bytes(config)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        x = channels_last_map("x", p, p.H, p.W, box(c), c)
        dy = channels_last_map("dy", p, p.P, p.Q, (c["tile_h"], c["tile_w"]), c)
        splits, n = self.splits(instance, p), p.tensor_elements()["weight"]
        clustered = c["cluster"] > 1
        main = Launch("conv2d_bwd_weight", (splits, _cdiv(p.C, c["ch"]), 1),
                      (self.block_threads(c), 1, 1),
                      ("x", "dy", "dw" if clustered else "workspace", conv_params(p), splits,
                       x, dy), self.block_shared_bytes(c))
        if clustered:
            return [main]
        blocks = min(_cdiv(n, self.reduce_entries), SM_COUNT * 4)
        return [main, Launch(self.reduce_entry, (blocks, 1, 1), (REDUCE_BLOCK, 1, 1),
                             ("workspace", "dw", n, splits))]


WEIGHT_FAMILY = register(DepthwiseTmaBwdWeight())
