"""The dwsep_fwd families: dwsep_chunked (CUDA cores, chunked.cu) and dwsep_mma (the pointwise
stage on tensor cores, mma.cu); their configuration spaces, applicability and launch
geometry."""

from __future__ import annotations

from typing import Any

from kernels.dwsep.operator import dwsep_params, tensor_args
from kernels.dwsep.problem import DWSEP_OPERATORS, DwsepProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

MAX_GRID_Y = 65535


class DwsepChunked(KernelFamily):
    """Config fields: tile_p (output pixels per block), tile_k (output channels per block),
    chunk (depthwise channels per step); threads = tile_p * tile_k / 16."""

    name = "dwsep_chunked"
    short = "chunked"
    operators = DWSEP_OPERATORS
    source_file = "dwsep/chunked.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        out = []
        for tile_p in (32, 64, 128):
            for tile_k in (16, 32, 64, 128):
                threads = tile_p * tile_k // 16
                if not 64 <= threads <= 512:
                    continue
                for chunk in (8, 16, 32):
                    if 4 * chunk * (tile_p + tile_k + 2) <= 48 * 1024:  # static shared memory
                        out.append({"tile_p": tile_p, "tile_k": tile_k, "chunk": chunk})
        return out

    def applicable(self, instance: Instance, problem: DwsepProblem) -> str | None:
        if problem.op not in self.operators:
            return f"{self.name} computes {', '.join(self.operators)}, not {problem.op}"
        if instance.dtype == "fp32":
            return "dwsep_fwd is measured in bf16 and fp16"
        tiles_k = -(-problem.K // instance.settings["tile_k"])
        if tiles_k > MAX_GRID_Y:
            return f"K={problem.K} needs {tiles_k} channel tiles, above {MAX_GRID_Y}"
        pixels = problem.N * problem.P * problem.Q
        if -(-pixels // instance.settings["tile_p"]) >= 2**31:
            return f"{pixels} output pixels need more blocks than a grid holds"
        return None

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        pixels = problem.N * problem.P * problem.Q
        grid = (-(-pixels // c["tile_p"]), -(-problem.K // c["tile_k"]), 1)
        return [Launch("dwsep_chunked", grid, (c["tile_p"] * c["tile_k"] // 16, 1, 1),
                       (*tensor_args(problem), dwsep_params(problem)))]


class DwsepMma(DwsepChunked):
    """Config fields: tile_p (output pixels per block), tile_k (output channels per block),
    kc (depthwise channels per step); warps of 32 x 32 outputs, (tile_p / 32) x (tile_k / 32)
    of them. NVIDIA only (mma.sync); bf16 and fp16."""

    name = "dwsep_mma"
    short = "mma"
    source_file = "dwsep/mma.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [{"tile_p": tile_p, "tile_k": tile_k, "kc": kc}
                for tile_p in (32, 64, 128) for tile_k in (32, 64, 128) for kc in (32, 64)
                if 2 <= (tile_p // 32) * (tile_k // 32) <= 16]

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        pixels = problem.N * problem.P * problem.Q
        grid = (-(-pixels // c["tile_p"]), -(-problem.K // c["tile_k"]), 1)
        threads = 32 * (c["tile_p"] // 32) * (c["tile_k"] // 32)
        return [Launch("dwsep_mma", grid, (threads, 1, 1),
                       (*tensor_args(problem), dwsep_params(problem)))]


FAMILY = register(DwsepChunked())
MMA_FAMILY = register(DwsepMma())
__all__ = ["DwsepChunked", "DwsepMma", "FAMILY", "MMA_FAMILY"]
