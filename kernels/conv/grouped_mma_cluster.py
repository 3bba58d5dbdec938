"""conv_grouped_mma_cluster: conv_grouped_mma_bwd_weight's block-diagonal sums with the
reduction over the output tiles split over the `cluster` blocks of a thread-block cluster
(conv/grouped_mma_cluster.cu): each (slab, tap slice) is one cluster, its blocks sum their share
of the tiles through a ring of `stages` buffers, `kq` warps sharing each tile's pixels, and meet
in distributed shared memory, where
conv_grouped_mma_bwd_weight writes each split to an fp32 workspace that a second launch adds.
One launch, no workspace: for grouped layers on small maps (7x7 to 28x28), whose splits'
partial sums cost as much as their inputs. bf16 and fp16; sm_90a (clusters)."""

from __future__ import annotations

from typing import Any

from kernels.conv.grouped_mma import WEIGHT_WIDTHS, GroupedMmaBwdWeight, weight_threads
from kernels.conv.igemm import _cdiv
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

TILES = ((8, 8), (16, 8), (8, 16))
SGS = (1, 2, 4)
KQS = (2, 4)  # warps that share a tile's 16-pixel steps, per 16 output channels
CLUSTERS = (4, 8)
STAGES = (2, 4)
MAX_THREADS = 256  # 164 registers a thread at most (a width of 16, 9 taps)


def threads(config: dict[str, Any]) -> int:
    return weight_threads(config) * config["kq"]


def generate_configs() -> list[dict[str, Any]]:
    out = [{"tile_h": th, "tile_w": tw, "width": width, "sg": sg, "taps": taps, "kq": kq,
            "cluster": cluster, "stages": stages}
           for th, tw in TILES for width, taps in WEIGHT_WIDTHS for sg in SGS for kq in KQS
           for cluster in CLUSTERS for stages in STAGES]
    return [c for c in out if threads(c) <= MAX_THREADS]


class GroupedMmaClusterBwdWeight(GroupedMmaBwdWeight):
    name = "conv_grouped_mma_cluster"
    short = "grouped_mma_cluster"
    source_file = "conv/grouped_mma_cluster.cu"
    targets = ("sm_90a",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in self.operators else []

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return KernelFamily.defines(self, instance)

    def unsupported_target(self, target: str) -> str | None:
        return KernelFamily.unsupported_target(self, target)  # `targets`: sm_90a only

    def shared_bytes(self, instance: Instance, p: ConvProblem) -> int:
        """The ring of staged tiles, which then holds the block's fp32 sums."""
        c = instance.settings
        sums = 4 * c["taps"] * self.slab(instance) * c["width"]
        return max(super().shared_bytes(instance, p), sums)

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """x: the cluster's blocks; y: the slabs; z: the tap slices."""
        c = instance.settings
        return c["cluster"], _cdiv(p.C, self.slab(instance)), _cdiv(p.R * p.S, c["taps"])

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        return 0

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        return [Launch("grouped_mma_bwd_weight_cluster", self.grid(instance, p),
                       (threads(c), 1, 1),
                       ("x", "dy", "dw", conv_params(p), self.stage_u16(instance, p)),
                       self.shared_bytes(instance, p))]


FAMILY = register(GroupedMmaClusterBwdWeight())
