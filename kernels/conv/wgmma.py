"""conv_wgmma: implicit-GEMM grouped convolution on Hopper's warpgroup matrix instructions
(sm_90a), every direction, warp-specialized: producer warpgroups gather k-tiles of 64 by
cp.async into 128-byte-swizzled stages, block_m / 64 consumer warpgroups run wgmma on them and
hold the accumulators (conv/wgmma.cu). The GEMM view, grid and backward-weight split-K are
conv_igemm's. Channels a group a multiple of 8 (16-byte copies), bf16 and fp16; other targets
get the compiler's refusal (the source needs sm_90a).

Configuration: block_m x block_n (64 or 128 by 64, 128 or 256), block_k 64, `stages` shared
memory stages (dynamic, up to 227 KB), `producers` warpgroups and, for backward-weight,
`split_k` slices of the reduction.
"""

from __future__ import annotations

from typing import Any

from kernels.conv.igemm import GRID_Z_LIMIT, VECTOR_CHANNELS, IGemmConv
from kernels.conv.operator import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register

BLOCK_K = 64
MAX_STAGES = 7  # named barriers: 2 per stage of the 15 a block has beside __syncthreads
SMEM_OPT_IN = 227 * 1024
ALIGN = 1024
# (block_m, block_n, producers): one or two consumer warpgroups, at most 384 threads (168
# registers each: the 128 accumulators of a 64 x 256 consumer)
TILES = [(128, 256, 1), (128, 128, 1), (128, 64, 1), (64, 256, 1), (64, 128, 1), (64, 64, 1),
         (128, 128, 2), (64, 128, 2), (64, 256, 2)]
SPLITS = (1, 4, 16, 64)
SMALLEST = 64


def shared_bytes(config: dict[str, Any]) -> int:
    c = config
    return ALIGN + c["stages"] * (c["block_m"] + c["block_n"]) * BLOCK_K * 2


def threads(config: dict[str, Any]) -> int:
    return 128 * (config["block_m"] // 64 + config["producers"])


def generate_configs(op: str) -> list[dict[str, Any]]:
    """Per tile the deepest pipeline that fits and three stages (less shared memory: two blocks
    a multiprocessor where the registers allow it)."""
    out = []
    for bm, bn, producers in TILES:
        stage = (bm + bn) * BLOCK_K * 2
        deepest = min(MAX_STAGES, (SMEM_OPT_IN - ALIGN) // stage)
        for stages in sorted({deepest, min(deepest, 3)}, reverse=True):
            config = {"block_m": bm, "block_n": bn, "block_k": BLOCK_K, "stages": stages,
                      "producers": producers}
            if op != "conv2d_bwd_weight":
                out.append(config)
            else:
                out += [{**config, "split_k": s} for s in SPLITS]
    return out


class WgmmaConv(IGemmConv):
    name = "conv_wgmma"
    short = "wgmma"
    source_file = "conv/wgmma.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs(operator)

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {k: v for k, v in super().defines(instance).items() if k != "BLOCK_K"}

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        if p.op != instance.operator:
            return f"instance is for {instance.operator}, problem is {p.op}"
        if p.dtype not in ("bf16", "fp16"):
            return f"conv_wgmma runs on the matrix units in bf16/fp16 only, not {p.dtype}"
        for name in VECTOR_CHANNELS[p.op] + (("Kg",) if p.op == "conv2d_fwd" else ()):
            value = p.c_per_group if name == "Cg" else p.k_per_group
            if value % 8:
                return f"{name}={value} is not a multiple of 8 (16-byte copies, paired stores)"
        grid_z = self.grid_z(instance, p)
        if grid_z > GRID_Z_LIMIT:
            return f"grid z = {grid_z} over the {GRID_Z_LIMIT} limit"
        if self.tiles(instance, p) > 2**31 - 1:
            return "too many tiles for grid x"
        m, n, _ = p.gemm
        for dim, size, tile in (("M", m, c["block_m"]), ("N", n, c["block_n"])):
            if tile > SMALLEST and tile >= 4 * size:  # a smaller tile of the space covers it
                return (f"block_{dim.lower()}={tile} is 4x or more the GEMM {dim}={size}: "
                        f"mostly idle work, a smaller tile covers it")
        return None

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        block, smem = (threads(c), 1, 1), shared_bytes(c)
        grid, params = self.grid(instance, p), conv_params(p)
        if p.op == "conv2d_fwd":
            return [Launch("conv2d_fwd", grid, block, ("x", "w", "y", params), smem)]
        if p.op == "conv2d_bwd_data":
            return [Launch("conv2d_bwd_data", grid, block, ("dy", "w", "dx", params), smem)]
        splits, per = self.splits(instance, p)
        if splits == 1:
            return [Launch("conv2d_bwd_weight", grid, block, ("x", "dy", "dw", params), smem)]
        n = p.tensor_elements()["weight"]
        small = (grid_stride_blocks(n, 256), 1, 1)
        return [Launch("igemm_zero", small, (256, 1, 1), ("workspace", n)),
                Launch("igemm_bwd_weight_split", grid, block,
                       ("x", "dy", "workspace", params, per), smem),
                Launch("igemm_reduce", small, (256, 1, 1), ("workspace", "dw", n))]


FAMILY = register(WgmmaConv())
