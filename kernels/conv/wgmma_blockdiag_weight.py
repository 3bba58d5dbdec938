"""conv_wgmma_blockdiag_weight: grouped backward-weight of few channels a group (C/G a divisor
of 64 below it, C a multiple of 64) as conv_wgmma's split backward-weight over C / 64
super-groups of 64 channels (conv/wgmma_blockdiag_weight.cu): each slice stores its fp32 sums
of the super-groups' filter, K x R x S x 64, into a plane of the workspace, and a second launch
sums the planes' diagonal blocks (each output channel's own group) into dw. The matrix units
do 64 / (C/G) times the useful products and every tile is whole: 64 output channels by 64
input channels a filter tap, where conv_wgmma's tiles over one group of 16 channels leave most
of a 64-wide tile empty. Configurations: conv_wgmma_planes' of 64-row tiles (a super-group's
K/G' outputs are 64 where K = C) with the slices that fill the GPU or 4, dy gathered or by TMA
(tma 0 and 1); the rest were best on no grouped layer at N = 32 (docs/BENCHMARKS.md). One
slice included (the planes are the only way to dw here). sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import WgmmaConv
from kernels.conv.wgmma_blockdiag import blockdiag_refusal, supergroups
from kernels.conv.wgmma_planes import PLANES_BYTES, WgmmaPlanesConv, planes_bytes
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register


class WgmmaBlockdiagWeightConv(WgmmaPlanesConv):
    name = "conv_wgmma_blockdiag_weight"
    short = "wgmma_bdw"
    source_file = "conv/wgmma_blockdiag_weight.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [c for c in super().configs(operator)
                if c["block_m"] == 64 and c["split_k"] in (0, 4) and c["tma"] != 2]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        why = blockdiag_refusal(problem)
        if why:
            return why
        q = supergroups(problem)
        why = WgmmaConv.applicable(self, instance, q)
        if why is None and self.workspace_bytes(instance, problem) > PLANES_BYTES:
            return (f"{self.splits(instance, problem)[0]} planes of the super-groups' filter "
                    f"are more than {PLANES_BYTES >> 20} MiB")
        return why

    def splits(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        """The super-groups' slices (supergroups(q) is q: the same for either)."""
        return super().splits(instance, supergroups(p))

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        return super().grid(instance, supergroups(p))

    def waves(self, instance: Instance, p: ConvProblem) -> tuple[int, int]:
        return super().waves(instance, supergroups(p))

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """A plane of the super-groups' fp32 filter a slice (one slice too)."""
        q = supergroups(problem)
        return planes_bytes(q, self.splits(instance, q)[0])

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        p, q = problem, supergroups(problem)
        n, splits = p.tensor_elements()["weight"], self.splits(instance, q)[0]
        total = Launch("sum_blockdiag_planes", (grid_stride_blocks(n, 256), 1, 1), (256, 1, 1),
                       ("workspace", "dw", p.K, p.R * p.S, p.c_per_group, p.k_per_group, splits))
        return [self.split_launch(instance, q, 0), total]


FAMILY = register(WgmmaBlockdiagWeightConv())
