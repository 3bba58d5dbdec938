"""The operators and kernel families the farm knows, by name. An operator's package registers
its OperatorSpecs and its families' descriptors on import. The farm imports its own packages
(OPERATOR_PACKAGES) and every module that an installed distribution names under the entry
point groups `kernel_farm.operators` and `kernel_farm.families`: another package adds an
operator or a family by declaring one there (docs/adding-an-operator.md)."""

from __future__ import annotations

import importlib
import logging
from importlib import metadata
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kernels.family import KernelFamily
    from kernels.operator import OperatorSpec

OPERATOR_PACKAGES: tuple[str, ...] = ("kernels.conv", "kernels.groupnorm", "kernels.dwsep",
                                     "kernels.vendor")
ENTRY_POINT_GROUPS = ("kernel_farm.operators", "kernel_farm.families")
_FAMILIES: dict[str, KernelFamily] = {}
_OPERATORS: dict[str, OperatorSpec] = {}
_loaded = False
log = logging.getLogger(__name__)


class UnknownFamily(LookupError):
    """A kernel family name the farm does not know."""


class UnknownOperator(LookupError):
    """An operator name the farm does not know."""


def register(family: KernelFamily) -> KernelFamily:
    _FAMILIES[family.name] = family
    return family


RESERVED_FIELDS = frozenset({"op", "operator", "dtype", "key", "id", "flops", "min_bytes",
                             "problem_id", "problem_key", "kernel", "family", "status"})


def register_operator(spec: OperatorSpec) -> OperatorSpec:
    """Add an operator; its shape fields must not take a name the store's rows use."""
    clash = sorted(RESERVED_FIELDS & set(spec.problem_type.FIELDS))
    if clash:
        raise ValueError(f"operator {spec.name}: shape field(s) {', '.join(clash)} clash with "
                         "the names of the farm's own columns; rename them")
    _OPERATORS[spec.name] = spec
    return spec


def plugin_modules() -> list[str]:
    """The modules installed distributions declare under ENTRY_POINT_GROUPS."""
    found = []
    for group in ENTRY_POINT_GROUPS:
        found += [entry.value for entry in metadata.entry_points(group=group)]
    return list(dict.fromkeys(found))


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in OPERATOR_PACKAGES:
        importlib.import_module(module)
    for module in plugin_modules():
        try:
            importlib.import_module(module.split(":")[0])
        except Exception as exc:  # a broken plugin must not take the farm down with it
            log.warning("plugin module %s failed to load: %s", module, exc)


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


def operators() -> dict[str, OperatorSpec]:
    _load()
    return dict(_OPERATORS)


def operator_names() -> list[str]:
    """The operators the farm knows, sorted."""
    return sorted(operators())


def operator_spec(name: str) -> OperatorSpec:
    """What `name` computes: its shape record, tensors, reference and tolerance."""
    known = operators()
    if name not in known:
        raise UnknownOperator(f"unknown operator {name!r}; known: {', '.join(sorted(known))}")
    return known[name]
