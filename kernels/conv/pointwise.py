"""conv_pointwise: the pointwise layers (1x1, stride 1, no padding, one group), forward and
backward-data, as a stream of pixel rows through a GEMM whose channel dimensions are small
(conv/pointwise.cu): the whole weight held in shared memory, persistent blocks of independent
warps, each copying chunks of `rows` pixels by cp.async `stages` - 1 chunks ahead of its
mma.sync math and writing each chunk's outputs as one contiguous run. These layers move far
more bytes than they compute where the channels are few (MobileNet's and EfficientNet's
expansions and projections): the implicit GEMMs' 64-wide tiles leave them latency-bound.

Configuration: `warps` a block, `rows` pixels a chunk, `cols` output channels a pass over a
chunk (more take more passes), `stages`. Channels multiples of 8 (16-byte copies); the weight
and the warps' stages must fit shared memory, which bounds the channels (about 256 by 256).
bf16 and fp16; NVIDIA sm_80 and later (mma.sync, ldmatrix, cp.async)."""

from __future__ import annotations

from typing import Any

from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch, refuse_below_sm
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
OP_CODES = {"conv2d_fwd": 0, "conv2d_bwd_data": 1}
SMEM_OPT_IN = 227 * 1024
SM_SHARED = 228 * 1024
SM_REGISTERS = 65536
VECTOR = 8  # channels of a 16-byte copy


def round16(v: int) -> int:
    return -(-v // 16) * 16


def channels(p: ConvProblem) -> tuple[int, int]:
    """(J, NC): the channels reduced over and the output's (forward C, K; backward-data K, C)."""
    return (p.C, p.K) if p.op == "conv2d_fwd" else (p.K, p.C)


def shared_bytes(c: dict[str, Any], j: int, nc: int) -> int:
    """The weight as [NC16][J16 + 8], then each warp's stages and output buffer (16-bit)."""
    jp, op = round16(j) + 8, round16(nc) + 8
    return 2 * (round16(nc) * jp + c["warps"] * (c["stages"] * c["rows"] * jp + c["rows"] * op))


def blocks_per_sm(c: dict[str, Any], j: int, nc: int) -> int:
    """Blocks a multiprocessor holds: shared memory, threads, and registers: `cols`
    accumulators a thread and 48 more, the count the kernel's launch bounds hold ptxas to."""
    threads = 32 * c["warps"]
    return max(1, min(SM_SHARED // (shared_bytes(c, j, nc) + 1024), 2048 // threads,
                      SM_REGISTERS // (threads * (c["cols"] + 48))))


def is_pointwise(p: ConvProblem) -> bool:
    return (p.R, p.S, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.G) == (1, 1, 1, 1, 0, 0, 1)


def pointwise_refusal(p: ConvProblem) -> str | None:
    """Why `p` is not a pointwise layer with channels of whole 16-byte copies, or None."""
    if not is_pointwise(p):
        return "serves 1x1 convolutions of stride 1 without padding or groups only"
    if p.C % VECTOR or p.K % VECTOR:
        return f"C={p.C} and K={p.K} must be multiples of {VECTOR} (16-byte copies)"
    return None


def generate_configs() -> list[dict[str, Any]]:
    return [{"warps": warps, "rows": rows, "cols": cols, "stages": stages}
            for warps in (4, 8) for rows in (32, 64) for cols in (32, 64, 128)
            for stages in (2, 3, 4)]


class PointwiseConv(KernelFamily):
    name = "conv_pointwise"
    short = "pw"
    source_file = "conv/pointwise.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        return generate_configs() if operator in OPERATORS else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        return [] if dtype == "fp32" else super().instances(operator, dtype)

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return {**super().defines(instance), "CONV_OP": OP_CODES[instance.operator]}

    def unsupported_target(self, target: str) -> str | None:
        return refuse_below_sm(self.name, target, 80, "NVIDIA's mma.sync and cp.async")

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        reason = self.other_problem(instance, p) or pointwise_refusal(p)
        if reason:
            return reason
        need = shared_bytes(c, *channels(p))
        if need > SMEM_OPT_IN:
            return (f"the weight and {c['warps']} warps' {c['stages']} stages of {c['rows']} "
                    f"pixels take {need} bytes of shared memory, above {SMEM_OPT_IN}")
        return None

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """Persistent blocks: as many as the GPU holds at once, at most one a `warps` chunks."""
        c = instance.settings
        chunks = -(-p.N * p.H * p.W // c["rows"])
        resident = SM_COUNT * blocks_per_sm(c, *channels(p))
        return min(-(-chunks // c["warps"]), resident), 1, 1

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        c, p = instance.settings, problem
        args = ("x", "w", "y") if p.op == "conv2d_fwd" else ("dy", "w", "dx")
        return [Launch(p.op, self.grid(instance, p), (32 * c["warps"], 1, 1),
                       (*args, conv_params(p)), shared_bytes(c, *channels(p)))]


FAMILY = register(PointwiseConv())
