"""Group-normalization backward as an operator: its shape record, tensors, GPU reference (with
the forward's statistics computed from x, so the inputs are consistent), the shapes a sweep
generates, the selection features and PyTorch's call."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.family import Launch
from kernels.groupnorm import plan
from kernels.groupnorm.problem import GN_FIELDS, GroupNormProblem
from kernels.operator import OperatorSpec, Tensor, Tolerance, VendorCall, distinct_shapes
from kernels.registry import register_operator

NETWORKS_DIR = Path(__file__).resolve().parents[2] / "jobs" / "networks" / "groupnorm"
GENERATE_ORDER = ("N", "C", "G", "H", "W", "layout")  # G: C and W: H name earlier fields

# The selection features of a shape (names: N, C, H, W, G, layout (0 nhwc, 1 nchw) and the
# device constants). A "run" is what vector accesses go along: the group's channels (onepass,
# NHWC), a row of all C channels (twopass, NHWC) or a plane of H*W (NCHW).
SHAPE_FORMULAS = (
    ("HW", "H * W"),
    ("Cg", "C / G"),
    ("groups", "N * G"),
    ("group_elements", "Cg * HW"),
    ("elements", "N * C * HW"),
    ("flops", "7 * elements + 5 * N * C"),
    ("bytes", "elem_bytes * (3 * elements + 3 * C) + 8 * N * G"),
    ("group_bytes", "2 * elem_bytes * group_elements"),
    ("l2_fit", "bytes / l2_bytes"),
    ("roofline_us", "vmax(flops / (peak_tflops * 1e6), bytes / (bandwidth_gbps * 1e3))"),
    ("group_run", "(1 - layout) * Cg + layout * HW"),
    ("row_run", "(1 - layout) * C + layout * HW"),
)
# With the instance columns: threads, vec, split (gn_twopass's split_hw; 1 for gn_onepass),
# tile_n (gn_onepass's channels per thread; NaN for gn_twopass) and occupancy. Blocks and waves
# are given for both families' schemes (one block per group; split partial sums), the family
# one-hot tells a model which one applies.
INTERACTIONS = (
    ("vectors", "elements / vec"),
    ("group_vectors_per_thread", "group_elements / (vec * threads)"),
    ("group_run_rem", "group_run - fdiv(group_run, vec) * vec"),
    ("row_run_rem", "row_run - fdiv(row_run, vec) * vec"),
    ("group_waves", "groups / (sm_count * occupancy)"),
    ("group_sm_share", "vmin(groups / sm_count, 1)"),
    ("chunk_rows", "HW / split"),
    ("partial_x_blocks", "(1 - layout) * cdiv(C / vec, 32) + layout * cdiv(C * vmax(vmin("
                         "threads, HW / (vec * split)), 1), threads)"),
    ("split_blocks", "partial_x_blocks * split * N"),
    ("split_waves", "split_blocks / (sm_count * occupancy)"),
    ("split_last_wave", "split_waves - cdiv(split_waves, 1) + 1"),
    ("dx_blocks", "vmin(cdiv(C * HW / vec, threads), 65535) * N"),
    ("workspace_bytes", "4 * N * C * (2 * split + 3)"),
    ("traffic_bytes", "bytes + 2 * elem_bytes * elements + 2 * workspace_bytes"),
    ("bound_us", "traffic_bytes / (bandwidth_gbps * 1e3)"),
    ("bound_ratio", "bound_us / roofline_us"),
)


class GroupNormBackward(OperatorSpec):
    name = "groupnorm_bwd"
    problem_type = GroupNormProblem
    reference_source = plan.REFERENCE_SOURCE
    networks_dir = NETWORKS_DIR
    holdout_networks = ("resnet50_gn", "sd15_unet", "sd2_768_unet", "sd_vae_decoder")
    # 50 trees at 0.3: as good on held-out networks as 100 at 0.2 (three seeds each), and the C
    # export selects in under 5 us (docs/BENCHMARKS.md, "Model size per operator")
    training = {"rounds": 50, "learning_rate": 0.3}
    generate_order = GENERATE_ORDER
    shape_formulas = SHAPE_FORMULAS
    interactions = INTERACTIONS

    def tensors(self, p: GroupNormProblem) -> list[Tensor]:
        stats = p.N * p.G
        return [Tensor("x", p.elements, "input"), Tensor("dy", p.elements, "input"),
                Tensor("gamma", p.C, "input"),
                Tensor("mean", stats, "input", dtype="fp32"),
                Tensor("rstd", stats, "input", dtype="fp32"),
                Tensor("dx", p.elements, "output"), Tensor("dgamma", p.C, "output"),
                Tensor("dbeta", p.C, "output")]

    def reference_defines(self, dtype: str) -> dict[str, int | str]:
        return dict(plan.reference_defines(dtype))

    def reference_launches(self, p: GroupNormProblem) -> list[Launch]:
        return plan.reference_launches(p)

    def reference_workspace_bytes(self, p: GroupNormProblem) -> int:
        return plan.reference_workspace_bytes(p)

    def input_launches(self, p: GroupNormProblem) -> list[Launch]:
        """mean and rstd: the forward's statistics of the random x (eps 1e-5), with the values
        a forward pass in the problem's element type saves (held in fp32)."""
        return plan.stats_launches(p)

    def tolerance(self, p: GroupNormProblem, output: str | None = None) -> Tolerance:
        """The element type's and the reduction's limits (OperatorSpec.tolerance); for dx
        times sqrt(M / (M - 2)), M = C/G*H*W. dx = rstd * (a - mean(a) - xhat * mean(a * xhat))
        with a = gamma * dy: the group's a less its components along 1 and xhat, so |dx| is
        about sqrt((M - 2) / M) of the terms an implementation rounds (a slight widening from
        M = 100 on, a factor of 1.7 at M = 3; groups of 1 and 2, where dx is nothing but
        cancellation, are refused by the shape record)."""
        limit = super().tolerance(p, output)
        if (output or "dx") != "dx":
            return limit
        factor = math.sqrt(p.group_elements / (p.group_elements - 2))
        return Tolerance(limit.rel_l2 * factor, limit.rel_max * factor)

    def reduction_length(self, p: GroupNormProblem, output: str | None = None) -> int:
        """dx: a group's C/G*H*W elements (through its two coefficients); dgamma, dbeta:
        N*H*W."""
        return plan.reduction_lengths(p)[output or "dx"]

    def synthetic_shapes(self, count: int, seed: int) -> list[dict[str, Any]]:
        return synthetic_shapes(count, seed)

    def shape_class(self, p: GroupNormProblem) -> str:
        """layer (G=1: one group of all channels), instance (G=C: a group per channel) or
        grouped."""
        return "layer" if p.G == 1 else "instance" if p.G == p.C else "grouped"

    def instance_features(self, config: Mapping[str, Any]) -> dict[str, float]:
        """threads, vec; split: gn_twopass's split_hw (1 for gn_onepass, which does not split
        a group); tile_n: gn_onepass's channels per thread (cpt); the static shared memory
        each family's source declares."""
        threads, vec = config["threads"], config["vec"]
        if "split_hw" in config:
            return {"threads": threads, "vec": vec, "split": config["split_hw"],
                    "static_shared_bytes": 8 * threads * vec + 8 * threads // 32}
        cpt = config.get("cpt", 1)
        return {"threads": threads, "vec": vec, "split": 1, "tile_n": cpt,
                "static_shared_bytes": 8 * threads * cpt + 8 * threads // 32}

    def synthetic_us(self, problem: GroupNormProblem, instance: Any) -> float:
        return synthetic_us(problem, instance)

    def vendor_call(self, problem: GroupNormProblem, tensors: Mapping[str, Any]) -> VendorCall:
        return groupnorm_call(problem, tensors)


# Synthetic shapes --------------------------------------------------------------------------------
_CHANNELS = (32, 64, 96, 128, 160, 192, 256, 320, 384, 512, 640, 768, 960, 1024, 1280, 1536,
             2048)
_SPATIAL = (1, 2, 3, 4, 7, 8, 14, 16, 28, 32, 48, 56, 64, 96, 112, 128, 256)
_BATCH = (1, 2, 4, 8, 16, 32)
_GROUPS = ("one", "fixed", "fixed", "fixed", "fixed", "wide", "depthwise")
_MAX_ELEMENTS = 2**26  # per tensor: keeps one problem under a few hundred MB


def _groups(rng: random.Random, c: int) -> int:
    kind = rng.choice(_GROUPS)
    if kind == "one":
        return 1
    if kind == "fixed":  # what networks use: 32 groups mostly, 8 or 16 at times
        return rng.choice([g for g in (8, 16, 32, 32, 32) if c % g == 0] or [1])
    if kind == "wide":  # narrow groups of 2 to 8 channels
        return c // rng.choice((2, 4, 8))
    return c


def synthetic_shapes(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` distinct valid shapes drawn from the space real networks use (channels 32 to
    2048; 1, 8, 16 or 32 groups, narrow groups of 2 to 8 channels or one per channel; square
    planes 1x1 to 256x256; batch 1 to 32; both layouts), fewer only if the space runs out.
    The same (count, seed) always gives the same shapes."""
    return distinct_shapes(count, seed, _synthetic_draw)


def _synthetic_draw(rng: random.Random) -> dict[str, Any] | None:
    """One shape of synthetic_shapes' space; None where it is not valid."""
    c = rng.choice(_CHANNELS)
    g = _groups(rng, c)
    h = rng.choice(_SPATIAL)
    n = rng.choice(_BATCH)
    layout = rng.choice(("nhwc", "nchw"))
    if n * c * h * h > _MAX_ELEMENTS or (c // g) * h * h <= 2:
        return None
    return {"N": n, "C": c, "H": h, "W": h, "G": g, "layout": layout}


# A toy cost model, for SYNTHETIC measurements only ------------------------------------------------
_BANDWIDTH, _SMS, _L2 = 3350e9, 132, 50 * 2**20
_VEC_RATE = {8: 1.0, 4: 0.85, 2: 0.6, 1: 0.4}


def synthetic_us(p: GroupNormProblem, instance: Any) -> float:
    """Invented latency (never a measurement): bandwidth-bound, with gn_onepass fast while
    there are enough (n, g) groups to fill the GPU and slower once a group outgrows its share
    of the L2 (x and dy are read twice), gn_twopass paying two more launches and its partial
    sums' traffic but filling the GPU through its split; both slower with narrow accesses."""
    c = instance.settings
    elem = 2 if p.dtype != "fp32" else 4
    rate = _VEC_RATE[c["vec"]] * (1.0 - 0.04 * abs(math.log2(c["threads"] / 256)))
    x_dy = 2 * elem * p.elements
    if instance.family == "gn_onepass":
        blocks = p.N * p.G
        resident = min(blocks, _SMS * max(1, 2048 // c["threads"]))
        reread = x_dy if resident * 2 * elem * p.group_elements > _L2 else 0.1 * x_dy
        fill = min(1.0, blocks / (_SMS * 2)) ** 0.7
        narrow = 1.0 if p.layout == "nchw" else min(1.0, p.Cg / (c["cpt"] * 4)) ** 0.3
        seconds = (p.min_bytes + reread) / (_BANDWIDTH * 0.85 * rate * fill * narrow)
        return seconds * 1e6 + 3.0
    split = c["split_hw"]
    per_sample = -(-p.C // (32 * c["vec"])) if p.layout == "nhwc" else -(-p.C // 4)
    blocks = per_sample * split * p.N
    fill = min(1.0, blocks / (_SMS * 2)) ** 0.5
    workspace = 4 * p.N * p.C * (2 * split + 3)
    reread = 0.5 * x_dy if 2 * elem * p.elements > _L2 else 0.1 * x_dy
    seconds = (p.min_bytes + reread + 2 * workspace) / (_BANDWIDTH * 0.8 * rate * fill)
    return seconds * 1e6 + 6.0


# The vendor call ----------------------------------------------------------------------------------
def groupnorm_call(p: GroupNormProblem, flat: Mapping[str, Any]) -> VendorCall:
    """PyTorch's group-norm backward (aten.native_group_norm_backward) on `flat` (1-D tensors
    by name). x, dy and dx are viewed as N x C x H x W: for nhwc a channels-last view of the
    same memory. PyTorch's CUDA kernel takes NCHW-contiguous tensors only (autograd makes x
    and dy contiguous before calling it): for nhwc the timed call copies x and dy to NCHW
    first, and its NCHW dx is copied into the channels-last output after the timed call. The
    kernel also reads mean and rstd in the element type of x (a PyTorch forward pass saves them
    in that type): they are converted once, here, outside the timed call, exactly, as the
    operator's statistics hold values of that type (OperatorSpec.input_launches)."""
    import torch

    backward = torch.ops.aten.native_group_norm_backward
    shape = (p.N, p.H, p.W, p.C) if p.layout == "nhwc" else (p.N, p.C, p.H, p.W)

    def nchw(t: Any) -> Any:
        t = t.view(*shape)
        return t.permute(0, 3, 1, 2) if p.layout == "nhwc" else t

    x, dy, dx = nchw(flat["x"]), nchw(flat["dy"]), nchw(flat["dx"])
    mean = flat["mean"].view(p.N, p.G).to(x.dtype)
    rstd = flat["rstd"].view(p.N, p.G).to(x.dtype)
    gamma = flat["gamma"]

    def run() -> dict[str, Any]:
        grads = backward(dy.contiguous(), x.contiguous(), mean, rstd, gamma, p.N, p.C, p.HW,
                         p.G, [True, True, True])
        return {"dx": grads[0], "dgamma": grads[1], "dbeta": grads[2]}
    return VendorCall(run, {"dx": dx, "dgamma": flat["dgamma"], "dbeta": flat["dbeta"]})


OPERATOR = register_operator(GroupNormBackward())
__all__ = ["GN_FIELDS", "GroupNormBackward", "OPERATOR", "groupnorm_call", "synthetic_shapes",
           "synthetic_us"]
