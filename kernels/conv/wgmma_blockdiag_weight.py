"""conv_wgmma_blockdiag_weight: grouped backward-weight of few channels a group (C/G below 64)
as conv_wgmma's split backward-weight over super-groups of `per` whole groups (the most that
divide G, at most 64 channels, their channels whole 8-channel runs; conv/wgmma_blockdiag_weight.cu):
each slice stores its fp32 sums of the super-groups' filter, K x R x S x (per C/G), into a plane
of the workspace, and a second launch sums the planes' diagonal blocks (each output channel's
own group) into dw. The matrix units do `per` times the useful products and the tiles are
fuller: 64 output channels by 64 input channels a filter tap where C/G divides 64 and C is a
multiple of 64, where conv_wgmma's tiles over one group of 16 channels leave most of a 64-wide
tile empty. Configurations: conv_wgmma_planes' of 64-row tiles (a super-group's K/G' outputs
are 64 where K = C and per C/G = 64) with the slices that fill the GPU or 4, dy gathered or by
TMA (tma 0 and 1); the rest were best on no grouped layer at N = 32 (docs/BENCHMARKS.md). One
slice included (the planes are the only way to dw here). sm_90a only."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from kernels.conv.problem import ConvProblem
from kernels.conv.wgmma import WgmmaConv
from kernels.conv.wgmma_blockdiag import SUPER
from kernels.conv.wgmma_planes import PLANES_BYTES, WgmmaPlanesConv, planes_bytes
from kernels.family import Instance, Launch, grid_stride_blocks
from kernels.registry import register


def weight_groups_per_super(p: ConvProblem) -> int:
    """The groups a backward-weight super-group holds: the most, at least 2, that divide G
    (conv_wgmma's loads keep to a group's channels: no super-group may run past C), whose
    channels fit 64 as whole 8-channel runs; or 0."""
    return _weight_groups_per_super(p.G, p.c_per_group)


@lru_cache(maxsize=1 << 12)
def _weight_groups_per_super(groups: int, cg: int) -> int:
    if groups == 1 or cg >= SUPER:
        return 0
    return next((n for n in range(SUPER // cg, 1, -1) if groups % n == 0 and n * cg % 8 == 0),
                0)


def blockdiag_refusal(p: ConvProblem) -> str | None:
    """Why the shape has no backward-weight super-groups (weight_groups_per_super), or None."""
    cg = p.c_per_group
    if p.G == 1 or cg >= SUPER:
        return f"C/G={cg}: groups of {SUPER} channels or more are conv_wgmma's own"
    if not weight_groups_per_super(p):
        return (f"C/G={cg}, G={p.G}: no 2 or more groups dividing G make whole 8-channel "
                f"runs within {SUPER} channels")
    return None


def supergroups(p: ConvProblem) -> ConvProblem:
    """The shape as G / per groups of per C/G input channels (per K/G outputs each); a shape
    without super-groups is its own (the base's methods call this family's with the view)."""
    per = weight_groups_per_super(p)
    return p.view(G=p.G // per) if per else p


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
                       ("workspace", "dw", p.K, p.R * p.S, p.c_per_group, p.k_per_group,
                        weight_groups_per_super(p), splits))
        return [self.split_launch(instance, q, 0), total]


FAMILY = register(WgmmaBlockdiagWeightConv())
