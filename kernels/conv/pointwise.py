"""conv_pointwise: the pointwise layers (1x1, stride 1, no padding, one group) in every
direction, as a stream of pixel rows through a GEMM whose channel dimensions are small
(conv/pointwise.cu). Forward and backward-data: the whole weight held in shared memory,
persistent blocks of independent warps, each copying chunks of `rows` pixels by cp.async
`stages` - 1 chunks ahead of its mma.sync math and writing each chunk's outputs as one
contiguous run. Backward-weight: dw in tiles of `tk` x `tc` (grid y), the pixels split over
the blocks of grid x, each warp summing its chunks' products into the tile it holds; the
blocks' parts go to an fp32 workspace that a second launch adds into dw. These layers move far
more bytes than they compute where the channels are few (MobileNet's and EfficientNet's
expansions and projections): the implicit GEMMs' 64-wide tiles leave them latency-bound.

Configuration: `warps` a block, `rows` pixels a chunk, `stages`; forward and backward-data
`cols` output channels a pass over a chunk (more take more passes), backward-weight `tk` and
`tc`. Channels multiples of 8 (16-byte copies); forward's and backward-data's weight and the
warps' stages must fit shared memory, which bounds the channels (about 256 by 256). bf16 and
fp16; NVIDIA sm_80 and later (mma.sync, ldmatrix, cp.async)."""

from __future__ import annotations

from typing import Any

from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch, refuse_below_sm
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_weight")
OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1, "conv2d_bwd_weight": 2}
SUM_WARPS = 8  # pointwise_weight_sum's warps, each adding every eighth part
GRID_Y_LIMIT = 65535  # backward-weight's tiles of dw
SMEM_OPT_IN = 227 * 1024
SM_SHARED = 228 * 1024
SM_REGISTERS = 65536
VECTOR = 8  # channels of a 16-byte copy


def round16(v: int) -> int:
    return -(-v // 16) * 16


def channels(p: ConvProblem) -> tuple[int, int]:
    """(J, NC): the channels reduced over and the output's (forward C, K; backward-data K, C)."""
    return (p.C, p.K) if p.op == "conv2d_fwd" else (p.K, p.C)


def shared_bytes(c: dict[str, Any], j: int, nc: int) -> int:
    """Forward and backward-data: the weight as [NC16][J16 + 8], then each warp's stages and
    output buffer (16-bit). Backward-weight: each warp's stages of dy's and x's columns of the
    tile, or the tile's fp32 sums where larger."""
    if "tk" in c:
        stages = 2 * c["warps"] * c["stages"] * c["rows"] * (c["tk"] + c["tc"] + 16)
        return max(stages, 4 * c["tk"] * c["tc"])
    jp, op = round16(j) + 8, round16(nc) + 8
    return 2 * (round16(nc) * jp + c["warps"] * (c["stages"] * c["rows"] * jp + c["rows"] * op))


def accumulators(c: dict[str, Any]) -> int:
    return c["tk"] * c["tc"] // 32 if "tk" in c else c["cols"]


def blocks_per_sm(c: dict[str, Any], j: int, nc: int) -> int:
    """Blocks a multiprocessor holds: shared memory, threads, and registers: the accumulators
    a thread and 48 more, the count the kernel's launch bounds hold ptxas to."""
    threads = 32 * c["warps"]
    return max(1, min(SM_SHARED // (shared_bytes(c, j, nc) + 1024), 2048 // threads,
                      SM_REGISTERS // (threads * (accumulators(c) + 48))))


def is_pointwise(p: ConvProblem) -> bool:
    return (p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.G) == (1, 1, 1, 1, 0, 0, 1)


def generate_configs(operator: str) -> list[dict[str, Any]]:
    if operator == "conv2d_bwd_weight":  # those whose stages fit (the channels do not count)
        configs = [{"warps": warps, "rows": rows, "tk": tk, "tc": tc, "stages": stages}
                   for warps in (4, 8) for rows in (32, 64) for tk in (16, 32, 64)
                   for tc in (16, 32, 64) for stages in (2, 3)]
        return [c for c in configs if shared_bytes(c, 0, 0) <= SMEM_OPT_IN]
    return [{"warps": warps, "rows": rows, "cols": cols, "stages": stages}
            for warps in (4, 8) for rows in (32, 64) for cols in (32, 64, 128)
            for stages in (2, 3, 4)]


class PointwiseConv(KernelFamily):
    name = "conv_pointwise"
    short = "pw"
    source_file = "conv/pointwise.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs(operator) if operator in OPERATORS else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "CONV_OP": OP_CODES[instance.operator]}

    def unsupported_target(self, target: str) -> str | None:
        return refuse_below_sm(self.name, target, 80, "NVIDIA's mma.sync and cp.async")

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        reason = self.other_problem(instance, p)
        if reason:
            return reason
        if not is_pointwise(p):
            return "serves 1x1 convolutions of stride 1 without padding or groups only"
        if p.C % VECTOR or p.K % VECTOR:
            return f"C={p.C} and K={p.K} must be multiples of {VECTOR} (16-byte copies)"
        if p.op == "conv2d_bwd_weight":
            tiles = self.weight_tiles(c, p)
            if tiles > GRID_Y_LIMIT:
                return f"{tiles} tiles of dw of {c['tk']} x {c['tc']}, above {GRID_Y_LIMIT}"
            return None
        need = shared_bytes(c, *channels(p))
        if need > SMEM_OPT_IN:
            return (f"the weight and {c['warps']} warps' {c['stages']} stages of {c['rows']} "
                    f"pixels take {need} bytes of shared memory, above {SMEM_OPT_IN}")
        return None

    @staticmethod
    def weight_tiles(c: dict[str, Any], p: ConvProblem) -> int:
        """Backward-weight's tiles of dw (grid y)."""
        return -(-p.K // c["tk"]) * -(-p.C // c["tc"])

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """Persistent blocks: as many as the GPU holds at once (backward-weight: over its
        tiles), at most one a `warps` chunks."""
        c = instance.settings
        chunks = -(-p.N * p.H * p.W // c["rows"])
        resident = SM_COUNT * blocks_per_sm(c, *channels(p))
        if p.op != "conv2d_bwd_weight":
            return min(-(-chunks // c["warps"]), resident), 1, 1
        tiles = self.weight_tiles(c, p)
        return min(-(-chunks // c["warps"]), max(1, resident // tiles)), tiles, 1

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """Backward-weight: each block's fp32 part of its tile of dw."""
        if problem.op != "conv2d_bwd_weight":
            return 0
        c = instance.settings
        parts, tiles, _ = self.grid(instance, problem)
        return 4 * parts * tiles * c["tk"] * c["tc"]

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        grid, params, block = self.grid(instance, p), conv_params(p), (32 * c["warps"], 1, 1)
        smem = shared_bytes(c, *channels(p))
        if p.op == "conv2d_bwd_weight":
            parts, tiles, _ = grid
            sums = (-(-c["tk"] * c["tc"] // 32), tiles, 1)
            return [Launch(p.op, grid, block, ("x", "dy", "workspace", params), smem),
                    Launch("pointwise_weight_sum", sums, (32 * SUM_WARPS, 1, 1),
                           ("workspace", "dw", params, parts))]
        args = ("x", "w", "y") if p.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(p.op, grid, block, (*args, conv_params(p)), smem)]


FAMILY = register(PointwiseConv())
