"""The families the farm knows, by name. A family module registers itself on import."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernels.family import KernelFamily
    from kernels.operator import OperatorSpec

FAMILY_MODULES: tuple[str, ...] = ("kernels.conv.naive", "kernels.conv.igemm", "kernels.conv.direct",
                                   "kernels.vendor")
_FAMILIES: dict[str, KernelFamily] = {}


class UnknownFamily(LookupError):
    """A kernel family name the farm does not know."""


def register(family: KernelFamily) -> KernelFamily:
    _FAMILIES[family.name] = family
    return family


def _load() -> None:
    for module in FAMILY_MODULES:
        importlib.import_module(module)


def families() -> dict[str, KernelFamily]:
    _load()
    return dict(_FAMILIES)


def get_family(name: str) -> KernelFamily:
    known = families()
    if name not in known:
        listed = ", ".join(sorted(known)) or "none registered"
        raise UnknownFamily(f"unknown kernel family {name!r}; known: {listed}")
    return known[name]


def families_for(operator: str) -> list[KernelFamily]:
    return [f for f in families().values() if operator in f.operators]


def operator_names() -> list[str]:
    """The operators the farm knows, sorted."""
    from kernels.conv.operator import OPERATORS

    return sorted(OPERATORS)


def operator_spec(name: str) -> OperatorSpec:
    """What `name` computes: its tensors, reference and tolerance."""
    from kernels.conv.operator import OPERATORS

    if name not in OPERATORS:
        raise LookupError(f"unknown operator {name!r}; known: {', '.join(operator_names())}")
    return OPERATORS[name]
