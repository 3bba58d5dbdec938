"""conv_stem: forward and backward-data of convolutions with 1 to 4 input channels a group (the
stems of image networks: RGB in, 16 to 96 channels out, 3x3 to 7x7 filters at stride 2 or 4),
which the implicit GEMMs serve with loads of one channel and the matrix units leave mostly
idle. On the CUDA cores, any GPU (conv/stem.cu), fp32 sums; bf16, fp16 and fp32; any filter,
stride, padding and dilation; K/G of 8 and more (the depthwise and grouped families serve the
narrower groups).
- Forward: a thread sums `kt` output channels of one pixel over its taps, the slice's filter in
  shared memory as fp32 (every thread of a warp reads the same value), and writes them 16 bytes
  at a time with `vector` 1.
- Backward-data: the input pixels split into classes by their residue modulo the stride, whose
  pixels receive from the same taps; a warp holds one class's pixels, the group's filter sits in
  shared memory as fp32, a thread sums `pix` pixels of a column over the taps and the output
  channels, reading dy `vector` 16 bytes at a time; with `lanes` > 1 that many threads share a
  pixel's channels (whole rows of dy a load) and add up by shuffles. With `patch` 2 or 4, for
  the patch stems (R = S = stride = patch, no padding or dilation, H and W multiples of it),
  a thread takes one output pixel and writes the block of input pixels only it reaches
  (each dy row read once).

Configuration: `cg` (the C/G it is compiled for, 1 to 4), `vector` (0 or 1) and `block`
(threads); forward `kt` (8, 16 or 32), backward-data `pix` (1, 2 or 4), `lanes` (1, 4 or 8)
and `patch` (0: the residue classes; 2 or 4: the patch kernel, one pixel and lane a thread)."""

from __future__ import annotations

from typing import Any

from farm.problems import DTYPE_BYTES
from kernels.conv.params import conv_params
from kernels.conv.problem import ConvProblem
from kernels.family import SM_COUNT, Instance, KernelFamily, Launch
from kernels.registry import register

OPERATORS = ("conv2d_fwd", "conv2d_bwd_data")
WIDEST = 4  # the most input channels a group it serves
NARROWEST_OUT = 8  # the fewest output channels a group (the depthwise and grouped families'
# kernels serve the narrower ones)
SHARED_LIMIT = 48 * 1024  # the filter's values as fp32 (no opt-in; fits AMD's 64 KiB too)
GRID_LIMIT = 65535  # blocks along y (forward's channel slices) and z (groups)
BLOCKS_PER_SM = 8  # the grid's target: this many blocks a multiprocessor over y and z


def filter_bytes(c: dict[str, Any], p: ConvProblem) -> int:
    """The filter values a block keeps in shared memory as fp32: forward R x S x C/G x kt,
    backward-data the group's R x S x K/G x C/G."""
    channels = c["kt"] if p.op == "conv2d_fwd" else p.k_per_group
    return 4 * p.R * p.S * p.c_per_group * channels


def is_patch_stem(p: ConvProblem, patch: int) -> bool:
    """Whether p's output pixels each read their own patch x patch block of the input, and
    together every input pixel (the patch kernel's shapes)."""
    return ((p.R, p.S, p.stride_h, p.stride_w) == (patch,) * 4 and (p.pad_h, p.pad_w) == (0, 0)
            and (p.dil_h, p.dil_w) == (1, 1) and p.H % patch == 0 and p.W % patch == 0)


class StemConv(KernelFamily):
    name = "conv_stem"
    short = "stem"
    source_file = "conv/stem.cu"
    operators = OPERATORS

    def configs(self, operator: str) -> list[dict[str, Any]]:
        cgs, blocks = range(1, WIDEST + 1), (128, 256)
        if operator == "conv2d_fwd":
            return [{"cg": cg, "kt": kt, "vector": vector, "block": block}
                    for cg in cgs for kt in (8, 16, 32) for vector in (0, 1) for block in blocks]
        if operator == "conv2d_bwd_data":
            classes = [{"cg": cg, "pix": pix, "vector": vector, "lanes": lanes, "block": block,
                        "patch": 0}
                       for cg in cgs for pix in (1, 2, 4) for vector in (0, 1)
                       for lanes in (1, 4, 8) for block in blocks]
            patches = [{"cg": cg, "pix": 1, "vector": vector, "lanes": 1, "block": block,
                        "patch": patch}
                       for cg in cgs for vector in (0, 1) for block in blocks for patch in (2, 4)]
            return classes + patches
        return []

    def compiled_case(self, problem: ConvProblem) -> dict[str, Any]:
        return {"cg": problem.c_per_group}

    @staticmethod
    def vector_channels(dtype: str) -> int:
        """The channels of one 16-byte load or store."""
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
            what = "stores" if p.op == "conv2d_fwd" else "loads of dy"
            return (f"vector=1 {what} {vec} channels at once: K={p.K} and K/G="
                    f"{p.k_per_group} must be multiples of {vec}")
        if c.get("patch") and not is_patch_stem(p, c["patch"]):
            return (f"patch={c['patch']} serves R = S = stride = {c['patch']} without padding or "
                    "dilation, H and W multiples of it")
        if filter_bytes(c, p) > SHARED_LIMIT:
            return (f"the filter's values take {filter_bytes(c, p)} bytes of shared memory as "
                    f"fp32, above {SHARED_LIMIT}")
        _, y, z = self.grid(instance, p)
        if max(y, z) > GRID_LIMIT:
            return f"a grid of {y} x {z} blocks along y and z, over {GRID_LIMIT}"
        return None

    def grid(self, instance: Instance, p: ConvProblem) -> tuple[int, int, int]:
        """Forward (pixel blocks, channel slices, groups); backward-data (blocks a class and
        group, stride classes, groups) over the largest class's items (n, group of pix rows,
        column), block / lanes a block, or with `patch` (output pixel blocks, 1, groups). As
        many blocks along x as the items fill, BLOCKS_PER_SM a multiprocessor over y and z at
        most."""
        c = instance.settings
        if p.op == "conv2d_fwd":
            items, per_block, y = p.N * p.P * p.Q, c["block"], -(-p.k_per_group // c["kt"])
        elif c["patch"]:
            items, per_block, y = p.N * p.P * p.Q, c["block"], 1
        else:
            rows, cols = -(-p.H // p.stride_h), -(-p.W // p.stride_w)
            items = p.N * -(-rows // c["pix"]) * cols
            per_block, y = c["block"] // c["lanes"], p.stride_h * p.stride_w
        cap = max(1, -(-SM_COUNT * BLOCKS_PER_SM // (y * p.G)))
        return min(-(-items // per_block), cap), y, p.G

    def launches(self, instance: Instance, problem: ConvProblem) -> list[Launch]:
        entry, args = (("stem_fwd", ("x", "w", "y")) if problem.op == "conv2d_fwd"
                       else ("stem_bwd_data_patches" if instance.settings["patch"]
                             else "stem_bwd_data", ("dy", "w", "dx")))
        return [Launch(entry, self.grid(instance, problem), (instance.settings["block"], 1, 1),
                       (*args, conv_params(problem)),
                       shared_bytes=filter_bytes(instance.settings, problem))]


FAMILY = register(StemConv())
