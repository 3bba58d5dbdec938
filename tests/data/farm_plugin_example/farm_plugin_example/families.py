"""The kernel families of rowsum_fwd (source rowsum.cu, a resource of this package):
rowsum_thread sums a row per thread, rowsum_lanes a row per `lanes` threads side by side."""

from __future__ import annotations

from typing import Any

from farm.problems import DTYPE_BYTES
from farm_plugin_example.operator import SOURCE
from farm_plugin_example.problem import OPERATORS, RowSumProblem
from kernels.family import Instance, KernelFamily, Launch, grid_stride_blocks
from kernels.registry import register

VECTORS = (1, 2, 4, 8)  # elements per load; one load is at most 16 bytes


class RowSumFamily(KernelFamily):
    """Config fields: threads (per block) and vec, rowsum_lanes also lanes (threads per row);
    each becomes a define of the same name, upper-cased (KernelFamily.defines)."""

    operators = OPERATORS
    source_file = SOURCE

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        """The configurations whose loads fit in 16 bytes of `dtype`."""
        return [i for i in super().instances(operator, dtype)
                if i.settings["vec"] * DTYPE_BYTES[dtype] <= 16]

    def applicable(self, instance: Instance, problem: Any) -> str | None:
        if problem.op not in self.operators:
            return f"{self.name} computes {', '.join(self.operators)}, not {problem.op}"
        if instance.dtype != problem.dtype:
            return f"instance is for {instance.dtype}, problem is {problem.dtype}"
        vec = instance.settings["vec"]
        if problem.cols % vec:
            return f"cols={problem.cols} is not a multiple of vec={vec} (aligned vector loads)"
        return None


class RowPerThread(RowSumFamily):
    name = "rowsum_thread"
    short = "thread"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        if operator not in self.operators:
            return []
        return [{"threads": t, "vec": v} for t in (64, 256) for v in VECTORS]

    def launches(self, instance: Instance, problem: RowSumProblem) -> list[Launch]:
        threads = instance.settings["threads"]
        return [Launch("rowsum_thread", (-(-problem.rows // threads), 1, 1), (threads, 1, 1),
                       ("x", "y", problem.rows, problem.cols))]


class RowPerLanes(RowSumFamily):
    name = "rowsum_lanes"
    short = "lanes"

    def configs(self, operator: str) -> list[dict[str, Any]]:
        if operator not in self.operators:
            return []
        return [{"threads": t, "lanes": n, "vec": v} for t in (128, 512) for n in (8, 32, 128)
                for v in VECTORS]

    def launches(self, instance: Instance, problem: RowSumProblem) -> list[Launch]:
        """threads / lanes rows per block, a grid-stride loop over the rows."""
        threads, lanes = instance.settings["threads"], instance.settings["lanes"]
        rows_per_block = threads // lanes
        blocks = grid_stride_blocks(problem.rows, rows_per_block, per_sm=2048 // threads)
        return [Launch("rowsum_lanes", (blocks, 1, 1), (threads, 1, 1),
                       ("x", "y", problem.rows, problem.cols))]


FAMILIES = (register(RowPerThread()), register(RowPerLanes()))
