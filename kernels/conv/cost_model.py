"""A toy cost model of the convolution families, for SYNTHETIC measurements only
(farm/select/synthetic.py): implicit GEMM wins on large dense shapes and pays for tile padding,
wave quantisation and narrow loads; the direct convolution is memory-bound and wins on
depthwise and narrow groups; the naive kernel is slow. Never a measurement."""

from __future__ import annotations

import math

from kernels.conv.problem import ConvProblem
from kernels.family import Instance

PEAK, BANDWIDTH, SMS = 989e12, 3350e9, 132
_VEC = {8: 1.0, 4: 0.72, 2: 0.48, 1: 0.3}
REDUCED = {"conv2d_fwd": "output", "conv2d_bwd_data": "input", "conv2d_bwd_weight": "weight"}


def _igemm_us(p: ConvProblem, c: dict) -> float:
    m, n, k = p.gemm
    bm, bn, bk = c["block_m"], c["block_n"], c["block_k"]
    tm, tn, tk = -(-m // bm), -(-n // bn), -(-k // bk)
    split = min(c.get("split_k", 1), tk)
    smem = c["stages"] * (bm + bn) * bk * 2
    occ = max(1, min(3, 228 * 1024 // smem, 2048 // (32 * c["warps_m"] * c["warps_n"])))
    blocks = tm * tn * p.G * split
    waves = blocks / (SMS * occ)
    rate = (0.82 * min(1.0, bm * bn / 16384) ** 0.3 * (1 - 0.06 * (4 - c["stages"]))
            * _VEC[c["vec"]] * (0.97 if bk == 64 else 1.0))
    useful = (m * n * k) / (tm * bm * tn * bn * tk * bk)
    compute = p.flops / (PEAK * rate * useful * min(1.0, waves / math.ceil(waves)))
    reads = 2 * p.G * (m * k * tn + n * k * tm) + p.min_bytes
    memory = reads / (BANDWIDTH * 0.8 * min(1.0, blocks / SMS))
    reduced = p.tensor_elements()[REDUCED[p.op]]  # the split sums' tensor
    reduce = (8 * split * reduced / BANDWIDTH) if split > 1 else 0.0
    return (max(compute, memory) + reduce) * 1e6 + 4.0 + (3.0 if split > 1 else 0.0)


def _direct_us(p: ConvProblem, c: dict) -> float:
    fit = 1.0 if c["fr"] == p.R == p.S else 0.7
    tile = 1.0 if p.Q % c["tile_w"] == 0 else 0.88
    rate = 0.75 * _VEC[c["vec"]] * fit * tile * (1.08 if c.get("smem") else 1.0)
    rate *= 1.0 - 0.05 * abs(c["occ"] - 2) - (0.1 if c.get("rb") == 0 else 0.0)
    memory = p.min_bytes * (1.0 + 0.2 * (p.R * p.S > 9)) / (BANDWIDTH * rate)
    compute = p.flops / (60e12 * 0.6 * (c["kpt"] / 8 + 0.5))
    return max(memory, compute) * 1e6 + 3.0 + (3.0 if p.op == "conv2d_bwd_weight" else 0.0)


def _tile_fill(p: ConvProblem, c: dict) -> float:
    """The share of the output tiles' pixels that are outputs (dx's in backward-data)."""
    out_h, out_w = (p.H, p.W) if p.op == "conv2d_bwd_data" else (p.P, p.Q)
    th, tw = c["tile_h"], c["tile_w"]
    return out_h * out_w / (-(-out_h // th) * th * -(-out_w // tw) * tw)


def _grouped_mma_us(p: ConvProblem, c: dict) -> float:
    useful = _tile_fill(p, c)
    packed = c["width"] / p.c_per_group  # the zero blocks of a super-group's matrices
    compute = p.flops * packed / (PEAK * 0.3 * useful)
    memory = p.min_bytes / (BANDWIDTH * 0.55 * useful)
    return max(compute, memory) * 1e6 + 5.0 + (1.0 if c["stages"] == 1 else 0.0)


def _dw_tma_us(p: ConvProblem, c: dict) -> float:
    # the last channel block's idle threads
    useful = _tile_fill(p, c) * p.C / (-(-p.C // c["ch"]) * c["ch"])
    memory = p.min_bytes * (1.0 + 0.3 * (c["stride"] - 1)) / (BANDWIDTH * 0.6 * useful)
    return memory * 1e6 + 3.0 + (0.5 if c["stages"] == 2 else 0.0)


def synthetic_us(problem: ConvProblem, instance: Instance) -> float:
    """The toy cost model's latency, before noise."""
    c = instance.settings
    if instance.family == "conv_igemm":
        base = _igemm_us(problem, c)
    elif instance.family in ("conv_wgmma", "conv_wgmma_split", "conv_wgmma_cluster"):
        from kernels.conv.wgmma import threads  # Hopper's wgmma: the same tiles, a faster core;
        from kernels.registry import get_family  # the family's slices (or cluster's blocks)

        split = c.get("cluster") or get_family(instance.family).splits(instance, problem)[0]
        base = 0.7 * _igemm_us(problem, {**c, "warps_m": threads(c) // 32, "warps_n": 1,
                                         "vec": 8, "split_k": split})
    elif instance.family == "conv_direct":
        base = _direct_us(problem, c)
    elif instance.family in ("conv_grouped_mma", "conv_grouped_mma_bwd_weight",
                             "conv_grouped_taps"):
        base = _grouped_mma_us(problem, c)
    elif instance.family in ("conv_dw_tma", "conv_dw_tma_bwd_weight", "conv_dw_tc_bwd_weight"):
        base = _dw_tma_us(problem, c)
    elif instance.family == "conv_pointwise":  # a stream of rows: memory-bound, several passes
        passes = -(-max(problem.C, problem.K) // c["cols"])  # where the outputs are wide
        base = problem.min_bytes / (BANDWIDTH * 0.65) * 1e6 * (1 + 0.1 * (passes - 1)) + 5.0
    elif instance.family == "conv_pointwise_cluster":  # few pixels: the cluster's blocks share
        base = (problem.flops / (PEAK * 0.05 * min(1.0, c["cluster"] / 4))  # the reduction
                + problem.min_bytes / (BANDWIDTH * 0.4)) * 1e6 + 5.0
    else:
        base = problem.flops / 1.5e12 * 1e6 + problem.min_bytes / 900e9 * 1e6 + 4.0
    return base
