"""The dwsep_fwd families: dwsep_chunked (CUDA cores, chunked.cu), dwsep_mma (the pointwise
stage on tensor cores, mma.cu) and dwsep_tile (a spatial output tile with its input halo in
shared memory, tile.cu); their configuration spaces, applicability and launch geometry."""

from __future__ import annotations

from typing import Any

from kernels.dwsep.operator import dwsep_params, tensor_args
from kernels.dwsep.problem import DWSEP_OPERATORS, DwsepProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535


class DwsepFamily(KernelFamily):
    """What the dwsep families share: one launch of the kernel named after the family, over a
    grid of pixel tiles (x) by output-channel tiles (y); the grid's limits and the operator
    are checked here, a family's own rules in `refuses`."""

    operators = DWSEP_OPERATORS

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        """(pixel tiles, channel tiles): consecutive pixels by default."""
        return -(-p.N * p.P * p.Q // c["tile_p"]), -(-p.K // c["tile_k"])

    def threads(self, c: dict[str, Any]) -> int:
        """Warps of 32 x 32 outputs (the tensor-core families)."""
        return 32 * (c["tile_p"] // 32) * (c["tile_k"] // 32)

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        return None

    def applicable(self, instance: Instance, problem: DwsepProblem) -> str | None:
        if problem.op not in self.operators:
            return f"{self.name} computes {', '.join(self.operators)}, not {problem.op}"
        if instance.dtype == "fp32":
            return "dwsep_fwd is measured in bf16 and fp16"
        why = self.refuses(instance, problem)
        if why:
            return why
        tiles, tiles_k = self.grid(instance.settings, problem)
        if tiles_k > MAX_GRID_Y:
            return f"K={problem.K} needs {tiles_k} channel tiles, above {MAX_GRID_Y}"
        if tiles > MAX_GRID_X:
            return f"{tiles} output tiles need more blocks than a grid holds"
        return None

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        return [Launch(self.name, (*self.grid(c, problem), 1), (self.threads(c), 1, 1),
                       (*tensor_args(problem), dwsep_params(problem)))]


class DwsepChunked(DwsepFamily):
    """Config fields: tile_p (output pixels per block), tile_k (output channels per block),
    chunk (depthwise channels per step); threads = tile_p * tile_k / 16."""

    name = "dwsep_chunked"
    short = "chunked"
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

    def threads(self, c: dict[str, Any]) -> int:
        return c["tile_p"] * c["tile_k"] // 16  # 4 x 4 outputs each


class DwsepMma(DwsepFamily):
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

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        """(output tiles of every image, channel tiles)."""
        return (-(-p.P // c["tile_h"])) * (-(-p.Q // c["tile_w"])) * p.N, -(-p.K // c["tile_k"])

    def threads(self, c: dict[str, Any]) -> int:
        return 32 * (c["tile_h"] * c["tile_w"] // 32) * (c["tile_k"] // 32)

    def refuses(self, instance: Instance, problem: DwsepProblem) -> str | None:
        if problem.R * problem.S > RS_MAX:
            return f"a {problem.R}x{problem.S} filter has more than {RS_MAX} taps"
        if (problem.R > 7 or problem.S > 7) or problem.stride > 2:
            return "the halo holds filters up to 7x7 at stride 1 or 2"
        if instance.settings["kc"] % problem.multiplier:
            return (f"kc={instance.settings['kc']} is not a multiple of the multiplier "
                    f"{problem.multiplier}")
        return None


FAMILY = register(DwsepChunked())
MMA_FAMILY = register(DwsepMma())
TILE_FAMILY = register(DwsepTile())
__all__ = ["DwsepChunked", "DwsepMma", "DwsepTile", "FAMILY", "MMA_FAMILY", "TILE_FAMILY"]
