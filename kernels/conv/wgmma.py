"""conv_wgmma: implicit-GEMM grouped convolution on Hopper's warpgroup matrix instructions
(sm_90a), every direction, warp-specialized: producer warpgroups gather k-tiles of 64 by
cp.async into 128-byte-swizzled stages, block_m / wg_m consumer warpgroups run wgmma on them
and hold the accumulators (conv/wgmma.cu); blocks are persistent, as many as the GPU holds, each
taking every gridDim.x-th tile. The GEMM view and backward-weight split-K are conv_igemm's.
Channels a group a multiple of 8 (16-byte copies), bf16 and fp16; sm_90a only (on other
targets its pairs are unsupported, never compiled).

Configuration: block_m x block_n (64 to 256 by 64 to 256), block_k 64, `wg_m` rows a
consumer warpgroup computes (64 or 128), `stages` shared memory stages (dynamic, up to
227 KB), `producers` warpgroups, `tma` and, for backward-weight, `split_k` slices of the
reduction (0: as many as fill the GPU) ended by `fused_reduce` in the kernel (the last slice
of a tile converts it) or by a third launch. tma 1: the operand that is a plain strided tensor
(the weight in fwd and bwd_data, dy in bwd_weight) arrives by TMA bulk tensor copies (a tensor
map per launch) instead of cp.async; tma 2: the other operand too (x in fwd and bwd_weight, dy
in bwd_data), for 1x1 convolutions of stride 1 without padding or groups, where it is a plain
[N*H*W][channels] matrix. backward-data's TMA weight needs K/G a multiple of 64 (one filter
tap a k-tile) with tma 1; with tma 2 (one tap, one group) the k-tiles past K are the tensor
map's zeros.
"""

from __future__ import annotations

from typing import Any

from kernels.conv.igemm import VECTOR_CHANNELS, IGemmConv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, Launch, TensorMap, grid_stride_blocks
from kernels.registry import register

BLOCK_K = 64
MAX_STAGES = 7  # named barriers: 2 per stage of the 15 a block has beside __syncthreads
SMEM_OPT_IN = 227 * 1024
ALIGN = 1024
# (block_m, block_n, producers, wg_m): one or two consumer warpgroups of wg_m rows each (one
# or two m64 wgmma a k-step); a consumer's 128 accumulators a thread (64 x 256 or 128 x 128)
# only in blocks of at most 384 threads (168 registers each). The 256-row tiles read the
# fewest bytes from L2 per FLOP where N is 128: the bound of the 128 x 128 tiles on an H100
# (about 25 bytes a cycle a multiprocessor, measured by Nsight Compute on this family).
TILES = [(128, 256, 1, 64), (128, 128, 1, 64), (128, 64, 1, 64), (64, 256, 1, 64),
         (64, 128, 1, 64), (64, 64, 1, 64), (128, 128, 2, 64), (64, 128, 2, 64),
         (64, 256, 2, 64), (256, 128, 1, 128), (256, 64, 1, 128), (128, 128, 1, 128)]
SPLITS = (0, 1, 4, 16, 64)  # 0: the slices that fill the GPU (WgmmaConv.splits)
SMALLEST = 64
TMA_MODES = (0, 1, 2)  # every direction
BARRIER_BYTES = 64  # the stages' mbarriers
SM_SHARED = 228 * 1024
SM_REGISTERS = 65536


def shared_bytes(config: dict[str, Any]) -> int:
    c = config
    return ALIGN + c["stages"] * (c["block_m"] + c["block_n"]) * BLOCK_K * 2 + BARRIER_BYTES


def threads(config: dict[str, Any]) -> int:
    return 128 * (config["block_m"] // config["wg_m"] + config["producers"])


def generate_configs(op: str, tiles: list[tuple[int, int, int, int]] = TILES
                     ) -> list[dict[str, Any]]:
    """Per tile (of `tiles`) the deepest pipeline that fits and three stages (less shared
    memory: two blocks a multiprocessor where the registers allow it)."""
    out = []
    for bm, bn, producers, wg_m in tiles:
        stage = (bm + bn) * BLOCK_K * 2
        deepest = min(MAX_STAGES, (SMEM_OPT_IN - ALIGN - BARRIER_BYTES) // stage)
        for stages in sorted({deepest, min(deepest, 3)}, reverse=True):
            for tma in TMA_MODES:
                config = {"block_m": bm, "block_n": bn, "block_k": BLOCK_K, "wg_m": wg_m,
                          "stages": stages, "producers": producers, "tma": tma}
                if op != "conv2d_bwd_weight":
                    out.append(config)
                else:  # a split reduction ends in the kernel (fused_reduce) or in a launch
                    out += [{**config, "split_k": s, "fused_reduce": fused}
                            for s in SPLITS for fused in ((0, 1) if s != 1 else (0,))]
    return out


def blocks_per_sm(config: dict[str, Any]) -> int:
    """Blocks one multiprocessor holds: shared memory, threads, and registers estimated from the
    consumers' accumulators (wg_m / 64 * block_n / 2 a thread) and 64 more (ptxas: 58 to 158
    in all)."""
    regs = config["wg_m"] // 64 * config["block_n"] // 2 + 64
    by_regs = SM_REGISTERS // (threads(config) * regs)
    return max(1, min(SM_SHARED // (shared_bytes(config) + 1024), 2048 // threads(config),
                      by_regs))


def filling_splits(resident: int, tiles: int, groups: int) -> int:
    """The slices that fill the GPU (split_k 0): at most as many blocks as it holds at once
    (`resident`), over the tiles of every group."""
    return max(1, resident // (tiles * groups))


class WgmmaConv(IGemmConv):
    name = "conv_wgmma"
    short = "wgmma"
    source_file = "conv/wgmma.cu"
    targets = ("sm_90a",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs(operator)

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        """conv_igemm's, less BLOCK_K (always 64) and FUSED_REDUCE (a launch argument)."""
        return {k: v for k, v in super().defines(instance).items()
                if k not in ("BLOCK_K", "FUSED_REDUCE")}

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """Persistent blocks: as many as the GPU holds at once, at most one a tile."""
        c = instance.settings
        return (min(self.tiles(instance, p), SM_COUNT * blocks_per_sm(c)), 1,
                self.grid_z(instance, p))

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(tiles of every grid z slice, the blocks the GPU holds at once)."""
        return (self.tiles(instance, p) * self.grid_z(instance, p),
                SM_COUNT * blocks_per_sm(instance.settings))

    def operand_refusal(self, instance: Instance, p: ConvProblem) -> str | None:
        """Channels for 16-byte copies and paired stores, and the TMA modes' layouts."""
        for name in VECTOR_CHANNELS[p.op] + (("Kg",) if p.op == "conv2d_fwd" else ()):
            value = p.c_per_group if name == "Cg" else p.k_per_group
            if value % 8:
                return f"{name}={value} is not a multiple of 8 (16-byte copies, paired stores)"
        tma = instance.settings["tma"]
        if tma == 2 and (p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.G) != (
                1, 1, 1, 1, 0, 0, 1):
            return ("tma=2 reads the input as a plain matrix: 1x1, stride 1, no padding, G=1 "
                    "only")
        if tma == 1 and p.op == "conv2d_bwd_data" and p.k_per_group % BLOCK_K:
            return f"tma=1 in bwd_data needs Kg a multiple of {BLOCK_K} (Kg={p.k_per_group})"
        return None

    def smallest_tiles(self, op: str) -> tuple[int, int]:
        return SMALLEST, SMALLEST

    @staticmethod
    def tensor_maps(instance: Instance, p: ConvProblem) -> tuple[TensorMap, ...]:
        """The launch's tensor maps, in the kernel's parameter order (A's, then B's)."""
        c, tma, crs = instance.settings, instance.settings["tma"], p.c_per_group * p.R * p.S

        def plain(name: str, channels: int, pixels: int, rows: int) -> TensorMap:
            """A [pixels][channels] tensor as a matrix: boxes of 64 channels by `rows`."""
            return TensorMap(name, (channels, pixels), (2 * channels,), (BLOCK_K, rows))

        x, dy = ("x", p.C, p.N * p.H * p.W), ("dy", p.K, p.N * p.P * p.Q)
        if not tma:
            return ()
        if p.op == "conv2d_fwd":
            weight = TensorMap("w", (crs, p.K), (2 * crs,), (BLOCK_K, c["block_n"]))
            return (weight,) if tma == 1 else (plain(*x, c["block_m"]), weight)
        if p.op == "conv2d_bwd_data":
            cg = p.c_per_group
            weight = TensorMap("w", (cg, p.S, p.R, p.K), (2 * cg, 2 * cg * p.S, 2 * crs),
                               (64, 1, 1, BLOCK_K))
            return (weight,) if tma == 1 else (plain(*dy, c["block_m"]), weight)
        return (plain(*dy, BLOCK_K),) if tma == 1 else (plain(*dy, BLOCK_K), plain(*x, BLOCK_K))

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        block, smem = (threads(c), 1, 1), shared_bytes(c)
        grid, params, maps = self.grid(instance, p), conv_params(p), self.tensor_maps(instance, p)
        if p.op == "conv2d_fwd":
            return [Launch("conv2d_fwd", grid, block, ("x", "w", "y", params, *maps), smem)]
        if p.op == "conv2d_bwd_data":
            return [Launch("conv2d_bwd_data", grid, block, ("dy", "w", "dx", params, *maps),
                           smem)]
        splits, per = self.splits(instance, p)
        if splits == 1:
            return [Launch("conv2d_bwd_weight", grid, block, ("x", "dy", "dw", params, *maps),
                           smem)]
        words, fused = self.workspace_bytes(instance, p) // 4, c["fused_reduce"]
        small = (grid_stride_blocks(words, 256), 1, 1)
        launches = [Launch("igemm_zero", small, (256, 1, 1), ("workspace", words)),
                    self.split_launch(instance, p, fused)]
        if fused:
            return launches
        n = p.tensor_elements()["weight"]
        return launches + [Launch("igemm_reduce", (grid_stride_blocks(n, 256), 1, 1),
                                  (256, 1, 1), ("workspace", "dw", n))]

    def split_launch(self, instance: Instance, p: ConvProblem, fused: int) -> Launch:
        """Backward-weight's split entry (wgmma_bwd_weight_split): each slice's fp32 sums into
        the workspace, ended in the kernel where `fused` is 1."""
        c, (splits, per) = instance.settings, self.splits(instance, p)
        return Launch("wgmma_bwd_weight_split", self.grid(instance, p), (threads(c), 1, 1),
                      ("x", "dy", "dw", "workspace", conv_params(p), per, splits, fused,
                       *self.tensor_maps(instance, p)), shared_bytes(c))

    def requested_splits(self, instance: Instance, p: ConvProblem) -> int:
        """split_k, where 0 asks for the slices that fill the GPU: at most as many blocks as
        it holds at once, over the tiles of every group."""
        c = instance.settings
        if c.get("split_k") != 0:
            return super().requested_splits(instance, p)
        return filling_splits(SM_COUNT * blocks_per_sm(c), self.tiles(instance, p), p.G)

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """Split backward-weight: the fp32 sums of dw and, with fused_reduce, an int counter per
        tile of each group (the slices that have added theirs)."""
        p = problem
        if p.op != "conv2d_bwd_weight" or self.splits(instance, p)[0] == 1:
            return 0
        counters = p.G * self.tiles(instance, p) if instance.settings["fused_reduce"] else 0
        return 4 * (p.tensor_elements()["weight"] + counters)


FAMILY = register(WgmmaConv())
