"""conv_faulty: forward convolutions with a planted bug each, to prove the farm catches them."""

from __future__ import annotations

from kernels.conv.problem import ConvProblem
from kernels.conv.params import conv_params
from kernels.family import Instance, KernelFamily, Launch, grid_stride_blocks
from kernels.registry import register

FAULTS = {"none": 0, "wrong": 1, "unwritten": 2, "out_of_bounds": 3, "hang": 4}


class FaultyConv(KernelFamily):
    name = "conv_faulty"
    short = "faulty"
    operators = ("conv2d_fwd",)
    source_file = "testing/faulty.cu"

    def configs(self, operator: str) -> list[dict]:
        return [{"fault": code} for code in FAULTS.values()]

    def workspace_bytes(self, instance: Instance, problem: ConvProblem) -> int:
        return 16  # a zeroed flag the hanging variant waits on forever

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        blocks = grid_stride_blocks(problem.N * problem.P * problem.Q * problem.K, 128)
        return [Launch(entry="conv2d_fwd", grid=(blocks, 1, 1), block=(128, 1, 1),
                       args=("x", "w", "y", conv_params(problem), "workspace"))]


FAMILY = register(FaultyConv())
