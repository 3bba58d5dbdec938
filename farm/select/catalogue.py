"""The instances a selection model chooses among: every compiled family of an operator except the
vendor library (a baseline, never chosen) and the farm's test families, with the registers and
shared memory of each instance's compiled code object where the compile cache has them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kernels.family import Instance, KernelFamily
from kernels.registry import families_for, get_family

NEVER_CHOSEN = ("vendor",)
RESOURCE_KEYS = ("registers", "shared_bytes", "spill_bytes")
ResourceLookup = Callable[[Instance], Mapping[str, float]]


def candidate_families(operator: str) -> list[KernelFamily]:
    """Families a model may choose for `operator`, in registry order."""
    return [f for f in families_for(operator)
            if f.compiled and f.name not in NEVER_CHOSEN
            and not type(f).__module__.startswith("kernels.testing")]


@dataclass(frozen=True)
class CatalogueEntry:
    """One candidate instance as the bundle stores it (enough to rebuild the Instance)."""

    name: str
    family: str
    operator: str
    dtype: str
    config: tuple[tuple[str, Any], ...]
    source_hash: str
    resources: tuple[tuple[str, float], ...] = ()
    # (low, high) of each numeric shape field on which it ran in training (farm.select.guard);
    # empty: in support everywhere
    support: tuple[tuple[float, float], ...] = ()

    @classmethod
    def of(cls, instance: Instance, resources: Mapping[str, float] | None = None
           ) -> CatalogueEntry:
        kept = tuple((k, float(resources[k])) for k in RESOURCE_KEYS
                     if resources and resources.get(k) is not None)
        return cls(instance.name, instance.family, instance.operator, instance.dtype,
                   instance.config, instance.source_hash, kept)

    def instance(self) -> Instance:
        return Instance(family=self.family, operator=self.operator, dtype=self.dtype,
                        config=self.config, name=self.name, source_hash=self.source_hash)

    def record(self) -> dict[str, Any]:
        return {"name": self.name, "family": self.family, "operator": self.operator,
                "dtype": self.dtype, "config": dict(self.config),
                "source_hash": self.source_hash, "resources": dict(self.resources),
                **({"support": [list(b) for b in self.support]} if self.support else {})}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> CatalogueEntry:
        return cls(r["name"], r["family"], r["operator"], r["dtype"],
                   tuple(r["config"].items()), r["source_hash"],
                   tuple(r.get("resources", {}).items()),
                   tuple((float(lo), float(hi)) for lo, hi in r.get("support", ())))


def no_resources(instance: Instance) -> dict[str, float]:
    return {}


def compile_cache_resources(arch: str, cache: Any = None) -> ResourceLookup:
    """Resources of each instance's code object in the compile cache (FolderCache by default):
    the entry named after the operator where the module has it, else the module's maxima.
    Without the compiler package (its version is part of the cache key) nothing is found."""
    from farm.compile import OPTIONS, FolderCache, cache_key
    from farm.gpu import RuntimeUnavailable, get_compiler
    from farm.worker import target_of

    target = target_of({"arch": arch})
    try:
        compiler = get_compiler(target)
        compiler.version()
    except (RuntimeUnavailable, ValueError, RuntimeError, OSError):
        return no_resources
    cache = cache or FolderCache()

    def lookup(instance: Instance) -> dict[str, float]:
        family = get_family(instance.family)
        key = cache_key(family.source(), family.defines(instance), OPTIONS, compiler, target)
        found = cache.get(key)
        if found is None:
            return {}
        res = found.resources or {}
        return dict(res.get("kernels", {}).get(instance.operator, res))
    return lookup


def build_catalogue(operator: str, dtype: str, names: Iterable[str] | None = None,
                    resources: ResourceLookup = no_resources) -> list[CatalogueEntry]:
    """Candidate instances of `operator` and `dtype` (only `names`, if given), registry order."""
    wanted = None if names is None else set(names)
    return [CatalogueEntry.of(i, resources(i)) for f in candidate_families(operator)
            for i in f.instances(operator, dtype) if wanted is None or i.name in wanted]


def catalogue_json(entries: Iterable[CatalogueEntry]) -> str:
    return json.dumps([e.record() for e in entries], indent=1, sort_keys=True)
