"""The dwsep_fwd families: dwsep_chunked (CUDA cores, any GPU, chunked.cu), and on tensor
cores dwsep_resident (the depthwise tile of every channel resident in shared memory,
resident.cu), dwsep_stream (channels streamed in chunks, stream.cu), dwsep_halo (2-D output
tiles whose input arrives once with its halo, halo.cu) and dwsep_halo_tc (the same with the
depthwise on the tensor cores), and on Hopper's warpgroup matrix
instructions dwsep_wgmma (wgmma.cu, sm_90a), dwsep_wgmma_split (the same with the channels
divided over a cluster), dwsep_wgmma_staged (the same with the input staged in shared memory),
dwsep_wgmma_split_staged (both), and on wgmma_resident.cu (the depthwise once per pixel tile)
dwsep_wgmma_resident, dwsep_wgmma_bulk, dwsep_wgmma_bulk_staged and dwsep_wgmma_cluster, and
on wgmma_ring.cu dwsep_wgmma_ring (a cluster's ring of A tiles); their configuration spaces,
applicability and launch geometry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernels.dwsep.operator import dwsep_params, tensor_args, wgmma_consumers
from kernels.dwsep.problem import DWSEP_OPERATORS, DwsepProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch
from kernels.registry import register

MAX_GRID_X, MAX_GRID_Y = 2**31 - 1, 65535
RESIDENT_INPUT_BUFFERS = 3  # wgmma_resident.cu's staged buffers: INPUT_LEAD + 1


def pixel_tiles(c: dict[str, Any], p: DwsepProblem) -> int:
    """Tiles of tile_p consecutive output pixels (n, p, q flattened)."""
    return -(-p.N * p.P * p.Q // c["tile_p"])


def chunks(c: dict[str, Any], p: DwsepProblem) -> int:
    """Chunks of kc of the M*C depthwise channels (the tensor-core families)."""
    return -(-p.MC // c["kc"])


class DwsepFamily(KernelFamily):
    """What the dwsep families share: one launch of the kernel named after the family, over a
    grid of pixel tiles (x) by output-channel tiles (y); the grid's limits and the operator
    are checked here, a family's own rules in `refuses`."""

    operators = DWSEP_OPERATORS

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, ...]:
        """(pixel tiles, channel tiles[, z]): consecutive pixels by default."""
        return pixel_tiles(c, p), -(-p.K // c["tile_k"])

    def threads(self, c: dict[str, Any]) -> int:
        """Threads per block."""
        raise NotImplementedError

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        """Dynamic shared memory of a launch (none by default)."""
        return 0

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
        tiles, tiles_k = self.grid(instance.settings, problem)[:2]
        if tiles_k > MAX_GRID_Y:
            return f"K={problem.K} needs {tiles_k} channel tiles, above {MAX_GRID_Y}"
        if tiles > MAX_GRID_X:
            return f"{tiles} output tiles need more blocks than a grid holds"
        return None

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        return [Launch(self.name, (*self.grid(c, problem), 1, 1)[:3], (self.threads(c), 1, 1),
                       (*tensor_args(problem), dwsep_params(problem)),
                       shared_bytes=self.shared_bytes(c, problem))]


class DwsepChunked(DwsepFamily):
    """Config fields: tile_p (output pixels per block), tile_k (output channels per block),
    chunk (depthwise channels per step); threads = tile_p * tile_k / 16."""

    name = "dwsep_chunked"
    short = "chunked"
    source_file = "dwsep/chunked.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        out = []
        for tile_p in (32, 64, 128):
            for tile_k in (32, 64):
                threads = tile_p * tile_k // 16
                if not 64 <= threads <= 512:
                    continue
                for chunk in (8, 32):
                    if 4 * chunk * (tile_p + tile_k + 2) <= 48 * 1024:  # static shared memory
                        out.append({"tile_p": tile_p, "tile_k": tile_k, "chunk": chunk})
        return out

    def threads(self, c: dict[str, Any]) -> int:
        return c["tile_p"] * c["tile_k"] // 16  # 4 x 4 outputs each


SMEM_OPT_IN = 227 * 1024  # dynamic shared memory one block may opt into on sm_90
SMEM_TWO_BLOCKS = (228 * 1024) // 2 - 1024  # each of two blocks on one sm_90 multiprocessor


class DwsepTensorCore(DwsepFamily):
    """What the tensor-core families share (dwsep_tc.cuh): warps_m x warps_n warps tile a
    block's tile_p pixels by tile_n output channels; the pointwise weight arrives in chunks of
    kc channels through `stages` cp.async stages. `occ` is the blocks per multiprocessor the
    registers are held to (OCC in __launch_bounds__): 2 (at most 128 registers a thread) so
    that one block's depthwise overlaps another's GEMM, or 1, which leaves the compiler free.
    NVIDIA only (mma.sync); bf16 and fp16."""

    @staticmethod
    def occupancies(layout: dict[str, int]) -> tuple[int, ...]:
        """The `occ` values worth compiling a layout for. Two blocks only of 8 warps whose
        warps hold at most 32 accumulators a thread: 4-warp blocks fit twice already, 16-warp
        ones would have 64 registers a thread, and 64 accumulators spill 0.5 to 1.5 KB a thread
        within 128 registers (ptxas, sm_90a)."""
        warps = layout["warps_m"] * layout["warps_n"]
        accumulators = layout["tile_p"] * layout["tile_n"] // (32 * warps)
        return (1, 2) if warps == 8 and accumulators <= 32 else (1,)

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    @staticmethod
    def cluster_sums_bytes(tile_p: int, c: dict[str, Any]) -> int:
        """A cluster split's partial sums (cluster_reduce_store): tile_p x (tile_n + 4) floats,
        in the pipeline's shared memory once it is done; none without a split."""
        return 4 * tile_p * (c["tile_n"] + 4) if c["c_split"] > 1 else 0

    @staticmethod
    def empty_split(c: dict[str, Any], p: DwsepProblem) -> str | None:
        """Why a cluster split (c_split) would leave one of its blocks without a chunk."""
        count = chunks(c, p)
        if c["c_split"] > 1 and (c["c_split"] - 1) * -(-count // c["c_split"]) >= count:
            return (f"MC={p.MC} has {count} chunks of {c['kc']}: c_split={c['c_split']} "
                    "leaves a block without one")
        return None

    @staticmethod
    def layouts(rows: tuple[tuple[int, int, int, int], ...]) -> list[dict[str, int]]:
        """(tile_p, tile_n, warps_m, warps_n) rows as config fields."""
        return [dict(zip(("tile_p", "tile_n", "warps_m", "warps_n"), row)) for row in rows]

    @classmethod
    def warp_layouts(cls) -> list[dict[str, int]]:
        """Block tiles and their warps: each warp 16 or 32 pixels by 16 to 64 channels."""
        return cls.layouts((
            (16, 64, 1, 4), (16, 128, 1, 4), (32, 64, 2, 2), (32, 128, 2, 4), (64, 32, 4, 1),
            (64, 64, 2, 2), (64, 128, 2, 2), (64, 128, 2, 4), (64, 256, 2, 4),
            (128, 128, 4, 2)))

    def threads(self, c: dict[str, Any]) -> int:
        return 32 * c["warps_m"] * c["warps_n"]

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        return pixel_tiles(c, p), -(-p.K // c["tile_n"])

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        """The weight's stages and the rows' descriptors (3 x int32 each)."""
        return 2 * c["stages"] * c["tile_n"] * (c["kc"] + 8) + 12 * c["tile_p"]

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        """32-bit offsets need no rule: the shape record refuses tensors of 2^31 elements."""
        need = self.shared_bytes(instance.settings, p)
        if need > SMEM_OPT_IN:
            return f"needs {need} bytes of shared memory for MC={p.MC}, above {SMEM_OPT_IN}"
        if instance.settings["occ"] == 2 and need > SMEM_TWO_BLOCKS:
            return (f"occ=2 needs two blocks' shared memory on a multiprocessor: {need} bytes "
                    f"a block is above {SMEM_TWO_BLOCKS}")
        return None


class SharedPixelTile:
    """For the families whose blocks keep a pixel tile's depthwise values for all of its
    output channels: `k_blocks` blocks share the tile's channel tiles (grid y), each computing
    the depthwise once. k_blocks shapes the grid only, so the instances differing in it share
    a code object."""

    def defines(self, instance: Instance) -> dict[str, int | str]:
        """k_blocks shapes the grid only: instances differing in it share a code object."""
        values = super().defines(instance)
        values.pop("K_BLOCKS")
        return values

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        tiles, tiles_k = super().grid(c, p)
        return tiles, min(tiles_k, c["k_blocks"])


class DwsepResident(SharedPixelTile, DwsepTensorCore):
    """Strategy 1: the depthwise output of a block's tile_p pixels for every channel stays in
    shared memory while the block runs the pointwise GEMM over its output-channel tiles
    (tile_n each); k_blocks blocks share a pixel tile's output channels (the depthwise is
    computed once per block). Besides the shared warp layouts, four of 16 warps, for wide C
    where one block fills a multiprocessor's shared memory. Config fields: tile_p, tile_n,
    warps_m, warps_n, kc, stages, k_blocks, occ."""

    name = "dwsep_resident"
    short = "resident"
    source_file = "dwsep/resident.cu"

    # 16 warps: twice the warps of one block to hide the latency of the depthwise loads and
    # of the mma chains (tile_p, tile_n, warps_m, warps_n)
    WIDE_LAYOUTS = ((32, 256, 2, 8), (64, 128, 2, 8), (64, 256, 4, 4), (128, 128, 4, 4))

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [{**layout, "kc": kc, "stages": 3, "k_blocks": k_blocks, "occ": occ}
                for layout in [*(w for w in self.warp_layouts() if w["tile_p"] <= 64),
                               *self.layouts(self.WIDE_LAYOUTS)]
                for occ in self.occupancies(layout)
                for kc in (32, 64) for k_blocks in (1, 2, 4)]

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        width = chunks(c, p) * c["kc"]
        return 2 * c["tile_p"] * (width + 8) + super().shared_bytes(c, p)

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        if c["k_blocks"] > 1 and -(-p.K // c["tile_n"]) < c["k_blocks"]:
            return (f"K={p.K} has fewer than k_blocks={c['k_blocks']} tiles of {c['tile_n']}: "
                    "the instance with fewer k_blocks launches the same grid")
        return super().refuses(instance, p)


class DwsepStream(DwsepTensorCore):
    """Strategy 2: the M*C depthwise channels streamed in chunks of kc, the pointwise partial
    sums in registers; shared memory independent of C, for wide C. Where M = 1 and C is a
    multiple of 8 the chunk's input under every tap arrives by cp.async ahead of use (staged
    taps), and a block may walk `tiles` consecutive pixel tiles in one pipeline. With
    c_split > 1 a cluster of c_split blocks divides the chunks and adds up its partial sums in
    shared memory (sm_90 clusters): more blocks where pixels and output channels alone give
    few. Each configuration is compiled for one case, so that its code holds that case only
    (a smaller kernel, the taps' loops unrolled): `filter` 3 or 5 (R = S = filter) or 0 (every
    other size), and `staged` 1 (staged taps) or 0. A problem meets one case, so it has as
    many candidates as before. Config fields: tile_p, tile_n, warps_m, warps_n, kc, stages,
    c_split, tiles, occ, filter, staged."""

    name = "dwsep_stream"
    short = "stream"
    source_file = "dwsep/stream.cu"

    FILTERS = (3, 5)  # compiled for their own instances; other sizes share filter = 0

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [{**layout, "kc": kc, "stages": stages, "c_split": c_split, "tiles": tiles,
                 "occ": occ, "filter": filter_size, "staged": staged}
                for layout in self.warp_layouts() for occ in self.occupancies(layout)
                for kc in (32, 64)
                for stages, c_split, tiles in ((2, 1, 1), (3, 1, 1), (2, 1, 4), (2, 2, 1),
                                               (3, 2, 1), (2, 4, 1), (2, 8, 1))
                for filter_size in (*self.FILTERS, 0) for staged in (1, 0)
                if staged or tiles == 1]  # a block walks several tiles with staged taps only

    @staticmethod
    def staged(p: DwsepProblem) -> bool:
        return p.multiplier == 1 and p.C % 8 == 0

    @classmethod
    def filter_case(cls, p: DwsepProblem) -> int:
        """The `filter` of the instances that serve p."""
        return p.R if p.R == p.S and p.R in cls.FILTERS else 0

    def compiled_case(self, problem: DwsepProblem) -> dict[str, Any]:
        return {"filter": self.filter_case(problem), "staged": int(self.staged(problem))}

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int, int]:
        tiles, tiles_k = super().grid(c, p)
        return -(-tiles // c["tiles"]), tiles_k, c["c_split"]

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        if self.staged(p):
            steps = -(-chunks(c, p) // c["c_split"]) * min(c["tiles"], pixel_tiles(c, p))
            stage = 2 * (c["tile_n"] * (c["kc"] + 8) + p.R * p.S * c["tile_p"] * c["kc"])
            pipeline = 2 * c["tile_p"] * (c["kc"] + 8) + min(c["stages"], steps) * stage
        else:
            pipeline = 2 * 2 * c["tile_p"] * (c["kc"] + 8) + super().shared_bytes(c, p)
        return max(pipeline, self.cluster_sums_bytes(c["tile_p"], c))

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        if c["staged"] and not self.staged(p):
            return "staged taps need multiplier 1 and C a multiple of 8"
        if not c["staged"] and self.staged(p):
            return "compiled for reads through the cache: the staged=1 instance serves this"
        case = self.filter_case(p)
        if c["filter"] != case:
            return (f"compiled for filter={c['filter']}: R={p.R}, S={p.S} need filter={case}"
                    f"{' (the sizes without their own instances)' if case == 0 else ''}")
        if c["tiles"] > 1 and pixel_tiles(c, p) <= c["tiles"]:
            return f"{p.N * p.P * p.Q} pixels make one block of {c['tiles']} tiles at most"
        return self.empty_split(c, p) or super().refuses(instance, p)


class DwsepHalo(DwsepTensorCore):
    """2-D output tiles of tile_h x tile_w pixels inside one image; per chunk of kc channels
    the input under the tile, halo included, arrives once by cp.async and the depthwise reads
    it from shared memory, a thread computing 4 outputs along a row (8 for 3x3 filters where
    tile_w allows) from taps held in registers. For many pixels and moderate channel counts
    (memory-bound blocks); multiplier 1 and C a multiple of 8. A block walks `tiles`
    consecutive tiles in one pipeline; or, with c_split > 1 (one tile a block), a cluster of
    c_split blocks divides the chunks and adds up its partial sums in shared memory, for maps
    of few tiles and wide C. Config fields: tile_h, tile_w, tile_n, warps_m, warps_n, kc,
    stages, tiles, occ, c_split."""

    name = "dwsep_halo"
    short = "halo"
    source_file = "dwsep/halo.cu"
    halo_pad = 0  # u16 after each halo pixel's kc channels

    def configs(self, operator: str) -> list[dict[str, Any]]:
        shapes = {64: ((8, 8), (4, 16), (2, 32)), 128: ((16, 8), (8, 16), (4, 32))}
        layouts = self.layouts(((64, 32, 4, 1), (64, 64, 2, 2), (64, 128, 2, 4), (64, 256, 2, 4),
                                (128, 32, 4, 1), (128, 64, 4, 2), (128, 128, 4, 2)))
        return [{"tile_h": tile_h, "tile_w": tile_w, "tile_n": w["tile_n"],
                 "warps_m": w["warps_m"], "warps_n": w["warps_n"], "kc": kc, "stages": stages,
                 "tiles": tiles, "occ": occ, "c_split": c_split}
                for w in layouts for occ in self.occupancies(w)
                for tile_h, tile_w in shapes[w["tile_p"]] for kc in (32, 64)
                for stages, tiles, c_split in ((2, 1, 1), (3, 4, 1), (4, 8, 1), (2, 1, 2),
                                               (2, 1, 4), (2, 1, 8))]

    @staticmethod
    def halo(c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        """The input rows and columns under a tile."""
        return (c["tile_h"] - 1) * p.stride + p.R, (c["tile_w"] - 1) * p.stride + p.S

    @staticmethod
    def spatial_tiles(c: dict[str, Any], p: DwsepProblem) -> int:
        return p.N * -(-p.P // c["tile_h"]) * -(-p.Q // c["tile_w"])

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int, int]:
        return (-(-self.spatial_tiles(c, p) // c["tiles"]), -(-p.K // c["tile_n"]),
                c["c_split"])

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        hh, hw = self.halo(c, p)
        tile_p = c["tile_h"] * c["tile_w"]
        steps = (-(-chunks(c, p) // c["c_split"])
                 * min(c["tiles"], self.spatial_tiles(c, p)))
        stage = 2 * (c["tile_n"] * (c["kc"] + 8) + hh * hw * (c["kc"] + self.halo_pad))
        pipeline = 2 * tile_p * (c["kc"] + 8) + min(c["stages"], steps) * stage
        return max(pipeline, self.cluster_sums_bytes(tile_p, c))

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        if p.multiplier != 1 or p.C % 8:
            return "needs multiplier 1 and C a multiple of 8 (16-byte copies along channels)"
        for field, size, name in (("tile_w", p.Q, "Q"), ("tile_h", p.P, "P")):
            if c[field] >= 2 * size and c[field] > 8:
                return (f"{field}={c[field]} is at least twice {name}={size}: a smaller tile "
                        "covers the map with fewer idle rows")
        if c["tiles"] > 1 and self.spatial_tiles(c, p) <= c["tiles"]:
            return f"{self.spatial_tiles(c, p)} tiles make one block of {c['tiles']} at most"
        return self.empty_split(c, p) or super().refuses(instance, p)


class DwsepHaloTc(DwsepHalo):
    """dwsep_halo with the depthwise of 3x3 and 5x5 filters on the tensor cores (halo.cu with
    DW_TC): per 16 output pixels and 8 channels a warp runs mma.sync over k = (tap, channel),
    two taps a k16 step, A's rows (a pixel's 8 channels under one tap) gathered from the halo
    by ldmatrix, B the channels' taps on a diagonal; products exact, sums fp32. A few
    instructions per 128 depthwise values instead of several per value. Served: 5x5 filters
    at stride 1, the one class where it beat dwsep_halo side by side (H100, bf16, N = 32: 1.05
    to 1.17x); on 3x3 filters and at stride 2 it was slower (the kernel still computes them,
    3x3 on tensor cores, other sizes on CUDA cores). Config fields: dwsep_halo's, c_split at
    most 2."""

    name = "dwsep_halo_tc"
    short = "halo_tc"
    halo_pad = 8  # ldmatrix's 8 rows (pixels 1 apart) in distinct banks

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [c for c in super().configs(operator) if c["c_split"] <= 2]

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "DW_TC": 1}

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        if (p.R, p.S, p.stride) != (5, 5, 1):
            return (f"serves 5x5 filters at stride 1 (R={p.R}, S={p.S}, stride={p.stride}): "
                    "dwsep_halo is faster elsewhere")
        return super().refuses(instance, p)


class DwsepWgmma(DwsepFamily):
    """The wide pairs on Hopper (sm_90a), warp-specialized: `producers` warpgroups (128
    threads each) copy each 64-channel chunk's pointwise weight by cp.async and compute its
    depthwise values into a swizzled A tile, `stages` chunks in flight, while tile_p / 64
    consumer warpgroups run the wgmma of the chunks ready and hold the accumulators; named
    barriers hand the stages back and forth. Consecutive blocks share a pixel tile (its input
    stays in L2). Compiled per filter case: `filter` 3 (R = S = 3, the filters in registers) or
    0 (any other size). Multiplier 1 and C a multiple of 8; bf16 and fp16; sm_90a only (other
    targets: unsupported). Config fields: tile_p, tile_n, producers,
    warps_m (the consumers' warps: tile_p / 16), warps_n (1), kc (64), stages, filter."""

    name = "dwsep_wgmma"
    short = "wgmma"
    source_file = "dwsep/wgmma.cu"
    targets = ("sm_90a",)

    MAX_THREADS = 384  # 168 registers each: 256 accumulator columns beside 72 filter taps

    @staticmethod
    def wgmma_config(tile_p: int, tile_n: int, producers: int, stages: int, filter_size: int,
                     **more: int) -> dict[str, Any]:
        """A configuration of the wgmma families (their fields in instance-name order)."""
        return {"tile_p": tile_p, "tile_n": tile_n, "producers": producers,
                "warps_m": tile_p // 16, "warps_n": 1, "kc": 64, "stages": stages,
                "filter": filter_size, **more}

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, producers, stages, filter_size)
                   for tile_p in (64, 128) for tile_n in (64, 128, 256, 512)
                   for producers in (1, 2) for stages in (2, 3, 4) for filter_size in (3, 0)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and self.shared_bytes(c, None) <= SMEM_OPT_IN]

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    @staticmethod
    def filter_case(p: DwsepProblem) -> int:
        return 3 if p.R == p.S == 3 else 0

    def compiled_case(self, problem: DwsepProblem) -> dict[str, Any]:
        return {"filter": self.filter_case(problem)}

    def threads(self, c: dict[str, Any]) -> int:
        return 128 * (wgmma_consumers(c) + c["producers"])

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        return pixel_tiles(c, p), -(-p.K // c["tile_n"])

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem | None) -> int:
        """1 KB to align the tiles, the stages (an A and a weight tile, 128 bytes a row), and
        the rows' descriptors (the same for every problem)."""
        return 1024 + 128 * c["stages"] * (c["tile_p"] + c["tile_n"]) + 12 * c["tile_p"]

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        if p.multiplier != 1 or p.C % 8:
            return "needs multiplier 1 and C a multiple of 8 (16-byte copies along channels)"
        case = self.filter_case(p)
        if c["filter"] != case:
            return f"compiled for filter={c['filter']}: R={p.R}, S={p.S} need filter={case}"
        tiles, tiles_k = self.grid(c, p)[:2]
        if tiles * tiles_k >= 2**31:
            return f"{tiles * tiles_k} blocks are more than a grid holds"
        return None


class DwsepWgmmaSplit(DwsepWgmma):
    """dwsep_wgmma with the channels divided over a thread-block cluster of c_split blocks
    (wgmma.cu with C_SPLIT): each block runs the pipeline over its share of the 64-channel
    chunks, and the cluster adds up the partial sums in distributed shared memory, each block
    writing tile_p / c_split of the tile's rows. For few pixels against many channels (small
    maps, small batches), where dwsep_wgmma leaves multiprocessors idle and each block walks a
    long chain of chunks; refused where the unsplit grid already makes two waves on a 132-SM
    GPU, or a block would get no chunk. Config fields: those of dwsep_wgmma, and c_split."""

    name = "dwsep_wgmma_split"
    short = "wgmma_split"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, producers, stages, filter_size,
                                     c_split=c_split)
                   for tile_p in (64, 128) for tile_n in (64, 128, 256) for producers in (1, 2)
                   for stages in (2, 3) for filter_size in (3, 0) for c_split in (2, 4, 8)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and self.shared_bytes(c, None) <= SMEM_OPT_IN]

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int, int]:
        return (*super().grid(c, p), c["c_split"])

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem | None) -> int:
        """dwsep_wgmma's, with the stages' region large enough for the partial sums
        (tile_p x (tile_n + 8) floats)."""
        stages = 128 * c["stages"] * (c["tile_p"] + c["tile_n"])
        return 1024 + max(stages, 4 * c["tile_p"] * (c["tile_n"] + 8)) + 12 * c["tile_p"]

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        count = -(-p.MC // 64)
        if count < c["c_split"]:
            return (f"MC={p.MC} has {count} chunks of 64: c_split={c['c_split']} leaves a "
                    "block without one")
        tiles, tiles_k = DwsepWgmma.grid(self, c, p)
        if tiles * tiles_k >= 2 * SM_COUNT:
            return (f"{tiles * tiles_k} blocks unsplit already make two waves on {SM_COUNT} "
                    "multiprocessors")
        return super().refuses(instance, p)


class StagedInput:
    """What the families whose producers stage each chunk's input rows in shared memory share
    (dwsep_staged.cuh): the rows a block reads, a buffer's bytes, the filter cases computed on
    the tensor cores (`filter` 3 and 5; 0 for any other size, on the CUDA cores), and the
    refusal where stages - 1 buffers and a 16-byte zero row do not fit beside the rest."""

    TC_FILTERS = (3, 5)  # the square filter sizes whose depthwise runs on the tensor cores
    PIXEL_BYTES = 144  # a staged pixel: 64 channels and 16 bytes (ldmatrix's rows apart)

    @classmethod
    def tc_filter_case(cls, p: DwsepProblem) -> int:
        """The compiled case of the staged fills: R = S of TC_FILTERS, or 0 (any other)."""
        return p.R if p.R == p.S and p.R in cls.TC_FILTERS else 0

    def filter_case(self, p: DwsepProblem) -> int:
        return self.tc_filter_case(p)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "STAGED": 1}

    @staticmethod
    def staged_rows(c: dict[str, Any], p: DwsepProblem) -> int:
        """Input rows (n * H + h) a block's tile_p pixels read at most (wgmma.cu's staged_rows):
        they span rows_out output rows (n * P + p), a step of stride input rows each, R - 2 pad
        - 1 more where the step crosses into the next image."""
        rows_out = min((c["tile_p"] + p.Q - 2) // p.Q + 1, p.N * p.P)
        return ((rows_out - 1) * p.stride + p.R
                + (rows_out - 1 + p.P - 1) // p.P * max(p.R - 2 * p.pad - 1, 0))

    @classmethod
    def param_bytes(cls, c: dict[str, Any]) -> int:
        """A buffer's taps, scales and shifts of its 64 channels (16-bit) before its rows, for
        the filters on the tensor cores (3x3: 1,408 bytes; 5x5: 3,456)."""
        f = c["filter"]
        return 2 * (64 * f * f + 128) if f in cls.TC_FILTERS else 0

    @classmethod
    def input_buffer_bytes(cls, c: dict[str, Any], p: DwsepProblem) -> int:
        """One buffer of a chunk's staged input: its parameters, then staged_rows x W pixels."""
        return cls.param_bytes(c) + cls.staged_rows(c, p) * p.W * cls.PIXEL_BYTES

    def input_buffers(self, c: dict[str, Any]) -> int:
        """The buffers of staged input rows: stages - 1 (wgmma.cu's LEAD + 1)."""
        return c["stages"] - 1

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem | None) -> int:
        """The family's own, a 16-byte zero row and, for a problem, the buffers of staged
        input rows."""
        inputs = 0 if p is None else self.input_buffers(c) * self.input_buffer_bytes(c, p)
        return super().shared_bytes(c, p) + inputs + 16

    def pixels_room(self, c: dict[str, Any]) -> int:
        """The most staged input pixels (rows x W) a buffer of `c` may hold."""
        spare = SMEM_OPT_IN - self.shared_bytes(c, None)
        return (spare // self.input_buffers(c) - self.param_bytes(c)) // self.PIXEL_BYTES

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        need = self.shared_bytes(instance.settings, p)
        if need > SMEM_OPT_IN:
            return (f"its staged input rows ({self.staged_rows(instance.settings, p)} of "
                    f"W={p.W}) need {need} bytes of shared memory, above {SMEM_OPT_IN}")
        return super().refuses(instance, p)


class DwsepWgmmaStaged(StagedInput, DwsepWgmma):
    """dwsep_wgmma whose producers copy each chunk's input rows under the block's pixels (every
    column, 64 channels, 144 bytes a pixel) by cp.async into shared memory, stages - 2 chunks
    ahead, with that chunk's weight (and for 3x3 and 5x5 filters its taps, scales and shifts),
    and compute the depthwise from there (wgmma.cu with STAGED): 3x3 and 5x5 on the tensor
    cores (mma.sync over k = (tap, channel), the taps on B's diagonal; `filter` 3 and 5), other
    sizes on the CUDA cores. The fill no longer waits on the latency of its loads. stages - 1
    input buffers of staged_rows x W pixels beside the stages; refused where they do not fit
    (wide maps, stride 2 on large inputs). Config fields: those of dwsep_wgmma (stages 3 or 4,
    filter 3, 5 or 0)."""

    name = "dwsep_wgmma_staged"
    short = "wgmma_staged"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, producers, stages, filter_size)
                   for tile_p in (64, 128) for tile_n in (128, 256, 512)
                   for producers in (1, 2) for stages in (3, 4) for filter_size in (3, 5, 0)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and self.shared_bytes(c, None) <= SMEM_OPT_IN]


class DwsepWgmmaSplitStaged(StagedInput, DwsepWgmmaSplit):
    """dwsep_wgmma_split whose producers stage each chunk's input rows as dwsep_wgmma_staged's
    do (wgmma.cu with C_SPLIT and STAGED): the 3x3 and 5x5 depthwise on the tensor cores over
    a block's share of the chunks, the partial sums added up over the cluster. For few pixels
    against many channels with filters whose depthwise the CUDA cores take long over (5x5 on
    7x7 and 14x14 maps). stages - 1 input buffers after the stages' region; refused where they
    do not fit. Config fields: those of dwsep_wgmma_split (two producers, stages 3 or 4, filter
    3, 5 or 0)."""

    name = "dwsep_wgmma_split_staged"
    short = "wgmma_split_staged"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, 2, stages, filter_size, c_split=c_split)
                   for tile_p in (64, 128) for tile_n in (64, 128, 256) for stages in (3, 4)
                   for filter_size in (3, 5, 0) for c_split in (2, 4, 8)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and self.shared_bytes(c, None) <= SMEM_OPT_IN]


class DwsepWgmmaResident(SharedPixelTile, DwsepWgmma):
    """dwsep_wgmma with the depthwise output of a block's tile_p pixels resident in shared
    memory for every channel (wgmma_resident.cu): the producers compute it once, during the
    block's first pass of tile_n output channels, and copy the weight's chunks for every pass;
    the consumers run each pass's wgmma over the resident A tile. k_blocks blocks share a pixel
    tile's passes (each computes the depthwise once). For wide C and K, where dwsep_wgmma
    computes the depthwise again for each channel tile; refused where a block makes one pass
    (dwsep_wgmma does the same with less shared memory) or A does not fit. Config fields:
    those of dwsep_wgmma, and k_blocks."""

    name = "dwsep_wgmma_resident"
    short = "wgmma_res"
    source_file = "dwsep/wgmma_resident.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, producers, stages, filter_size,
                                     k_blocks=k_blocks)
                   for tile_p in (64, 128) for tile_n in (128, 256) for producers in (1, 2)
                   for stages in (2, 3, 4, 6) for filter_size in (3, 0) for k_blocks in (1, 2, 4)]
        # six stages (the copies of four in flight) only for 128 channels: 16 KB a stage
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and (c["stages"] < 6 or c["tile_n"] == 128)
                and self.resident_bytes(c, 1) <= SMEM_OPT_IN]

    stage_barriers = False  # an mbarrier per stage after the rows' descriptors (BULK)

    def bulk(self, c: dict[str, Any]) -> bool:
        """Whether the instance's stages arrive by bulk copies (and have mbarriers)."""
        return self.stage_barriers

    def resident_bytes(self, c: dict[str, Any], chunk_count: int) -> int:
        """1 KB to align the tiles, the weight's stages, the resident A (tile_p rows of 128
        bytes per chunk of 64 channels), the rows' descriptors and any stage barriers."""
        return (1024 + 128 * (c["stages"] * c["tile_n"] + chunk_count * c["tile_p"])
                + 12 * c["tile_p"] + (8 + 8 * c["stages"] if self.bulk(c) else 0))

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        return self.resident_bytes(c, -(-p.MC // 64))

    def refuses_passes(self, c: dict[str, Any], p: DwsepProblem) -> str | None:
        """Why the channel tiles do not suit the k_blocks blocks of a pixel tile, if so."""
        tiles_k = -(-p.K // c["tile_n"])
        if tiles_k <= c["k_blocks"]:
            return (f"K={p.K} makes {tiles_k} pass(es) of {c['tile_n']} for k_blocks="
                    f"{c['k_blocks']}: one pass a block is dwsep_wgmma's, with less shared memory")
        return None

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        reason = self.refuses_passes(c, p)
        if reason:
            return reason
        need = self.shared_bytes(c, p)
        if need > SMEM_OPT_IN:
            return f"needs {need} bytes of shared memory for MC={p.MC}, above {SMEM_OPT_IN}"
        return super().refuses(instance, p)


class PackedWeight:
    """For the families whose weight stages arrive by bulk copies: a first launch packs the
    pointwise weight into the stages' own image ([K tiles][chunks][tile_n swizzled rows of 128
    bytes], in the workspace; dwsep_bulk.cuh), which the main launch reads instead of w_pw.
    The timed interval holds both launches."""

    @staticmethod
    def packed_tiles(c: dict[str, Any], p: DwsepProblem) -> int:
        return -(-p.K // c["tile_n"]) * -(-p.MC // 64)

    def workspace_bytes(self, instance: Instance, problem: DwsepProblem) -> int:
        return self.packed_tiles(instance.settings, problem) * instance.settings["tile_n"] * 128

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        c = instance.settings
        pieces = self.packed_tiles(c, problem) * c["tile_n"] * 8
        pack = Launch(f"{self.name}_pack", (-(-pieces // 256), 1, 1), (256, 1, 1),
                      ("w_pw", "workspace", dwsep_params(problem)))
        [main] = super().launches(instance, problem)
        return [pack, replace(main, args=tuple("workspace" if a == "w_pw" else a
                                                  for a in main.args))]


class DwsepWgmmaBulk(PackedWeight, DwsepWgmmaResident):
    """dwsep_wgmma_resident with the pointwise weight packed by a first launch into the stages'
    own image (PackedWeight), so that each stage arrives by one bulk copy on the TMA engine,
    issued by one producer thread and awaited on the stage's mbarrier, instead of tile_n x 8
    cp.async spread over the producers (wgmma_resident.cu with BULK). Config fields:
    dwsep_wgmma_resident's."""

    name = "dwsep_wgmma_bulk"
    short = "wgmma_bulk"
    stage_barriers = True

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "BULK": 1}


class DwsepWgmmaBulkStaged(DwsepWgmmaBulk):
    """dwsep_wgmma_bulk whose first pass reads each chunk's input rows under the block's pixels
    staged in shared memory, as dwsep_wgmma_staged's producers do (wgmma_resident.cu with BULK
    and STAGED): copied by cp.async two chunks ahead of the fill with the chunk's taps, scales
    and shifts; the 3x3 and 5x5 depthwise on the tensor cores. Three input buffers of
    staged_rows x W pixels after the resident tile; refused where they do not fit. Config
    fields: dwsep_wgmma_resident's (filter 3, 5 or 0)."""

    name = "dwsep_wgmma_bulk_staged"
    short = "wgmma_bulk_staged"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """dwsep_wgmma_resident's, and each 3x3 one compiled for 5x5 filters too."""
        configs = super().configs(operator)
        return configs + [{**c, "filter": 5} for c in configs if c["filter"] == 3]

    def filter_case(self, p: DwsepProblem) -> int:
        return StagedInput.tc_filter_case(p)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "STAGED": 1}

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        """dwsep_wgmma_bulk's, 16 bytes to align, three input buffers and a 16-byte zero row."""
        inputs = RESIDENT_INPUT_BUFFERS * StagedInput.input_buffer_bytes(c, p)
        return super().shared_bytes(c, p) + 16 + inputs + 16


class DwsepWgmmaCluster(DwsepWgmmaBulk):
    """dwsep_wgmma_resident with the k_blocks blocks of a pixel tile joined in a thread-block
    cluster that computes the tile's depthwise once between them (wgmma_resident.cu with
    K_SHARE): the producers of each block compute every k_blocks-th chunk of 64 channels and
    store it into the resident A of every block of the cluster (distributed shared memory),
    then each block runs its passes over all chunks. For wide C and K with few pixel tiles,
    where dwsep_wgmma_resident's k_blocks blocks each compute the whole depthwise and
    dwsep_wgmma computes it again for every channel tile. `bulk` 1 brings the weight's stages
    by bulk copies as dwsep_wgmma_bulk does; `staged` 1 computes the chunks from input rows
    staged in shared memory as dwsep_wgmma_bulk_staged does (3x3 on the tensor cores), three
    buffers laid over the weight's stages, which the passes have not begun to use. Refused
    where the channel tiles are fewer than k_blocks, or the staged buffers do not fit over the
    stages. Config fields: those of dwsep_wgmma_resident (k_blocks 2 or 4: the cluster), bulk
    and staged."""

    name = "dwsep_wgmma_cluster"
    short = "wgmma_cl"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, 2, stages, filter_size,
                                     k_blocks=k_blocks, bulk=bulk, staged=staged)
                   for tile_p in (64, 128) for tile_n in (128, 256) for stages in (3, 4, 6)
                   for filter_size in (3, 0) for k_blocks in (2, 4) for bulk in (0, 1)
                   for staged in (0, 1)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and (c["stages"] < 6 or c["tile_n"] == 128)
                and self.resident_bytes(c, 1) <= SMEM_OPT_IN]

    def defines(self, instance: Instance) -> dict[str, int | str]:
        c = instance.settings
        return {**super().defines(instance), "BULK": int(self.bulk(c)), "K_SHARE": c["k_blocks"],
                "STAGED": c["staged"]}

    def bulk(self, c: dict[str, Any]) -> bool:
        return bool(c["bulk"])

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem) -> int:
        """dwsep_wgmma_resident's, and with `staged` 16 bytes to align and a 16-byte zero row
        (the input buffers lie over the stages)."""
        return super().shared_bytes(c, p) + (32 if c["staged"] else 0)

    def input_room(self, c: dict[str, Any]) -> int:
        """The most staged input pixels (rows x W) whose three buffers fit over the stages."""
        stages = c["stages"] * c["tile_n"] * 128
        return ((stages - RESIDENT_INPUT_BUFFERS * StagedInput.param_bytes(c))
                // (RESIDENT_INPUT_BUFFERS * StagedInput.PIXEL_BYTES))

    def workspace_bytes(self, instance: Instance, problem: DwsepProblem) -> int:
        return super().workspace_bytes(instance, problem) if self.bulk(instance.settings) else 0

    def launches(self, instance: Instance, problem: DwsepProblem) -> list[Launch]:
        if self.bulk(instance.settings):
            return super().launches(instance, problem)
        return DwsepFamily.launches(self, instance, problem)

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        if c["staged"]:
            rows = StagedInput.staged_rows(c, p)
            if rows * p.W > self.input_room(c):
                return (f"its staged input rows ({rows} of W={p.W}) do not fit three times "
                        f"over its {c['stages']} stages")
        return super().refuses(instance, p)

    def refuses_passes(self, c: dict[str, Any], p: DwsepProblem) -> str | None:
        """A block may make one pass (the grid's y is k_blocks exactly), not none."""
        tiles_k = -(-p.K // c["tile_n"])
        if tiles_k < c["k_blocks"]:
            return (f"K={p.K} makes {tiles_k} channel tile(s) of {c['tile_n']}: fewer than the "
                    f"cluster's k_blocks={c['k_blocks']}")
        return None


class DwsepWgmmaRing(PackedWeight, StagedInput, DwsepWgmma):
    """The wide pairs' depthwise once per pixel tile without a resident copy of every channel
    (wgmma_ring.cu): k_share blocks, a thread-block cluster, own a tile of tile_p pixels and
    k_share consecutive tiles of tile_n output channels, one each. Chunk c of 64 channels is
    computed by the cluster's block c % k_share from input rows staged in shared memory (3x3
    and 5x5 on the tensor cores) into a ring of a_stages A tiles and sent to the same stage of
    every block by bulk copies (shared memory to shared memory), with mbarriers of cluster
    scope handing the stages round; the weight tiles arrive in a ring of their own (stages)
    by bulk copies from the weight packed by a first launch (PackedWeight). So any C fits,
    the depthwise overlaps the wgmma, and a block computes 1 / k_share of it. Refused where
    the cluster has more blocks than the channel tiles or the chunks, or the staged buffers
    do not fit. Config fields: those of dwsep_wgmma (stages: the weight's, 3 or 4 of 128
    channels, 2 or 3 of 256; filter 3, 5 or 0), a_stages (4 or 8) and k_share (2, 3, 4 or
    8)."""

    name = "dwsep_wgmma_ring"
    short = "wgmma_ring"
    source_file = "dwsep/wgmma_ring.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        configs = [self.wgmma_config(tile_p, tile_n, producers, stages, filter_size,
                                     a_stages=a_stages, k_share=k_share)
                   for tile_p, tile_n, producers in ((64, 128, 2), (64, 256, 2), (128, 128, 1),
                                                     (128, 256, 1))
                   for stages in ((3, 4) if tile_n == 128 else (2, 3)) for a_stages in (4, 8)
                   for filter_size in (3, 5, 0) for k_share in (2, 3, 4, 8)]
        return [c for c in configs if self.threads(c) <= self.MAX_THREADS
                and self.shared_bytes(c, None) <= SMEM_OPT_IN]

    def defines(self, instance: Instance) -> dict[str, int | str]:
        values = super().defines(instance)
        values.pop("STAGED")  # always staged
        return values

    def grid(self, c: dict[str, Any], p: DwsepProblem) -> tuple[int, int]:
        """(pixel tiles, channel tiles rounded up to whole clusters)."""
        tiles, tiles_k = DwsepWgmma.grid(self, c, p)
        return tiles, -(-tiles_k // c["k_share"]) * c["k_share"]

    def input_buffers(self, c: dict[str, Any]) -> int:
        """wgmma_ring.cu's INPUT_BUFFERS (INPUT_LEAD + 1), whatever the stages."""
        return 3

    def shared_bytes(self, c: dict[str, Any], p: DwsepProblem | None) -> int:
        """1 KB to align, the weight's and A's stages, the rows' descriptors, 8 bytes to align
        and the mbarriers (two an A stage, one a weight stage), 16 to align, and for a problem
        the staged input buffers; a 16-byte zero row."""
        inputs = 0 if p is None else self.input_buffers(c) * self.input_buffer_bytes(c, p)
        return (1024 + 128 * (c["stages"] * c["tile_n"] + c["a_stages"] * c["tile_p"])
                + 12 * c["tile_p"] + 8 + 8 * (2 * c["a_stages"] + c["stages"]) + 16 + inputs
                + 16)

    def refuses(self, instance: Instance, p: DwsepProblem) -> str | None:
        c = instance.settings
        tiles_k, count = -(-p.K // c["tile_n"]), -(-p.MC // 64)
        if tiles_k < c["k_share"]:
            return (f"K={p.K} makes {tiles_k} channel tile(s) of {c['tile_n']}: fewer than the "
                    f"cluster's k_share={c['k_share']} blocks")
        if count < c["k_share"]:
            return (f"MC={p.MC} has {count} chunks of 64: fewer than the cluster's "
                    f"k_share={c['k_share']} blocks")
        return super().refuses(instance, p)


FAMILY = register(DwsepChunked())
RESIDENT_FAMILY = register(DwsepResident())
STREAM_FAMILY = register(DwsepStream())
HALO_FAMILY = register(DwsepHalo())
HALO_TC_FAMILY = register(DwsepHaloTc())
WGMMA_FAMILY = register(DwsepWgmma())
WGMMA_SPLIT_FAMILY = register(DwsepWgmmaSplit())
WGMMA_SPLIT_STAGED_FAMILY = register(DwsepWgmmaSplitStaged())
WGMMA_STAGED_FAMILY = register(DwsepWgmmaStaged())
WGMMA_RESIDENT_FAMILY = register(DwsepWgmmaResident())
WGMMA_BULK_FAMILY = register(DwsepWgmmaBulk())
WGMMA_BULK_STAGED_FAMILY = register(DwsepWgmmaBulkStaged())
WGMMA_CLUSTER_FAMILY = register(DwsepWgmmaCluster())
WGMMA_RING_FAMILY = register(DwsepWgmmaRing())
__all__ = ["DwsepChunked", "DwsepHalo", "DwsepHaloTc", "DwsepResident", "DwsepStream", "DwsepWgmma",
           "DwsepWgmmaBulk", "DwsepWgmmaBulkStaged", "DwsepWgmmaCluster", "DwsepWgmmaResident", "DwsepWgmmaRing", "DwsepWgmmaSplit", "DwsepWgmmaSplitStaged", "DwsepWgmmaStaged",
           "StagedInput", "FAMILY", "HALO_FAMILY", "HALO_TC_FAMILY",
           "RESIDENT_FAMILY", "STREAM_FAMILY", "WGMMA_BULK_FAMILY", "WGMMA_BULK_STAGED_FAMILY", "WGMMA_CLUSTER_FAMILY", "WGMMA_FAMILY", "WGMMA_RING_FAMILY",
           "WGMMA_RESIDENT_FAMILY", "WGMMA_SPLIT_FAMILY", "WGMMA_SPLIT_STAGED_FAMILY",
           "WGMMA_STAGED_FAMILY"]
