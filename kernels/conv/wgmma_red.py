"""conv_wgmma_red: conv_wgmma's split backward-weight with the slices' fp32 sums added by
reductions that return nothing (red.global.add, conv/wgmma_red.cu), where conv_wgmma's split
epilogue compiles to returning atomics that each wait for L2's reply. Only the split
configurations (split_k other than 1); a shape whose split resolves to one slice is conv_wgmma's
own. sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import WgmmaConv
from kernels.family import Instance
from kernels.registry import register

OPERATORS = ("conv2d_bwd_weight",)


class WgmmaRedConv(WgmmaConv):
    name = "conv_wgmma_red"
    short = "wgmma_red"
    source_file = "conv/wgmma_red.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        if operator not in OPERATORS:
            return []
        return [c for c in super().configs(operator) if c["split_k"] != 1]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        why = super().applicable(instance, problem)
        if why is None and self.splits(instance, problem)[0] == 1:
            return "the reduction is not split here: conv_wgmma's instance is the same kernel"
        return why


FAMILY = register(WgmmaRedConv())
