"""conv_naive: one thread per output element, fp32 accumulation, every direction and shape.
Slow by design; it is the correctness baseline and the trivial family of the farm's tests."""

from __future__ import annotations

from kernels.conv.problem import CONV_OPERATORS, ConvProblem
from kernels.conv.operator import OPERATORS
from kernels.conv.params import conv_params
from kernels.family import Instance, KernelFamily, Launch, grid_stride_blocks
from kernels.registry import register


class NaiveConv(KernelFamily):
    name = "conv_naive"
    reference = True
    short = "naive"
    operators = CONV_OPERATORS
    source_file = "conv/naive.cu"
    measure_order = 2  # a slow baseline: measured last, once faster times can stop it early

    def configs(self, operator: str) -> list[dict]:
        return [{"block": 128}, {"block": 256}]

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        block = instance.settings["block"]
        spec = OPERATORS[instance.operator]
        names = [t.name for t in spec.tensors(problem)]
        blocks = grid_stride_blocks(spec.output(problem).elements, block, per_sm=2048 // block)
        return [Launch(entry=instance.operator, grid=(blocks, 1, 1), block=(block, 1, 1),
                       args=(*names, conv_params(problem)))]


FAMILY = register(NaiveConv())
