"""conv_wgmma_planes: conv_wgmma's split backward-weight with each slice's fp32 sums stored
into a plane of its own in the workspace (conv/wgmma_planes.cu), then summed into dw by a
second launch (sum_planes), where conv_wgmma zeroes the workspace in a first launch and adds
the slices' sums into it by atomics. Two launches in place of three, plain stores, and dw the
same bit for bit on every run. The workspace holds a plane a slice (in L2 on the layers whose
split pays). Only the configurations that end in a launch after the split (fused_reduce 0);
a shape whose split resolves to one slice is conv_wgmma's own, and one whose planes would
pass PLANES_BYTES (half an H100's L2) is left to conv_wgmma_red. sm_90a only."""

from __future__ import annotations

from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma_red import WgmmaRedConv
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register

PLANES_BYTES = 25 << 20


def planes_bytes(problem: ConvProblem, slices: int) -> int:
    """The workspace of `slices` planes: an fp32 dw each."""
    return 4 * problem.tensor_elements()["weight"] * slices


class WgmmaPlanesConv(WgmmaRedConv):
    name = "conv_wgmma_planes"
    short = "wgmma_pl"
    source_file = "conv/wgmma_planes.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return [c for c in super().configs(operator) if not c["fused_reduce"]]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        why = super().applicable(instance, problem)
        if why is None and self.workspace_bytes(instance, problem) > PLANES_BYTES:
            return (f"{self.splits(instance, problem)[0]} planes of dw are more than "
                    f"{PLANES_BYTES >> 20} MiB: conv_wgmma_red's atomics")
        return why

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        """A plane of fp32 sums a slice."""
        splits = self.splits(instance, problem)[0]
        return 0 if splits == 1 else planes_bytes(problem, splits)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        _, split, _ = super().launches(instance, problem)
        n, planes = problem.tensor_elements()["weight"], self.splits(instance, problem)[0]
        return [split, Launch("sum_planes", (grid_stride_blocks(n, 256), 1, 1), (256, 1, 1),
                              ("workspace", "dw", n, planes))]


FAMILY = register(WgmmaPlanesConv())
