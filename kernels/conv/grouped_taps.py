"""conv_grouped_taps: conv_grouped_mma's grouped forward and stride-1 backward-data
(super-groups of `width` channels as block-diagonal mma.sync GEMMs over an input tile staged
once in shared memory) with the filter size `fr` x `fr` and the stride compiled in, dilation
1 (conv/grouped_taps.cu): every tap unrolled at a constant offset, the staging walk and the
fragments' pixel offsets without run-time division, and up to three tiles in flight. Its
profile is the reason: on ResNeXt's and RegNet's grouped 3x3 layers conv_grouped_mma issued
about thirty instructions a matrix instruction, most of them the taps' and the copies'
integer arithmetic. NVIDIA (mma.sync, ldmatrix, cp.async: sm_80 and later), bf16 and fp16."""

from __future__ import annotations

from typing import Any

from kernels.conv.grouped_mma import (SM_REGISTERS, SM_SHARED, GroupedMmaConv, generate_configs,
                                      threads)
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import Instance, KernelFamily, Launch
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1}
FILTERS = (1, 3, 5)
STRIDES = (1, 2)
SPARE_REGISTERS = 80  # a thread's registers beside its accumulators (addresses, fragments)


def shared_bytes(config: dict[str, Any]) -> int:
    """The block's shared memory (grouped_taps.cu): the slab's tap matrices, the staged tiles
    (rows x column phases x slots, PITCH chunks a pixel) and the output tile."""
    c, fr, stride = config, config["fr"], config["stride"]
    rows, cols = (c["tile_h"] - 1) * stride + fr, (c["tile_w"] - 1) * stride + fr
    slab = c["sg"] * c["width"]
    stage = rows * stride * -(-cols // stride) * (slab // 8 + 1) * 8
    weights = c["sg"] * fr * fr * c["width"] * (c["width"] + 8)
    return 2 * (weights + c["stages"] * stage + c["tile_h"] * c["tile_w"] * (slab + 8))


def resident_blocks(config: dict[str, Any]) -> int:
    """Blocks a multiprocessor holds, compiled in (__launch_bounds__): what shared memory and
    threads allow, at most as many as leave a thread its accumulators and SPARE_REGISTERS."""
    t, c = threads(config), config
    accumulators = c["tile_h"] * c["tile_w"] // 16 // c["warps_m"] * min(c["width"], 32) // 2
    return max(1, min(SM_SHARED // (shared_bytes(config) + 1024), 2048 // t,
                      SM_REGISTERS // (t * max(96, accumulators + SPARE_REGISTERS))))


def tap_configs(operator: str = "conv2d_fwd") -> list[dict[str, Any]]:
    """conv_grouped_mma's tiles and packings, each for every filter and stride (backward-data:
    stride 1); a third stage where the two-stage tile has at most 8 warps (the copies' latency
    over fewer tiles)."""
    strides = STRIDES if operator == "conv2d_fwd" else (1,)
    out = []
    for config in generate_configs():
        stages = [config["stages"]]
        if config["stages"] == 2 and threads(config) <= 256:
            stages.append(3)
        out += [{**config, "stages": stages_, "fr": fr, "stride": stride}
                for stages_ in stages for fr in FILTERS for stride in strides]
    return out


class GroupedTapsConv(GroupedMmaConv):
    name = "conv_grouped_taps"
    short = "grouped_taps"
    operators = OPERATORS
    source_file = "conv/grouped_taps.cu"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return tap_configs(operator) if operator in OPERATORS else []

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**KernelFamily.defines(self, instance), "GT_OP": OP_CODES[instance.operator],
                "MIN_BLOCKS": resident_blocks(instance.settings)}

    def shared_bytes(self, instance: Instance, p: ConvProblem) -> int:
        return shared_bytes(instance.settings)

    def blocks_per_sm(self, instance: Instance, p: ConvProblem) -> int:
        return resident_blocks(instance.settings)

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        c, p = instance.settings, problem
        if p.op == instance.operator:
            if (p.R, p.S) != (c["fr"], c["fr"]):
                return f"filter {p.R}x{p.S}: compiled for {c['fr']}x{c['fr']}"
            if (p.stride_h, p.stride_w) != (c["stride"], c["stride"]):
                return f"stride {p.stride_h}x{p.stride_w}: compiled for {c['stride']}"
            if (p.dil_h, p.dil_w) != (1, 1):
                return f"dilation {p.dil_h}x{p.dil_w}: compiled for 1"
        return super().applicable(instance, problem)

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        names = ("x", "w", "y") if problem.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(problem.op, self.grid(instance, problem),
                       (threads(instance.settings), 1, 1), (*names, conv_params(problem)),
                       self.shared_bytes(instance, problem))]


FAMILY = register(GroupedTapsConv())
