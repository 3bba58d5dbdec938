"""conv_wgmma_blockdiag_bwd_weight: the backward-weight of grouped convolutions of few channels
a group (C/G a divisor of 64 below it, C a multiple of 64) as conv_wgmma_red's split
backward-weight over C / 64 super-groups of 64 channels (conv/wgmma_blockdiag_bwd_weight.cu):
the slices add dw' [K][R][S][64] into the fp32 workspace, whose block diagonal (each output's
own group's channels) is dw, and a last launch (extract_blockdiag) converts that block into dw
in place of igemm_reduce. The matrix units do 64 / (C/G) times the useful products, for the
grouped layers bound by memory, conv_wgmma_blockdiag's forward counterpart. Only the
configurations that end in a launch after the split (fused_reduce 0) and read the input by
threads or dy by a tensor map (tma 0 and 1: tma 2's plain matrices are for one group).
sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_blockdiag import blockdiag_refusal, supergroups
from kernels.conv.wgmma_red import WgmmaRedConv
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register


class WgmmaBlockdiagWeightConv(WgmmaRedConv):
    name = "conv_wgmma_blockdiag_bwd_weight"
    short = "wgmma_bdw"
    source_file = "conv/wgmma_blockdiag_bwd_weight.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [c for c in super().configs(operator)
                if not c["fused_reduce"] and c["tma"] != 2]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        return blockdiag_refusal(problem) or super().applicable(instance, supergroups(problem))

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return super().splits(instance, supergroups(p))

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        return super().grid(instance, supergroups(p))

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return super().waves(instance, supergroups(p))

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """dw' in fp32: K x R x S x 64."""
        return super().workspace_bytes(instance, supergroups(problem))

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        p = problem
        zero, split, _ = super().launches(instance, supergroups(p))
        n = p.K * p.R * p.S * p.c_per_group
        extract = Launch("extract_blockdiag", (grid_stride_blocks(n, 256), 1, 1), (256, 1, 1),
                         ("workspace", "dw", p.K, p.R * p.S, p.c_per_group, p.k_per_group))
        return [zero, split, extract]


FAMILY = register(WgmmaBlockdiagWeightConv())
