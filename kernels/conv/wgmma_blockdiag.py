"""conv_wgmma_blockdiag: grouped convolutions of few channels a group (C/G a divisor of 64
below it, C a multiple of 64) on conv_wgmma_im2col's unsplit kernels, as the convolution of
C / 64 super-groups of 64 channels whose filter is block-diagonal (conv/wgmma_blockdiag.cu): a
first launch writes that filter, K x R x S x 64 with zeros off the groups' blocks, into the
workspace; the second runs conv_wgmma_im2col's forward over the super-groups, the im2col
copies bringing 64 channels of a tap at a time. Forward only: backward-data the same way
(stride 1) was verified and measured and was best on none of the grouped layers at N = 32, 8
or 1. The matrix units do 64 / (C/G) times the useful products, which grouped layers, bound
by memory, can afford: the stride-2 grouped layers of 16 and 32 channels a group are where
conv_grouped_mma's mma.sync tiles run at 0.6 to 0.9 of cuDNN. sm_90a only."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_im2col import WgmmaIm2colConv
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register

SUPER = 64  # channels of a super-group: one k-tile of one tap


def blockdiag_refusal(p: ConvProblem) -> str | None:
    """Why the shape has no super-groups of whole groups, or None."""
    cg = p.c_per_group
    if p.G == 1 or cg >= SUPER:
        return f"C/G={cg}: groups of {SUPER} channels or more are conv_wgmma_im2col's own"
    if SUPER % cg:
        return f"C/G={cg} does not divide {SUPER} (a super-group holds whole groups)"
    if p.C % SUPER:
        return f"C={p.C} is not a multiple of {SUPER} (whole super-groups)"
    return None


def supergroups(p: ConvProblem) -> ConvProblem:
    """The shape as C / 64 groups of 64 input channels (K / G' outputs each)."""
    return replace(p, G=p.C // SUPER)


class WgmmaBlockdiagConv(WgmmaIm2colConv):
    name = "conv_wgmma_blockdiag"
    short = "wgmma_bd"
    source_file = "conv/wgmma_blockdiag.cu"
    operators = ("conv2d_fwd",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """conv_wgmma_im2col's unsplit forward configurations (the workspace holds the
        filter)."""
        if operator not in self.operators:
            return []
        return [c for c in super().configs(operator) if c["split_k"]]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        return blockdiag_refusal(problem) or super().applicable(instance, supergroups(problem))

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        return super().grid(instance, supergroups(p))

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return super().waves(instance, supergroups(p))

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """The block-diagonal filter, 16-bit."""
        p = problem
        return 2 * p.K * p.R * p.S * SUPER

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        p, q = problem, supergroups(problem)
        (main,) = super().launches(instance, q)
        chunks = p.K * p.R * p.S * SUPER // 8  # 16 bytes a thread
        expand = Launch("expand_blockdiag", (grid_stride_blocks(chunks, 256), 1, 1),
                        (256, 1, 1), ("w", "workspace", p.K, p.R * p.S, p.c_per_group,
                                      p.k_per_group))
        args = tuple("workspace" if a == "w" else
                     replace(a, buffer="workspace") if getattr(a, "buffer", None) == "w" else a
                     for a in main.args)
        return [expand, replace(main, args=args)]


FAMILY = register(WgmmaBlockdiagConv())
