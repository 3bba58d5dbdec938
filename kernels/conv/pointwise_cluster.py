"""conv_pointwise_cluster: pointwise layers (1x1, stride 1, no padding, one group) with few
pixels and a long reduction, forward and backward-data (conv/pointwise_cluster.cu): the
squeeze-and-excitation layers, whose 1x1 maps make a GEMM of N rows, and the last stages'
maps at batch 1. An output tile of `tm` pixels by `tn` channels is summed by the `cluster`
blocks of a thread-block cluster, each over its share of the reduction's 64-wide chunks
(cp.async into `stages` buffers, mma.sync), and the blocks' sums meet in distributed shared
memory: one launch, no workspace, the whole GPU busy on a GEMM whose output is one tile.

Channels multiples of 8 (16-byte copies); at most MAX_PIXELS pixels (N x H x W: larger maps
fill the GPU with tiles and need no split). bf16 and fp16; sm_90a (clusters)."""

from __future__ import annotations

from typing import Any

from kernels.conv.params import conv_params
from kernels.conv.pointwise import OP_CODES, channels, pointwise_refusal
from kernels.conv.problem import ConvProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
MAX_PIXELS = 4096  # the GEMM rows it serves
KC = 64  # a k-chunk
THREADS = 128


def shared_bytes(c: dict[str, Any], op: str) -> int:
    """The stages (A as [tm][72], B as [tn][72] forward or [64][tn + 8] backward-data, 16-bit)
    or the tile's fp32 sums, where larger."""
    b = c["tn"] * (KC + 8) if op == "conv2d_fwd" else KC * (c["tn"] + 8)
    return max(2 * c["stages"] * (c["tm"] * (KC + 8) + b), 4 * c["tm"] * c["tn"])


def generate_configs() -> list[dict[str, Any]]:
    return [{"cluster": cluster, "tm": tm, "tn": tn, "stages": stages}
            for cluster in (2, 4, 8) for tm in (16, 32, 64) for tn in (64, 128)
            for stages in (2, 3)]


class PointwiseClusterConv(KernelFamily):
    name = "conv_pointwise_cluster"
    short = "pwc"
    source_file = "conv/pointwise_cluster.cu"
    operators = OPERATORS
    targets = ("sm_90a",)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in OPERATORS else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "CONV_OP": OP_CODES[instance.operator]}

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p = problem
        reason = self.other_problem(instance, p) or pointwise_refusal(p)
        if reason:
            return reason
        pixels = p.N * p.H * p.W
        if pixels > MAX_PIXELS:
            return (f"N x H x W = {pixels} pixels, above {MAX_PIXELS}: such maps fill the GPU "
                    "with tiles (conv_pointwise, conv_wgmma)")
        return None

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """x: the cluster's blocks for each tile of output channels; y: tiles of pixels."""
        c = instance.settings
        return (c["cluster"] * -(-channels(p)[1] // c["tn"]),
                -(-p.N * p.H * p.W // c["tm"]), 1)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        args = ("x", "w", "y") if p.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(p.op, self.grid(instance, p), (THREADS, 1, 1), (*args, conv_params(p)),
                       shared_bytes(c, p.op))]


FAMILY = register(PointwiseClusterConv())
