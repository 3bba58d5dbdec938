"""conv_stem: backward-data of convolutions with 1 to 4 input channels a group (the stems of
image networks: RGB in, 16 to 96 channels out, 3x3 to 7x7 filters at stride 2 or 4), which the
implicit GEMMs serve with loads of one channel and the matrix units leave mostly idle. On the
CUDA cores, any GPU (conv/stem.cu): the input pixels split into classes by their residue
modulo the stride, whose pixels receive from the same taps; a warp holds one class's pixels, the
group's filter sits in shared memory as fp32, a thread sums `pix` pixels of a column over the
taps and the output channels, reading dy `vector` 16 bytes at a time; with `lanes` > 1 that
many threads share a pixel's channels (whole rows of dy a load) and add up by shuffles. Any filter, stride,
padding and dilation; fp32 accumulation; bf16, fp16 and fp32.

Serves K/G of 8 and more. Configuration: `cg` (the C/G it is compiled for, 1 to 4), `pix`
(1, 2 or 4), `vector` (0 or 1), `lanes` (1, 4 or 8) and `block` (threads)."""

from __future__ import annotations

from typing import Any

from farm.problems import DTYPE_BYTES
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch
from kernels.registry import register

OPERATOR = "conv2d_bwd_data"
WIDEST = 4  # the most input channels a group it serves
NARROWEST_OUT = 8  # the fewest output channels a group (the depthwise and grouped families'
# kernels serve the narrower ones)
SHARED_LIMIT = 48 * 1024  # the group's filter as fp32 (no opt-in; fits AMD's 64 KiB too)
GRID_Z_LIMIT = 65535  # one block row a group
BLOCKS_PER_SM = 8  # the grid's target: this many blocks a multiprocessor over classes and groups


def filter_bytes(p: ConvProblem) -> int:
    """A group's filter in shared memory: R x S x K/G x C/G floats."""
    return 4 * p.R * p.S * p.k_per_group * p.c_per_group


class StemConv(KernelFamily):
    name = "conv_stem"
    short = "stem"
    source_file = "conv/stem.cu"
    operators = (OPERATOR,)

    def configs(self, operator: str) -> list[dict[str, Any]]:
        if operator != OPERATOR:
            return []
        return [{"cg": cg, "pix": pix, "vector": vector, "lanes": lanes, "block": block}
                for cg in range(1, WIDEST + 1) for pix in (1, 2, 4) for vector in (0, 1)
                for lanes in (1, 4, 8) for block in (128, 256)]

    def compiled_case(self, problem: ConvProblem) -> dict[str, Any]:
        return {"cg": problem.c_per_group}

    @staticmethod
    def vector_channels(dtype: str) -> int:
        """dy's channels in one 16-byte load."""
        return 16 // DTYPE_BYTES[dtype]

    def applicable(self, instance: Instance, problem: ConvProblem) -> str | None:
        p, c = problem, instance.settings
        reason = self.other_problem(instance, p)
        if reason:
            return reason
        if p.c_per_group != c["cg"]:
            return (f"compiled for C/G={c['cg']}, problem has C/G={p.c_per_group}"
                    + ("" if p.c_per_group <= WIDEST else
                       f" (it serves C/G up to {WIDEST}: the implicit GEMMs take wider groups)"))
        if p.k_per_group < NARROWEST_OUT:
            return (f"K/G={p.k_per_group} below {NARROWEST_OUT}: the depthwise and grouped "
                    "families serve narrow groups")
        vec = self.vector_channels(p.dtype)
        if c["vector"] and (p.K % vec or p.k_per_group % vec):
            return (f"vector=1 loads {vec} channels of dy at once: K={p.K} and K/G="
                    f"{p.k_per_group} must be multiples of {vec}")
        if filter_bytes(p) > SHARED_LIMIT:
            return (f"the group's filter takes {filter_bytes(p)} bytes of shared memory as "
                    f"fp32, above {SHARED_LIMIT}")
        if p.G > GRID_Z_LIMIT:
            return f"G={p.G} groups, over the grid's {GRID_Z_LIMIT} blocks along z"
        return None

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """(blocks a class and group, stride classes, groups): the largest class's items
        (n, group of pix rows, column), block / lanes a block, as many blocks as they fill,
        BLOCKS_PER_SM a multiprocessor over every class and group at most."""
        c = instance.settings
        rows, cols = -(-p.H // p.stride_h), -(-p.W // p.stride_w)
        items = p.N * -(-rows // c["pix"]) * cols
        classes = p.stride_h * p.stride_w
        cap = max(1, -(-SM_COUNT * BLOCKS_PER_SM // (classes * p.G)))
        return min(-(-items // (c["block"] // c["lanes"])), cap), classes, p.G

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        return [Launch("stem_bwd_data", self.grid(instance, problem),
                       (instance.settings["block"], 1, 1),
                       ("dy", "w", "dx", conv_params(problem)),
                       shared_bytes=filter_bytes(problem))]


FAMILY = register(StemConv())
