"""conv_direct: direct convolution for depthwise and small-group shapes (C/G and K/G up to 16),
every direction, channels-last, fp32 accumulation. Memory-bound by design: each thread owns a
vector of channels and a strip of output columns, filter taps sit in shared memory as fp32.

Instances come in two kinds. Depthwise (grouped=0, C/G == K/G == 1): a thread owns `vec`
consecutive channels, which are consecutive groups in NHWGC, loaded as one vector. Grouped
(grouped=1): a thread owns `kpt` output channels of one group and sums over the group's
reduction channels `vec` at a time. `tile_w` output columns per thread; `fr` unrolls a square
filter (0: any R x S); `smem` stages the input tile of that many output rows in shared memory;
`occ` is the occupancy the registers are held to, and grids are one persistent wave of it.
Backward-weight reduces over N*P*Q in two launches: per-split partial sums into an fp32
workspace (`rb` filter rows per block, `waves` sets the split count), then a sum over the splits
that writes dw. kernels/conv/direct.cu documents the entries and macros.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from farm.problems import DTYPE_BYTES
from kernels.conv.problem import ConvProblem
from kernels.conv.operator import OPERATORS
from kernels.conv.params import conv_params
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch
from kernels.registry import register

DIRECTIONS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")
OP_CODES = {op: i for i, op in enumerate(DIRECTIONS)}
MAX_GROUP_WIDTH = 16        # C/G and K/G this family serves
SHARED_LIMIT = 48 * 1024    # dynamic shared memory per block (no opt-in; fits AMD's 64 KiB too)
WORKSPACE_CAP = 8 << 20     # backward-weight partial sums, bytes
REDUCE_BLOCK = 256          # the reduce kernel: 16 dw entries x 16 split stripes per block
REDUCE_COLUMNS = 16


def _configs(direction: str) -> list[dict]:
    """The family's rules, spelled out: which (vec, tile_w) fit each filter specialisation."""
    out: list[dict] = []

    def add(grouped, vec, kpt, tile_w, fr, block=256, smem=0, rb=0, waves=1, occ=1):
        cfg = {"block": block, "grouped": grouped, "vec": vec, "kpt": kpt, "tile_w": tile_w,
               "fr": fr}
        if direction == "conv2d_bwd_weight":
            cfg.update(rb=rb, waves=waves)
        else:
            cfg["smem"] = smem
        cfg["occ"] = occ
        out.append(cfg)

    if direction != "conv2d_bwd_weight":
        # depthwise, inputs through L1; (vec, tile_w, occ): 16-32 outputs a thread, two
        # 256-thread blocks a multiprocessor where the registers allow (measured on an H100)
        for fr, rows in ((0, [(8, 1, 4), (8, 2, 3), (4, 4, 3), (2, 4, 4), (1, 4, 4)]),
                         (3, [(8, 4, 2), (4, 8, 2), (4, 4, 2), (8, 2, 2), (4, 4, 3), (2, 8, 2),
                              (1, 8, 3)]),
                         (5, [(4, 4, 2), (8, 2, 2), (4, 8, 2), (2, 8, 2), (1, 8, 3)]),
                         (7, [(4, 8, 2), (4, 4, 2), (8, 2, 2), (8, 4, 2), (2, 8, 2), (1, 8, 3)])):
            for vec, tile_w, occ in rows:
                add(0, vec, 1, tile_w, fr, occ=occ)
        add(0, 8, 1, 4, 3, block=128, occ=4)
        add(0, 8, 1, 2, 0, block=128, occ=8)
        # depthwise, input tile staged in shared memory (rows per block tile = smem)
        add(0, 8, 1, 4, 7, smem=8, occ=1)
        add(0, 4, 1, 8, 7, smem=8, occ=1)
        add(0, 8, 1, 4, 5, smem=8, occ=1)
        add(0, 8, 1, 4, 3, smem=8, occ=1)
        # grouped: (vec, kpt) from the group widths 2..16
        for vec, kpt, tile_w, occ in ((8, 4, 4, 1), (4, 4, 4, 2), (8, 8, 4, 1), (8, 8, 2, 2),
                                      (8, 2, 4, 2), (2, 2, 4, 2), (1, 1, 4, 2)):
            add(1, vec, kpt, tile_w, 3, occ=occ)
        for vec, kpt, tile_w, occ in ((8, 8, 2, 3), (8, 4, 2, 3), (4, 4, 2, 3), (2, 2, 2, 4),
                                      (1, 1, 2, 4)):
            add(1, vec, kpt, tile_w, 0, occ=occ)
    else:
        # depthwise: (fr, vec, tile_w, rb, occ, waves)
        for fr, vec, tile_w, rb, occ, waves in (
                (3, 8, 2, 1, 2, 1), (3, 4, 4, 0, 2, 1), (3, 4, 4, 1, 2, 1), (3, 4, 2, 1, 3, 1),
                (3, 8, 4, 1, 2, 1), (3, 2, 8, 0, 1, 1), (3, 1, 8, 0, 2, 1), (3, 8, 2, 1, 2, 2),
                (5, 8, 2, 1, 2, 1), (5, 4, 4, 1, 2, 1), (5, 2, 4, 1, 2, 1), (5, 8, 2, 1, 2, 2),
                (7, 8, 2, 1, 2, 1), (7, 4, 4, 1, 2, 1), (7, 4, 2, 1, 3, 1), (7, 8, 2, 1, 2, 2),
                (0, 8, 2, 0, 3, 1), (0, 4, 4, 0, 3, 1), (0, 1, 4, 0, 4, 1)):
            add(0, vec, 1, tile_w, fr, rb=rb, waves=waves, occ=occ)
        # grouped: (fr, vec, kpt, tile_w, rb, occ)
        for fr, vec, kpt, tile_w, rb, occ in (
                (3, 8, 2, 2, 1, 2), (3, 8, 4, 2, 1, 1), (3, 8, 1, 4, 1, 2), (3, 4, 2, 4, 1, 2),
                (3, 2, 2, 4, 1, 2), (3, 1, 1, 4, 0, 2),
                (0, 8, 1, 4, 0, 3), (0, 4, 2, 4, 0, 3), (0, 1, 1, 4, 0, 4)):
            add(1, vec, kpt, tile_w, fr, rb=rb, occ=occ)
    return out


@dataclass(frozen=True)
class Plan:
    """How an instance runs a problem: channel units per block and the grid."""

    units: int          # channel units (what one thread's channel vector covers)
    cub: int            # channel units per block
    slices: int         # blocks along the channel units (grid.y)
    grid_x: int
    grid_z: int
    shared_bytes: int
    splits: int = 0     # backward-weight: partial sums in the workspace
    total: int = 0      # backward-weight: elements of dw


class DirectConv(KernelFamily):
    name = "conv_direct"
    short = "direct"
    operators = DIRECTIONS
    source_file = "conv/direct.cu"

    def configs(self, operator: str) -> list[dict]:
        if operator not in DIRECTIONS:
            raise ValueError(f"conv_direct has no operator {operator!r}")
        return _configs(operator)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        values = super().defines(instance)
        values["DIRECT_OP"] = OP_CODES[instance.operator]
        values.pop("WAVES", None)  # a launch-time choice; one code object serves every split
        return values

    # Applicability -----------------------------------------------------------------------------
    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        cfg, op = instance.settings, instance.operator
        other = self.other_problem(instance, problem)
        if other:
            return other
        cg, kg = problem.c_per_group, problem.k_per_group
        vec, kpt, fr = cfg["vec"], cfg["kpt"], cfg["fr"]
        if not cfg["grouped"]:
            if cg != 1 or kg != 1:
                return (f"depthwise instance needs C/G == K/G == 1, problem has C/G={cg} "
                        f"K/G={kg}")
            if problem.G % vec:
                return f"G={problem.G} is not a multiple of vec={vec} (channels per thread)"
        else:
            if cg == 1 and kg == 1:
                return "depthwise problem (C/G == K/G == 1): the grouped=0 instances serve it"
            if cg > MAX_GROUP_WIDTH or kg > MAX_GROUP_WIDTH:
                return (f"group width C/G={cg} K/G={kg} above {MAX_GROUP_WIDTH}: "
                        "a direct convolution is the wrong algorithm here")
            red, own = ((kg, cg) if op == "conv2d_bwd_data" else (cg, kg))
            red_name, own_name = (("K/G", "C/G") if op == "conv2d_bwd_data" else ("C/G", "K/G"))
            if red % vec:
                return f"{red_name}={red} is not a multiple of vec={vec} (reduction vector)"
            if own % kpt:
                return f"{own_name}={own} is not a multiple of kpt={kpt} (outputs per thread)"
        if fr and (problem.R != fr or problem.S != fr):
            return (f"instance is unrolled for a {fr}x{fr} filter, problem has "
                    f"{problem.R}x{problem.S}")
        strided = (problem.stride_h, problem.stride_w) != (1, 1)
        if cfg.get("smem") and op == "conv2d_bwd_data" and strided:
            return "shared-memory tiles serve backward-data with unit stride only"
        if op == "conv2d_bwd_weight":
            e = kpt * vec if cfg["grouped"] else vec
            if cfg["block"] * e * 4 > SHARED_LIMIT:
                return "block reduction buffer exceeds shared memory"
        if not self._fits(instance, problem):
            return ("filter taps (and input tile) of one channel unit do not fit in "
                    f"{SHARED_LIMIT // 1024} KiB of shared memory")
        return None

    # Geometry ----------------------------------------------------------------------------------
    @staticmethod
    def _units(instance: Instance, p: ConvProblem) -> int:
        cfg, op = instance.settings, instance.operator
        if op == "conv2d_bwd_weight":
            if cfg["grouped"]:
                return (p.K // cfg["kpt"]) * (p.c_per_group // cfg["vec"])
            return p.K // cfg["vec"]
        channels = p.K if op == "conv2d_fwd" else p.C
        return channels // (cfg["kpt"] if cfg["grouped"] else cfg["vec"])

    @staticmethod
    def _corr_shape(op: str, p: ConvProblem) -> dict:
        """The correlation a fwd / unit-stride bwd_data instance computes (see direct.cu)."""
        if op == "conv2d_fwd":
            return dict(Ho=p.P, Wo=p.Q, cig=p.c_per_group, sh=p.stride_h, sw=p.stride_w)
        return dict(Ho=p.H, Wo=p.W, cig=p.k_per_group, sh=1, sw=1)

    def _shared_bytes(self, instance: Instance, p: ConvProblem, cub: int) -> int:
        cfg, op = instance.settings, instance.operator
        if op == "conv2d_bwd_weight":
            e = cfg["kpt"] * cfg["vec"] if cfg["grouped"] else cfg["vec"]
            return cfg["block"] * e * 4
        unit = cfg["kpt"] if cfg["grouped"] else cfg["vec"]
        shape = self._corr_shape(op, p)
        taps = p.R * p.S * shape["cig"] * cub * unit * 4
        th = cfg["smem"]
        if not th:
            return taps
        twb = (cfg["block"] // cub) // th
        ih = (th - 1) * shape["sh"] + (p.R - 1) * p.dil_h + 1
        iw = (twb * cfg["tile_w"] - 1) * shape["sw"] + (p.S - 1) * p.dil_w + 1
        return (taps + 15) // 16 * 16 + ih * iw * cub * cfg["vec"] * DTYPE_BYTES[p.dtype]

    def _cub_range(self, instance: Instance, p: ConvProblem) -> int:
        """The most channel units a block can hold (cub runs from 1 to it)."""
        cfg = instance.settings
        return min(self._units(instance, p), cfg["block"] // (cfg.get("smem") or 1))

    def _fits(self, instance: Instance, p: ConvProblem) -> bool:
        """Whether some channel-unit count fits shared memory (_choose_cub is not None). One
        unit is tried first: it usually fits, and without a staged input tile (the taps grow
        with the units) nothing fits where it does not; else every count at once."""
        top = self._cub_range(instance, p)
        if top < 1:
            return False
        if self._shared_bytes(instance, p, 1) <= SHARED_LIMIT:
            return True
        if not instance.settings.get("smem"):
            return False
        cub = np.arange(1, top + 1, dtype=np.int64)
        return bool((self._shared_bytes(instance, p, cub) <= SHARED_LIMIT).any())

    def _choose_cub(self, instance: Instance, p: ConvProblem) -> int | None:
        """Channel units per block. Consecutive threads take consecutive units of one pixel, so
        a warp reads one contiguous run when the block holds all units of a pixel, else runs of
        cub units: score the useful share of threads times that coalescing, shared memory
        permitting (for shared-memory tiles also the halo). Ties go to the larger cub (within
        1e-9 of the best score so far). Every cub is scored at once (numpy)."""
        cfg = instance.settings
        block, units = cfg["block"], self._units(instance, p)
        unit = cfg["kpt"] if cfg["grouped"] else cfg["vec"]
        run_unit = cfg["vec"] if instance.operator == "conv2d_bwd_weight" else unit
        lanes = cfg.get("smem") or 1
        cub = np.arange(1, self._cub_range(instance, p) + 1, dtype=np.int64)
        fits = np.broadcast_to(self._shared_bytes(instance, p, cub) <= SHARED_LIMIT, cub.shape)
        if not fits.any():
            return None
        used = (block // cub) // lanes * lanes * cub
        score = (used / block) * (units / (-(-units // cub) * cub))  # useful threads x slices
        score = np.where(cub < units,
                         score * np.minimum(1.0, cub * run_unit * DTYPE_BYTES[p.dtype] / 128),
                         score)
        if cfg.get("smem"):
            shape = self._corr_shape(instance.operator, p)
            ow = np.minimum((block // cub) // lanes * cfg["tile_w"], shape["Wo"])
            ih = (lanes - 1) * shape["sh"] + (p.R - 1) * p.dil_h + 1
            iw = (ow - 1) * shape["sw"] + (p.S - 1) * p.dil_w + 1
            score = score / ((ih * iw) / (lanes * ow))  # staged input vectors per output
        score = np.where(fits, score, -np.inf)
        chosen = np.flatnonzero(fits & (score >= np.maximum.accumulate(score) - 1e-9))
        return int(cub[chosen[-1]])

    @staticmethod
    def blocks_per_sm(instance: Instance) -> int:
        """The occupancy the kernel is compiled for (MIN_BLOCKS in direct.cu): occ for 16-bit
        types, half of it rounded up for fp32 (whose input windows take twice the registers)."""
        occ = instance.settings["occ"]
        return (occ + 1) // 2 if instance.dtype == "fp32" else occ

    def plan(self, instance: Instance, p: ConvProblem) -> Plan:
        cfg, op = instance.settings, instance.operator
        cub = self._choose_cub(instance, p)
        if cub is None:
            raise ValueError(f"{instance.name} cannot run {p.label()}: "
                             f"{self.applicable(instance, p)}")
        block, tile_w = cfg["block"], cfg["tile_w"]
        units = self._units(instance, p)
        slices = -(-units // cub)
        ppb = block // cub
        shared = self._shared_bytes(instance, p, cub)
        # Persistent grids: one wave of the blocks the registers allow (occ per multiprocessor);
        # every thread then walks many tiles, so staging the taps is paid once per block.
        resident = SM_COUNT * self.blocks_per_sm(instance)
        if op == "conv2d_bwd_weight":
            tiles = p.N * p.P * -(-p.Q // tile_w)
            total = p.K * p.R * p.S * p.c_per_group
            fr, rb = cfg["fr"], cfg["rb"]
            grid_z = -(-fr // (rb or fr)) if fr else p.R * p.S
            splits = min(-(-tiles // ppb), max(1, cfg["waves"] * resident // (slices * grid_z)),
                         max(1, WORKSPACE_CAP // (4 * total)))
            return Plan(units, cub, slices, splits, grid_z, shared, splits, total)
        cap = max(1, resident // slices)
        if cfg["smem"]:
            th = cfg["smem"]
            shape = self._corr_shape(op, p)
            ow = ((block // cub) // th) * tile_w
            tiles = p.N * -(-shape["Ho"] // th) * -(-shape["Wo"] // ow)
            return Plan(units, cub, slices, min(tiles, cap), 1, shared)
        if op == "conv2d_bwd_data" and (p.stride_h, p.stride_w) != (1, 1):
            per_phase = -(-p.W // p.stride_w)
            tiles = p.N * p.H * p.stride_w * -(-per_phase // tile_w)
        else:
            shape = self._corr_shape(op, p)
            tiles = p.N * shape["Ho"] * -(-shape["Wo"] // tile_w)
        return Plan(units, cub, slices, min(-(-tiles // ppb), cap), 1, shared)

    @staticmethod
    def entry(instance: Instance, p: ConvProblem) -> str:
        """The kernel that computes this shape (each has its own registers): backward-data with
        a stride has its own; FR > 0 instances unroll the input window for unit stride and
        dilation along the row in the main entry, for stride 2 in the _s2 one (forward and
        backward-weight), and keep a _generic one for the rest."""
        op = instance.operator
        if op == "conv2d_bwd_data" and (p.stride_h, p.stride_w) != (1, 1):
            return "conv2d_bwd_data_strided"
        if instance.settings["fr"] and (p.dil_w, p.stride_w) == (1, 2):
            return f"{op}_s2"
        if instance.settings["fr"] and (p.dil_w, p.stride_w) != (1, 1):
            return f"{op}_generic"
        return op

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        plan = self.plan(instance, problem)
        names = [t.name for t in OPERATORS[instance.operator].tensors(problem)]
        block = (instance.settings["block"], 1, 1)
        grid = (plan.grid_x, plan.slices, plan.grid_z)
        params = conv_params(problem)
        entry = self.entry(instance, problem)
        if instance.operator != "conv2d_bwd_weight":
            return [Launch(entry=entry, grid=grid, block=block,
                           args=(*names, params, plan.cub), shared_bytes=plan.shared_bytes)]
        x, dy, dw = names
        reduce_blocks = -(-plan.total // REDUCE_COLUMNS)
        return [Launch(entry=entry, grid=grid, block=block,
                       args=(x, dy, "workspace", params, plan.cub),
                       shared_bytes=plan.shared_bytes),
                Launch(entry="conv2d_bwd_weight_reduce", grid=(reduce_blocks, 1, 1),
                       block=(REDUCE_BLOCK, 1, 1),
                       args=("workspace", dw, plan.total, plan.splits))]

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        if instance.operator != "conv2d_bwd_weight":
            return 0
        plan = self.plan(instance, problem)
        return plan.splits * plan.total * 4


FAMILY = register(DirectConv())

__all__ = ["DirectConv", "FAMILY", "MAX_GROUP_WIDTH", "Plan"]
