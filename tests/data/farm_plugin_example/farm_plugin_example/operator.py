"""rowsum_fwd as an operator: tensors, nonnegative inputs, GPU reference, tolerance, the shapes
a sweep generates, the selection features, a toy cost model for SYNTHETIC data and PyTorch's
call."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from typing import Any

from farm_plugin_example.problem import RowSumProblem
from kernels.family import Launch
from kernels.operator import OperatorSpec, Tensor, VendorCall
from kernels.registry import register_operator

SOURCE = "farm_plugin_example:rowsum.cu"  # a resource of this package (kernels/source.py)
REFERENCE_BLOCK = 128

# The selection features of a shape (names: rows, cols and the device constants), then their
# interactions with the instance columns threads, vec and tile_m (the rows one block sums).
SHAPE_FORMULAS = (
    ("elements", "rows * cols"),
    ("bytes", "elem_bytes * (elements + rows)"),
    ("row_bytes", "elem_bytes * cols"),
    ("l2_fit", "bytes / l2_bytes"),
    ("roofline_us", "bytes / (bandwidth_gbps * 1e3)"),
)
INTERACTIONS = (
    ("row_vectors", "cols / vec"),
    ("vectors_per_thread", "row_vectors * tile_m / threads"),
    ("idle_lanes", "vmax(threads / tile_m - row_vectors, 0)"),
    ("blocks", "cdiv(rows, tile_m)"),
    ("waves", "blocks / (sm_count * occupancy)"),
)


class RowSum(OperatorSpec):
    name = "rowsum_fwd"
    problem_type = RowSumProblem
    reference_source = SOURCE
    generate_order = ("rows", "cols")
    shape_formulas = SHAPE_FORMULAS
    interactions = INTERACTIONS

    def tensors(self, p: RowSumProblem) -> list[Tensor]:
        return [Tensor("x", p.elements, "input"), Tensor("y", p.rows, "output")]

    def reference_launches(self, p: RowSumProblem) -> list[Launch]:
        """rowsum_reference: one thread per row (a grid-stride loop), sums in fp64."""
        blocks = min(-(-p.rows // REFERENCE_BLOCK), 65535)
        return [Launch("rowsum_reference", (blocks, 1, 1), (REFERENCE_BLOCK, 1, 1),
                       ("x", "y", p.rows, p.cols))]

    def input_launches(self, p: RowSumProblem) -> list[Launch]:
        """x = |x| (rowsum_inputs), so that no row of the random fill sums to almost nothing:
        the tolerance holds for the sum's own size (see rowsum.cu)."""
        blocks = min(-(-p.elements // 256), 132 * 16)
        return [Launch("rowsum_inputs", (blocks, 1, 1), (256, 1, 1), ("x", p.elements))]

    def reduction_length(self, p: RowSumProblem, output: str | None = None) -> int:
        return p.cols

    def synthetic_shapes(self, count: int, seed: int) -> list[dict[str, Any]]:
        return synthetic_shapes(count, seed)

    def synthetic_us(self, p: RowSumProblem, instance: Any) -> float:
        return synthetic_us(p, instance)

    def shape_class(self, p: RowSumProblem) -> str:
        """narrow rows (fewer than 256 elements) or wide ones."""
        return "narrow" if p.cols < 256 else "wide"

    def instance_features(self, config: Mapping[str, Any]) -> dict[str, float]:
        """threads and vec as they are; tile_m: the rows one block sums (rowsum_thread: one
        per thread; rowsum_lanes: threads / lanes) and rowsum_lanes' shared memory."""
        threads, vec = config["threads"], config["vec"]
        if "lanes" not in config:
            return {"threads": threads, "vec": vec, "tile_m": threads}
        return {"threads": threads, "vec": vec, "tile_m": threads // config["lanes"],
                "static_shared_bytes": 4 * threads}

    def vendor_call(self, p: RowSumProblem, tensors: Mapping[str, Any]) -> VendorCall:
        """torch.sum over the rows of x (fp32 accumulation, the element type out)."""
        import torch

        x = tensors["x"].view(p.rows, p.cols)
        return VendorCall(lambda: {"y": torch.sum(x, dim=1)}, {"y": tensors["y"]})


# Synthetic shapes and a toy cost model, for SYNTHETIC measurements only -------------------------
_ROWS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144)
_COLS = (7, 32, 64, 100, 128, 250, 256, 768, 1000, 1024, 4096, 8192, 32000, 50257, 65536)
_MAX_ELEMENTS = 2**26
_BANDWIDTH, _SMS = 3350e9, 132
_VEC_RATE = {8: 1.0, 4: 0.85, 2: 0.6, 1: 0.4}


def synthetic_shapes(count: int, seed: int = 0) -> list[dict[str, Any]]:
    """`count` distinct shapes (fewer if the space runs out), the same for a seed: batches of
    1 to 256K rows of 7 to 64K elements (hidden sizes, vocabularies), at most 2^26 elements."""
    rng = random.Random(seed)
    shapes: dict[tuple[int, int], dict[str, Any]] = {}
    for _ in range(50 * count):
        if len(shapes) >= count:
            break
        rows, cols = rng.choice(_ROWS), rng.choice(_COLS)
        if rows * cols <= _MAX_ELEMENTS:
            shapes.setdefault((rows, cols), {"rows": rows, "cols": cols})
    return list(shapes.values())


def synthetic_us(p: RowSumProblem, instance: Any) -> float:
    """Invented latency (never a measurement), bandwidth-bound: rowsum_thread needs many rows
    to fill the GPU and its warps read 32 rows at once (strided); rowsum_lanes reads a row with
    `lanes` threads side by side but leaves lanes idle on short rows and pays for its
    reduction."""
    c = instance.settings
    rate = _VEC_RATE[c["vec"]]
    if "lanes" not in c:
        fill = min(1.0, p.rows / (_SMS * 1024)) ** 0.8
        strided = 0.3 + 0.7 * min(1.0, 16 / p.cols)
        return p.min_bytes / (_BANDWIDTH * rate * fill * strided) * 1e6 + 2.5
    lanes = c["lanes"]
    fill = min(1.0, p.rows * lanes / (_SMS * 2048)) ** 0.6
    busy = min(1.0, p.cols / (c["vec"] * lanes))
    reduce_us = p.rows * lanes / (_SMS * 2048) * 0.01 * math.log2(lanes)
    seconds = p.min_bytes / (_BANDWIDTH * 0.9 * rate * fill * max(busy, 0.05))
    return seconds * 1e6 + reduce_us + 3.0


OPERATOR = register_operator(RowSum())
