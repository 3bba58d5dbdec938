"""The fused depthwise-separable convolution forward as an operator: its shape record, tensors,
GPU reference, the shapes a sweep generates, the selection features and the vendor pair
(PyTorch's depthwise convolution, affine and activation, then its 1x1 convolution)."""

from __future__ import annotations

import ctypes
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.dwsep.problem import DWSEP_ACTIVATIONS, DwsepProblem
from kernels.family import Launch, grid_stride_blocks
from kernels.operator import OperatorSpec, Tensor, VendorCall, distinct_shapes
from kernels.registry import register_operator

NETWORKS_DIR = Path(__file__).resolve().parents[2] / "jobs" / "networks" / "dwsep"
REFERENCE_BLOCK = 128
GENERATE_ORDER = ("N", "C", "K", "H", "W", "R", "S", "stride", "pad", "multiplier",
                  "activation", "pw_bias")
SHAPE_FORMULAS = (
    ("P", "fdiv(H + 2 * pad - R, stride) + 1"),
    ("Q", "fdiv(W + 2 * pad - S, stride) + 1"),
    ("MC", "multiplier * C"),
    ("pixels", "N * P * Q"),
    ("flops", "2 * pixels * MC * (R * S + K)"),
    ("bytes", "elem_bytes * (N * H * W * C + MC * (R * S + 2) + K * MC + K * pw_bias"
              " + pixels * K)"),
    ("intensity", "flops / bytes"),
    ("l2_fit", "bytes / l2_bytes"),
    ("roofline_us", "vmax(flops / (peak_tflops * 1e6), bytes / (bandwidth_gbps * 1e3))"),
)
INTERACTIONS = (
    ("tiles_p", "cdiv(pixels, tile_m)"),
    ("fill_p", "(pixels - (tiles_p - 1) * tile_m) / tile_m"),
    ("tiles_k", "cdiv(K, tile_n)"),
    ("fill_k", "(K - (tiles_k - 1) * tile_n) / tile_n"),
    ("blocks_k", "vmin(tiles_k, split)"),
    ("blocks", "tiles_p * blocks_k"),
    ("waves", "blocks / (sm_count * occupancy)"),
    ("last_wave", "waves - cdiv(waves, 1) + 1"),
    ("depthwise_repeats", "blocks_k"),
    ("chunks", "cdiv(MC, tile_k)"),
    ("padded_flops", "2 * tiles_p * tile_m * tiles_k * tile_n * chunks * tile_k"),
    ("dw_flops", "2 * blocks_k * pixels * MC * R * S"),
    ("core_us", "(padded_flops + dw_flops) / (peak_tflops * 1e6 / 16)"),
    ("bound_us", "vmax(core_us, bytes / (bandwidth_gbps * 1e3))"),
    ("bound_ratio", "bound_us / roofline_us"),
    # dwsep_halo's 2-D tiles (tile_w wide, tile_m / tile_w high; NaN for the other families)
    ("tiles_2d", "N * cdiv(P, tile_m / tile_w) * cdiv(Q, tile_w)"),
    ("fill_2d", "pixels / (tiles_2d * tile_m)"),
    ("halo_reads", "((tile_m / tile_w - 1) * stride + R) * ((tile_w - 1) * stride + S) / tile_m"),
    ("waves_2d", "tiles_2d * tiles_k / (sm_count * occupancy)"),
    # the channel chunks' fill, a block's share of them (dwsep_stream's and dwsep_halo's cluster
    # split), and the launched grid with the tiles a block walks and the cluster's blocks
    ("fill_c", "MC / (chunks * tile_k)"),
    ("chunks_block", "cdiv(chunks, c_split)"),
    ("steps_block", "chunks_block * tiles"),
    ("launch_blocks", "cdiv(tiles_p, tiles) * blocks_k * c_split"),
    ("launch_waves", "launch_blocks / (sm_count * occupancy)"),
    ("launch_blocks_2d", "cdiv(tiles_2d, tiles) * tiles_k * c_split"),
    ("launch_waves_2d", "launch_blocks_2d / (sm_count * occupancy)"),
)


def torch_activation(name: str) -> Any:
    """PyTorch's function for one of DWSEP_ACTIVATIONS (the vendor pair's activation)."""
    import torch

    f = torch.nn.functional
    return {"none": lambda t: t, "relu": f.relu, "relu6": f.relu6, "silu": f.silu,
            "hardswish": f.hardswish}[name]


class DwsepParams(ctypes.Structure):
    """struct DwsepParams of dwsep_common.cuh, passed by value."""

    _fields_ = [(name, ctypes.c_int32) for name in (
        "N", "C", "H", "W", "K", "R", "S", "P", "Q", "stride", "pad", "M", "MC", "activation",
        "pw_bias")]


def dwsep_params(p: DwsepProblem) -> DwsepParams:
    return DwsepParams(p.N, p.C, p.H, p.W, p.K, p.R, p.S, p.P, p.Q, p.stride, p.pad,
                       p.multiplier, p.MC, DWSEP_ACTIVATIONS.index(p.activation), p.pw_bias)


def tensor_args(p: DwsepProblem, output: str = "y") -> tuple[str, ...]:
    """The kernels' pointer arguments in order; without a bias its pointer is y's (unread)."""
    return ("x", "w_dw", "scale", "shift", "w_pw", "b_pw" if p.pw_bias else output, output)


_CHANNELS = (8, 16, 24, 32, 40, 48, 64, 72, 96, 120, 144, 160, 192, 240, 256, 320, 384, 480,
             512, 576, 672, 728, 960, 1024, 1280, 1536, 2048)
_SPATIAL = (1, 3, 7, 10, 14, 19, 28, 37, 56, 74, 112)


def _synthetic_draw(rng: random.Random) -> dict[str, Any] | None:
    """One block of DwsepForward.synthetic_shapes' space; None where it is not valid."""
    c, k = rng.choice(_CHANNELS), rng.choice(_CHANNELS)
    r = rng.choice((3, 3, 3, 5, 5, 7))
    h = rng.choice(_SPATIAL)
    n = rng.choice((1, 2, 4, 8, 16, 32))
    stride = 2 if rng.random() < 0.25 else 1
    m = 2 if rng.random() < 0.1 else 1
    shape = {"N": n, "C": c, "H": h, "W": h, "K": k, "R": r, "S": r,
             "stride": stride, "pad": (r - 1) // 2, "multiplier": m,
             "activation": rng.choice(DWSEP_ACTIVATIONS), "pw_bias": int(rng.random() < 0.3)}
    p = h // stride
    if n * h * h * c > 2**26 or n * p * p * max(k, m * c) > 2**26 or h + 2 * shape["pad"] < r:
        return None
    return shape


def wgmma_consumers(config: Mapping[str, Any]) -> int:
    """dwsep_wgmma's warpgroups of wgmma: one per 64 pixels and 256 output channels of a
    block."""
    return config["tile_p"] // 64 * max(1, config["tile_n"] // 256)


class DwsepForward(OperatorSpec):
    name = "dwsep_fwd"
    problem_type = DwsepProblem
    reference_source = "dwsep/reference.cu"
    networks_dir = NETWORKS_DIR
    holdout_networks = ("mobilenet_v3_large", "xception")
    generate_order = GENERATE_ORDER
    shape_formulas = SHAPE_FORMULAS
    interactions = INTERACTIONS
    vendor_source = ("vendor: torch conv2d (groups=C) + scale, shift, activation + conv2d 1x1, "
                     "channels-last")
    # The hybrid alone: on held-out networks it chooses better than the model the validation
    # split picks among the kinds, and than the ranker (docs/BENCHMARKS.md, 2026-11-28)
    training = {"kinds": ("hybrid",)}

    def tensors(self, p: DwsepProblem) -> list[Tensor]:
        sizes = p.tensor_elements()
        return [Tensor(name, count, "output" if name == "y" else "input")
                for name, count in sizes.items()]

    def reduction_length(self, p: DwsepProblem, output: str | None = None) -> int:
        return p.MC * p.R * p.S

    def reference_launches(self, p: DwsepProblem) -> list[Launch]:
        blocks = grid_stride_blocks(p.N * p.P * p.Q * p.K, REFERENCE_BLOCK, per_sm=64)
        return [Launch("dwsep_fwd_ref", (blocks, 1, 1), (REFERENCE_BLOCK, 1, 1),
                       (*tensor_args(p), dwsep_params(p)))]

    def reference_defines(self, dtype: str) -> dict[str, int | str]:
        return {**super().reference_defines(dtype), "REF_BLOCK": REFERENCE_BLOCK}

    def generate_value(self, name: str, word: str, partial: Mapping[str, Any]) -> Any:
        """`same` padding: (R - 1) // 2."""
        return (partial["R"] - 1) // 2 if (word, name) == ("same", "pad") else None

    def synthetic_shapes(self, count: int, seed: int) -> list[dict[str, Any]]:
        """Depthwise-separable blocks as networks build them: C 8 to 2,048, K 8 to 2,048,
        3x3 to 7x7 filters, stride 1 or 2, multiplier 1 (now and then 2), 1x1 to 112x112 maps,
        batch 1 to 32; each problem under a few hundred MB."""
        return distinct_shapes(count, seed, _synthetic_draw)

    def shape_class(self, p: DwsepProblem) -> str:
        return f"stride {p.stride}" + (" x2" if p.multiplier == 2 else "")

    def instance_features(self, config: Mapping[str, Any]) -> dict[str, float]:
        """tile_m pixels (dwsep_halo: tile_h x tile_w) by tile_n output channels per block,
        tile_k channels per step; split: the blocks sharing a pixel tile's output channels
        (dwsep_resident's k_blocks; one per channel tile otherwise); c_split: the blocks of a
        cluster dividing the channels (dwsep_stream, dwsep_halo); tiles: the tiles one block
        walks. dwsep_wgmma's threads are its consumer and producer warpgroups."""
        nan = float("nan")
        tile_m = float(config["tile_h"] * config["tile_w"] if "tile_h" in config
                       else config.get("tile_p", nan))
        tile_n = float(config.get("tile_n", config.get("tile_k", nan)))
        if "producers" in config:  # dwsep_wgmma
            threads = 128.0 * (wgmma_consumers(config) + config["producers"])
        elif "warps_m" in config:  # the mma.sync families
            threads = 32.0 * config["warps_m"] * config["warps_n"]
        else:
            threads = tile_m * tile_n / 16
        return {"threads": threads, "tile_m": tile_m, "tile_n": tile_n,
                "tile_w": float(config.get("tile_w", nan)),
                "tile_k": float(config.get("kc", config.get("chunk", nan))),
                "split": float(config.get("k_blocks", 65536)),
                "c_split": float(config.get("c_split", 1)), "tiles": float(config.get("tiles", 1))}

    def synthetic_us(self, p: DwsepProblem, instance: Any) -> float:
        """A toy bound for SYNTHETIC data: traffic at 2.5 TB/s, CUDA-core FMAs at 30 TFLOP/s
        with the depthwise repeated per K tile, plus launch latency."""
        c = instance.settings
        tiles_k = -(-p.K // c.get("tile_n", c.get("tile_k", p.K)))
        tiles_k = min(tiles_k, c.get("k_blocks", tiles_k))
        work = 2 * p.N * p.P * p.Q * p.MC * (p.R * p.S * tiles_k + p.K)
        return max(p.min_bytes / 2.5e9, work / 30e6) + 5.0

    def vendor_call(self, p: DwsepProblem, flat: Mapping[str, Any]) -> VendorCall:
        import torch

        f = torch.nn.functional
        x = flat["x"].view(p.N, p.H, p.W, p.C).permute(0, 3, 1, 2)
        w_dw = flat["w_dw"].view(p.MC, 1, p.R, p.S)
        w_pw = flat["w_pw"].view(p.K, p.MC, 1, 1)
        scale, shift = flat["scale"].view(1, p.MC, 1, 1), flat["shift"].view(1, p.MC, 1, 1)
        bias = flat["b_pw"] if p.pw_bias else None
        y = flat["y"].view(p.N, p.P, p.Q, p.K).permute(0, 3, 1, 2)
        act = torch_activation(p.activation)

        def run() -> dict[str, Any]:
            d = f.conv2d(x, w_dw, None, stride=p.stride, padding=p.pad, groups=p.C)
            return {"y": f.conv2d(act(d * scale + shift), w_pw, bias)}
        return VendorCall(run, {"y": y})


OPERATOR = register_operator(DwsepForward())
__all__ = ["DwsepForward", "DwsepParams", "OPERATOR", "dwsep_params", "tensor_args",
           "torch_activation", "wgmma_consumers"]
