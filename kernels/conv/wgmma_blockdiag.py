"""conv_wgmma_blockdiag: grouped convolutions whose groups are not whole k-tiles of 64 channels
on conv_wgmma_im2col's unsplit kernels, as the convolution of super-groups (`per` whole groups
of C/G below 64 channels, at most 64 together; one group above 64), each padded to whole
k-tiles of 64 channels a tap, whose filter is block-diagonal (conv/wgmma_blockdiag.cu): a first
launch writes that filter, K x R x S x the padded width with zeros off the groups' blocks, into
the workspace; the second runs conv_wgmma_im2col's forward over the super-groups, each k-tile's
im2col copy bringing 64 channels of a tap from the super-group's (those past its own meet zeros;
those past C are the copy's zero fill). So any group width of whole 8-channel runs is served
(regular networks' 24, 56, 112, 168 as well as the divisors of 64), C a multiple of 8. Forward
only: backward-data the same way (stride 1, super-groups of 64 channels) was verified and
measured and was best on none of the grouped layers at N = 32, 8 or 1. The matrix units do up
to 64 / (C/G) times the useful products, which grouped layers, bound by memory, can afford:
the stride-2 grouped layers of 16 and 32 channels a group are where conv_grouped_mma's mma.sync
tiles run at 0.6 to 0.9 of cuDNN. Configurations: conv_wgmma_im2col's unsplit tiles, with the
filter expanded by the first launch (fused_filter 0) or each k-tile's filter tile copied
straight from w (fused_filter 1: one launch, no workspace), a box of K/G rows a group starting
at channel -slot C/G, so that the copy's zero fill writes the zeros around the group's block;
more boxes a k-tile, which the small maps' single launch repays and the large ones' do not.
sm_90a only."""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import Any

from kernels.conv.params import ConvParams, conv_params
from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import BLOCK_K
from kernels.conv.wgmma_im2col import WgmmaIm2colConv, image_map, window
from kernels.family import Instance, Launch, TensorMap, grid_stride_blocks
from kernels.registry import register

SUPER = 64  # channels of a super-group: one k-tile of one tap


def groups_per_super(p: ConvProblem) -> int:
    """The groups a forward super-group holds: below 64 channels a group, the most whose
    channels fit one k-tile of 64 with their channels and their outputs whole 16-byte runs (8
    channels); above, one group of whole runs; else 0 (64 channels a group or a multiple of
    64 are conv_wgmma_im2col's own)."""
    return 0 if p.G == 1 else _groups_per_super(p.c_per_group, p.k_per_group)


@lru_cache(maxsize=1 << 12)
def _groups_per_super(cg: int, kg: int) -> int:
    if cg % SUPER == 0:
        return 0
    if cg > SUPER:
        return 1 if cg % 8 == 0 and kg % 8 == 0 else 0
    return next((n for n in range(SUPER // cg, 0, -1) if n * cg % 8 == 0 and n * kg % 8 == 0),
                0)


def padded_width(p: ConvProblem) -> int:
    """A super-group's channels padded to whole k-tiles of 64: the channels a tap reduces."""
    return -(-groups_per_super(p) * p.c_per_group // SUPER) * SUPER


def padded_refusal(p: ConvProblem) -> str | None:
    """Why the forward has no super-groups (groups_per_super), or None."""
    cg = p.c_per_group
    if p.G == 1 or cg % SUPER == 0:
        return f"C/G={cg}: groups of a multiple of {SUPER} channels are conv_wgmma_im2col's own"
    if not groups_per_super(p):
        return (f"C/G={cg}, K/G={p.k_per_group}: no super-group whose channels and outputs are "
                "whole 8-channel runs")
    if p.C % 8 or p.K % 8:
        return f"C={p.C}, K={p.K}: not multiples of 8 (16-byte rows of x and y)"
    return None


def padded(p: ConvProblem) -> ConvProblem:
    """The forward's super-groups as a grouped shape: G' of them, each per Cg channels padded
    to whole k-tiles of 64 (padded_width) and per Kg outputs (the grid and the tiles are this
    shape's; the kernels read and write the real tensors). A shape whose groups are whole
    k-tiles is its own: the base's methods call this family's with the view."""
    per = groups_per_super(p)
    if not per:
        return p
    count = -(-p.G // per)
    return p.view(G=count, C=count * padded_width(p), K=count * per * p.k_per_group)


def padded_params(p: ConvProblem) -> ConvParams:
    """The kernel's ConvParams: the real C and K, G' super-groups of per Cg channels from
    g per Cg on and per Kg outputs (the last ending at K)."""
    per, params = groups_per_super(p), conv_params(p)
    params.G, params.Cg, params.Kg = -(-p.G // per), per * p.c_per_group, per * p.k_per_group
    return params


class WgmmaBlockdiagConv(WgmmaIm2colConv):
    name = "conv_wgmma_blockdiag"
    short = "wgmma_bd"
    source_file = "conv/wgmma_blockdiag.cu"
    operators = ("conv2d_fwd",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """conv_wgmma_im2col's unsplit forward configurations, the filter expanded into the
        workspace by a first launch (fused_filter 0) or its tiles copied from w (1)."""
        if operator not in self.operators:
            return []
        unsplit = [c for c in super().configs(operator) if c["split_k"]]
        return [{**c, "fused_filter": fused} for fused in (0, 1) for c in unsplit]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        return (padded_refusal(problem) or self.fused_refusal(instance, problem)
                or super().applicable(instance, padded(problem)))

    @staticmethod
    def fused_refusal(instance: Instance, p: ConvProblem) -> str | None:
        """Why w's tiles cannot be copied straight into the filter tile, or None: with more
        than one group a super-group, a box of K/G rows a group, each 1024-byte aligned (whole
        8-row swizzle atoms), the tile's rows whole boxes and w's rows of C/G channels whole
        16-byte runs (a tensor map's strides)."""
        per, kg, bn = groups_per_super(p), p.k_per_group, instance.settings["block_n"]
        if not instance.settings["fused_filter"] or per <= 1:
            return None
        if p.c_per_group % 8:
            return (f"C/G={p.c_per_group}: w's rows are not 16-byte multiples, which a tensor "
                    "map's strides must be (fused_filter)")
        if kg % 8 or bn % kg:
            return (f"K/G={kg}: the filter tile's {bn} rows are not whole boxes of K/G rows "
                    "of 8-row multiples (fused_filter)")
        return None

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        return super().grid(instance, padded(p))

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return super().waves(instance, padded(p))

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """The block-diagonal filter, 16-bit (none where its tiles come from w)."""
        p = problem
        return 0 if instance.settings["fused_filter"] else 2 * p.K * p.R * p.S * padded_width(p)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        p, c = problem, instance.settings
        width, per = padded_width(p), groups_per_super(p)
        (main,) = super().launches(instance, padded(p))
        rows = image_map("x", p.C, p.W, p.H, p.N, c["block_m"], window(p))
        if c["fused_filter"]:  # w [K][R][S][C/G] as (C/G, R S, K, 1): a group's box
            cg, rs = p.c_per_group, p.R * p.S
            filt = TensorMap("w", (cg, rs, p.K, 1), (2 * cg, 2 * cg * rs, 2 * cg * rs * p.K),
                             (BLOCK_K, 1, c["block_n"] if per == 1 else p.k_per_group, 1))
            return [replace(main, entry="wgmma_fwd_blockdiag",
                            args=("x", "w", "y", padded_params(p), per, rows, filt))]
        chunks = p.K * p.R * p.S * width // 8  # 16 bytes a thread
        expand = Launch("expand_blockdiag", (grid_stride_blocks(chunks, 256), 1, 1),
                        (256, 1, 1), ("w", "workspace", p.K, p.R * p.S, p.c_per_group,
                                      p.k_per_group, per, width))
        taps = width * p.R * p.S
        filt = TensorMap("workspace", (taps, p.K), (2 * taps,), (BLOCK_K, c["block_n"]))
        return [expand, replace(main, entry="wgmma_fwd_blockdiag",
                                args=("x", "workspace", "y", padded_params(p), per, rows, filt))]


FAMILY = register(WgmmaBlockdiagConv())
