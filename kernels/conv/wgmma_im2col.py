"""conv_wgmma_im2col: conv_wgmma's forward and stride-1 backward-data with the gathered operand
(x, or dy) brought by Hopper's im2col bulk tensor copies (conv/wgmma_im2col.cu): one thread
issues both operands' copies a k-tile, where conv_wgmma's producer warpgroup gathers one of
them by cp.async. A k-tile is 64 channels of one filter tap, so the channels it reduces over
(C/G forward, K/G backward-data) are a multiple of 64; the im2col map's bounding box corners
(about the padding and the filter's reach) fit its [-128, 127] and the stride its 1 to 8.
Configurations: conv_wgmma's tiles and pipelines and two of 192 rows (WAVE_TILES), and
`split_k`: 1, or 0 for the slices of the reduction that make the fewest waves of resident
blocks (`slices`; 64-row consumers, the sums ended as conv_wgmma_split ends them; refused where
that is one slice). sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.igemm import GRID_Z_LIMIT, _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import (BLOCK_K, SM_COUNT, TILES, WgmmaConv, blocks_per_sm,
                                generate_configs, shared_bytes, threads)
from kernels.conv.wgmma_split import MIN_SLICE_K_TILES, WgmmaSplitConv, reduction_k_tiles
from kernels.family import Im2col, Instance, Launch, TensorMap, grid_stride_blocks
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
CORNER = (-128, 127)  # an im2col map's corner offsets, 4D tensors
MAX_STRIDE = 8  # an im2col map's element strides
MAX_SLICES = 16
# Beside conv_wgmma's tiles, 192 rows (three consumer warpgroups of 64, 512 threads) by 64 or
# 128: other tile counts for the same rows, so that more layers come to whole waves of 132
# multiprocessors (6,272 rows, a 14x14 map at N = 32, by 256 outputs: 132 tiles of 192 x 64
# where 128 x 128 makes 98).
WAVE_TILES = [(192, 64, 1, 64), (192, 128, 1, 64)]
SLICE_COST = 0.1  # a split's fp32 sums and zeroing, as a share of the unsplit waves' time
# A block's own time beside its k-tiles, in k-tiles: its pipeline's filling and its epilogue
# (Nsight Compute, C512 K512 7x7 3x3 forward on the H200: 64 x 128 tiles in 12 slices of 6
# k-tiles took 7.7 us a wave where the unsplit 72 took 31.3, about 12 k-tiles more a block).
BLOCK_K_TILES = 10


def slices(blocks: int, resident: int, k_tiles: int, most: int) -> int:
    """The slices of a reduction of `k_tiles` that run `blocks` output tiles (every grid z) in
    the least time on `resident` blocks at once: waves ceil(blocks x slices / resident) of a
    slice's k-tiles and BLOCK_K_TILES more, a split SLICE_COST dearer; each slice at least
    MIN_SLICE_K_TILES long, at most `most` (the grid's z) and MAX_SLICES."""
    top = max(1, min(MAX_SLICES, most, k_tiles // MIN_SLICE_K_TILES))
    return min(range(1, top + 1), key=lambda s: (_slice_time(blocks, resident, k_tiles, s), s))


def one_slice(blocks: int, resident: int, k_tiles: int, most: int) -> bool:
    """Whether slices(...) is 1 (no split runs in less time; a tie goes to one slice), stopping
    at the first split that does: the rule keys ask this of every shape."""
    top = max(1, min(MAX_SLICES, most, k_tiles // MIN_SLICE_K_TILES))
    unsplit = _slice_time(blocks, resident, k_tiles, 1)
    return all(_slice_time(blocks, resident, k_tiles, s) >= unsplit for s in range(2, top + 1))


def _slice_time(blocks: int, resident: int, k_tiles: int, s: int) -> float:
    """slices' time of `s` slices: waves of a slice's k-tiles and BLOCK_K_TILES more, a split
    SLICE_COST dearer."""
    return (-(-blocks * s // resident) * (-(-k_tiles // s) + BLOCK_K_TILES)
            * (1 + SLICE_COST * (s > 1)))


def image_map(name: str, channels: int, width: int, height: int, images: int, rows: int,
              window: Im2col) -> TensorMap:
    """An [images][height][width][channels] tensor in im2col mode: `rows` pixels' 64 channels
    a copy."""
    pitch = 2 * channels
    return TensorMap(name, (channels, width, height, images),
                     (pitch, pitch * width, pitch * width * height), (BLOCK_K, rows),
                     im2col=window)


def window(p: ConvProblem) -> Im2col:
    """The im2col bounding box of the A operand's window origins, (W, H) order: forward, the
    origins (o stride - pad) of the P x Q outputs in x; backward-data (stride 1), those
    (i + pad - (R-1) dil) of the H x W inputs in dy, which the reversed taps offset."""
    if p.op == "conv2d_fwd":
        return Im2col(lower=(-p.pad_w, -p.pad_h),
                      upper=((p.Q - 1) * p.stride_w - p.pad_w - (p.W - 1),
                             (p.P - 1) * p.stride_h - p.pad_h - (p.H - 1)),
                      strides=(p.stride_w, p.stride_h))
    shift_w, shift_h = p.pad_w - (p.S - 1) * p.dil_w, p.pad_h - (p.R - 1) * p.dil_h
    return Im2col(lower=(shift_w, shift_h), upper=(p.W - p.Q + shift_w, p.H - p.P + shift_h))


def im2col_refusal(p: ConvProblem) -> str | None:
    """Why the im2col copies cannot serve the shape (whatever the instance), or None: a k-tile
    of 64 channels of one tap, 16-byte stores, stride 1 in backward-data, the map's limits."""
    reduced, stored = (("Cg", "Kg") if p.op == "conv2d_fwd" else ("Kg", "Cg"))
    value = {"Cg": p.c_per_group, "Kg": p.k_per_group}
    if value[reduced] % BLOCK_K:
        return (f"{reduced}={value[reduced]} is not a multiple of {BLOCK_K} (a k-tile is "
                f"{BLOCK_K} channels of one filter tap)")
    if value[stored] % 8:
        return f"{stored}={value[stored]} is not a multiple of 8 (16-byte stores)"
    if p.op == "conv2d_bwd_data" and (p.stride_h, p.stride_w) != (1, 1):
        return "backward-data by im2col copies runs stride 1 only"
    if max(p.stride_h, p.stride_w) > MAX_STRIDE:
        return f"stride above {MAX_STRIDE}, the im2col map's element stride limit"
    box = window(p)
    corners = (*box.lower, *box.upper)
    if not all(CORNER[0] <= c <= CORNER[1] for c in corners):
        return (f"the im2col box corners {corners} leave [{CORNER[0]}, {CORNER[1]}] (padding "
                "or the filter's reach too large)")
    taps = ((p.R - 1) * p.dil_h, (p.S - 1) * p.dil_w)
    if max(taps) > CORNER[1]:
        return f"filter taps up to {max(taps)} apart, above the copy offsets' {CORNER[1]}"
    return None


class WgmmaIm2colConv(WgmmaSplitConv):
    name = "conv_wgmma_im2col"
    short = "wgmma_i2c"
    source_file = "conv/wgmma_im2col.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """conv_wgmma's tiles and pipelines with one producer warpgroup (one thread issues
        every copy), from its tma 2 entries, the key left out; unsplit, and split where the
        consumers have 64 rows (conv_wgmma_split's)."""
        if operator not in OPERATORS:
            return []
        tiles = [{k: v for k, v in c.items() if k != "tma"}
                 for c in generate_configs(operator, TILES + WAVE_TILES)
                 if c["tma"] == 2 and c["producers"] == 1]
        return [{**c, "split_k": split} for split in (1, 0) for c in tiles
                if split or c["wg_m"] == 64]

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """(slices, k-tiles a slice): one, or where split_k is 0 those of `slices`."""
        k_tiles = reduction_k_tiles(p)
        if instance.settings["split_k"]:
            return 1, k_tiles
        z = self.unsplit_z(p)
        wanted = slices(self.tiles(instance, p) * z, SM_COUNT * blocks_per_sm(instance.settings),
                        k_tiles, GRID_Z_LIMIT // z)
        per = _cdiv(k_tiles, wanted)
        return _cdiv(k_tiles, per), per

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        """conv_wgmma's rules with the im2col copies'; a split instance refuses the shapes
        where its slices come to one (the unsplit instances run them)."""
        if instance.settings["split_k"]:
            return WgmmaConv.applicable(self, instance, problem)
        return super().applicable(instance, problem)

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        if instance.settings["split_k"]:
            return 0
        return super().workspace_bytes(instance, problem)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        """conv_wgmma's, with TMA 2 (both operands by tensor maps) and no SPLIT_K (a launch
        setting: the split and unsplit entries share one code object)."""
        return {**{k: v for k, v in super().defines(instance).items() if k != "SPLIT_K"},
                "TMA": 2}

    def operand_refusal(self, instance: Instance, p: ConvProblem) -> str | None:
        return im2col_refusal(p)

    @staticmethod
    def tensor_maps(instance: Instance, p: ConvProblem) -> tuple[TensorMap, ...]:
        """(A's im2col map, the weight's map), the kernel's parameter order."""
        bm, bn = instance.settings["block_m"], instance.settings["block_n"]
        if p.op == "conv2d_fwd":
            crs = p.c_per_group * p.R * p.S
            return (image_map("x", p.C, p.W, p.H, p.N, bm, window(p)),
                    TensorMap("w", (crs, p.K), (2 * crs,), (BLOCK_K, bn)))
        cg = p.c_per_group
        return (image_map("dy", p.K, p.Q, p.P, p.N, bm, window(p)),
                TensorMap("w", (cg, p.S, p.R, p.K), (2 * cg, 2 * cg * p.S, 2 * p.R * p.S * cg),
                          (64, 1, 1, BLOCK_K)))

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        entry, operands = (("wgmma_fwd_im2col", ("x", "w", "y")) if p.op == "conv2d_fwd"
                           else ("wgmma_bwd_data_im2col", ("dy", "w", "dx")))
        grid, block = self.grid(instance, p), (threads(c), 1, 1)
        maps = self.tensor_maps(instance, p)
        if c["split_k"]:
            return [Launch(entry, grid, block, (*operands, conv_params(p), *maps),
                           shared_bytes(c))]
        splits, per = self.splits(instance, p)
        words = self.workspace_bytes(instance, p) // 4
        return [Launch("igemm_zero", (grid_stride_blocks(words, 256), 1, 1), (256, 1, 1),
                       ("workspace", words)),
                Launch(entry + "_split", grid, block,
                       (*operands, "workspace", conv_params(p), per, splits,
                        self.tiles(instance, p), *maps), shared_bytes(c))]


FAMILY = register(WgmmaIm2colConv())
