"""The gn_onepass and gn_twopass families of groupnorm_bwd: descriptors over plan.py's config
spaces, applicability rules, workspace sizes and launch geometry (sources onepass.cu and
twopass.cu)."""

from __future__ import annotations

from typing import Any

from kernels.family import Config, Instance, KernelFamily, Launch
from kernels.groupnorm import plan
from kernels.groupnorm.problem import GN_OPERATORS, GroupNormProblem
from kernels.registry import register


class GroupNormFamily(KernelFamily):
    """One of plan.FAMILIES. Config fields: layout (0 NHWC, 1 NCHW), threads, vec, and cpt
    (gn_onepass: channels per thread) or split_hw (gn_twopass: chunks of H*W, chosen at launch
    time: instances differing only in it share one code object, as defines() leaves it out)."""

    operators = GN_OPERATORS

    def __init__(self, name: str) -> None:
        if name not in plan.FAMILIES:
            raise ValueError(f"unknown family {name!r}; known: {', '.join(plan.FAMILIES)}")
        self.name = name
        self.short = name.removeprefix("gn_")
        self.source_file = plan.SOURCES[name]

    def configs(self, operator: str) -> list[dict[str, Any]]:
        """Every configuration of any element type (16-bit types allow the widest vectors);
        instances() keeps those a type can have."""
        return plan.configs(self.name, "bf16") if operator in self.operators else []

    def instances(self, operator: str, dtype: str) -> list[Instance]:
        """The configurations that exist for `dtype`: one access is at most 16 bytes (no
        vec=8 in fp32)."""
        widths = plan.vector_widths(dtype)
        return [i for i in super().instances(operator, dtype) if i.settings["vec"] in widths]

    def instance_name(self, operator: str, dtype: str, config: Config) -> str:
        return plan.instance_name(self.name, dtype, dict(config))

    def defines(self, instance: Instance) -> dict[str, int | str]:
        return dict(plan.defines(self.name, instance.dtype, instance.settings))

    def applicable(self, instance: Instance, problem: Any) -> str | None:
        if problem.op not in self.operators:
            return f"{self.name} computes {', '.join(self.operators)}, not {problem.op}"
        return plan.applicable(self.name, instance.settings, problem, instance.dtype)

    def workspace_bytes(self, instance: Instance, problem: GroupNormProblem) -> int:
        return plan.workspace_bytes(self.name, instance.settings, problem)

    def launches(self, instance: Instance, problem: GroupNormProblem) -> list[Launch]:
        return plan.launches(self.name, instance.settings, problem)


FAMILIES = {name: register(GroupNormFamily(name)) for name in plan.FAMILIES}
__all__ = ["FAMILIES", "GroupNormFamily"]
