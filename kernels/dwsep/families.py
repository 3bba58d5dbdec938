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


RS_MAX = 49  # dwsep_tile's filter buffer: up to 7x7
SMEM_LIMIT = 48 * 1024  # static shared memory of one block


def tile_halo(tile_h: int, tile_w: int) -> int:
    """Halo elements per channel a dwsep_tile block holds: enough for stride 2 and 7x7."""
    return ((tile_h - 1) * 2 + 7) * ((tile_w - 1) * 2 + 7)


class DwsepTile(DwsepMma):
    """Config fields: tile_h x tile_w (an output tile of one image), tile_k (output channels
    per block), kc (depthwise channels per step); the input halo and the filters of a step in
    shared memory. NVIDIA only (mma.sync); bf16 and fp16."""

    name = "dwsep_tile"
    short = "tile"
    source_file = "dwsep/tile.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        out = []
        for tile_h, tile_w in ((4, 8), (8, 8), (8, 16), (16, 8)):
            for tile_k in (32, 64, 128):
                for kc in (16, 32):
                    warps = (tile_h * tile_w // 32) * (tile_k // 32)
                    smem = (2 * (tile_h * tile_w + tile_k) * (kc + 8)
                            + 2 * tile_halo(tile_h, tile_w) * kc + 4 * kc * RS_MAX)
                    if 2 <= warps <= 16 and smem <= SMEM_LIMIT:
                        out.append({"tile_h": tile_h, "tile_w": tile_w, "tile_k": tile_k,
                                    "kc": kc})
        return out

    def defines(self, instance: Instance) -> dict[str, int | str]:
        c = instance.settings
        return {**super().defines(instance), "HALO": tile_halo(c["tile_h"], c["tile_w"]),
                "RS_MAX": RS_MAX}

    def applicable(self, instance: Instance, problem: DwsepProblem) -> str | None:
        c = instance.settings
        if problem.op not in self.operators:
            return f"{self.name} computes {', '.join(self.operators)}, not {problem.op}"
        if problem.R * problem.S > RS_MAX:
            return f"a {problem.R}x{problem.S} filter has more than {RS_MAX} taps"
        if (problem.R > 7 or problem.S > 7) or problem.stride > 2:
            return "the halo holds filters up to 7x7 at stride 1 or 2"
        if c["kc"] % problem.multiplier:
            return f"kc={c['kc']} is not a multiple of the multiplier {problem.multiplier}"
        tiles = (-(-problem.P // c["tile_h"])) * (-(-problem.Q // c["tile_w"])) * problem.N
        if tiles >= 2**31:
            return f"{tiles} output tiles need more blocks than a grid holds"
        if -(-problem.K // c["tile_k"]) > MAX_GRID_Y:
            return f"K={problem.K} needs more than {MAX_GRID_Y} channel tiles"
        return None

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        tiles = (-(-problem.P // c["tile_h"])) * (-(-problem.Q // c["tile_w"])) * problem.N
        threads = 32 * (c["tile_h"] * c["tile_w"] // 32) * (c["tile_k"] // 32)
        return [Launch("dwsep_tile", (tiles, -(-problem.K // c["tile_k"]), 1), (threads, 1, 1),
                       (*tensor_args(problem), dwsep_params(problem)))]


FAMILY = register(DwsepChunked())
MMA_FAMILY = register(DwsepMma())
TILE_FAMILY = register(DwsepTile())
__all__ = ["DwsepChunked", "DwsepMma", "DwsepTile", "FAMILY", "MMA_FAMILY", "TILE_FAMILY"]
