"""The families' applicability rules, answered for a whole catalogue at once.

A family's rule key is what its `applicable` reads of a shape, reduced to the few values that
decide it: two shapes of the same key are served by the same instances of the family (in a
catalogue of that family's instances: the key may use their configurations). RuleMasks keeps
each family's answer per key, computed by the family's own rules on the first shape of that
key, so the mask of a new shape costs the keys and a lookup (one asked again, the lookup of the
problem), and is exactly the rules' answer where every family has a key. The keys live with
their operators: the `rulekeys` module of a family's package maps family names to key makers
(KEYS) and may key a family together with another (SHARED). A family without a key is left
to the rules: its instances are kept in the mask where their compiled case (a necessary
condition) allows, and the caller checks them one at a time (`RuleMask.exact` is False while
one of them is in).

tests/test_select_rulekeys.py checks every operator's families, on random and recorded
shapes, against their rules: a rule that comes to read more of a shape than its key fails it.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels.family import Instance, KernelFamily
from kernels.registry import get_family

RuleKey = Callable[[Any], Hashable]
CACHE_LIMIT = 1 << 14  # masks kept per family and in all; past it they are computed afresh


def at_least(values: Sequence[int], limit: int) -> int:
    """How many of the sorted `values` are at least `limit`."""
    return len(values) - bisect_left(values, limit)


def above(values: Sequence[int], limit: int) -> int:
    """How many of the sorted `values` are above `limit`."""
    return len(values) - bisect_right(values, limit)


def settings_of(instances: Sequence[Instance], field: str) -> list[Any]:
    return sorted({i.settings[field] for i in instances})


def _operator_keys(family: KernelFamily) -> Any:
    """The rule keys' module of the family's operator package (its `rulekeys`), or None."""
    return _package_keys(type(family).__module__.rpartition(".")[0])


@functools.cache
def _package_keys(package: str) -> Any:
    try:
        return importlib.import_module(f"{package}.rulekeys")
    except ModuleNotFoundError as missing:
        if missing.name != f"{package}.rulekeys":
            raise
        return None


def shared_with(name: str) -> str:
    """The family whose key also serves `name`'s instances (SHARED of its package), or itself."""
    module = _operator_keys(get_family(name))
    return getattr(module, "SHARED", {}).get(name, name)


def rule_keys(family: KernelFamily, instances: Sequence[Instance], operator: str
              ) -> list[tuple[list[Instance], RuleKey]] | None:
    """The family's rule keys over `instances` (its own, of `operator`, and those of the
    families SHARED with it): each for some of them; None where it has none. A family without
    rules of its own has one key for every shape."""
    if type(family).applicable is KernelFamily.applicable:
        return [(list(instances), lambda p: None)]
    maker = getattr(_operator_keys(family), "KEYS", {}).get(family.name)
    if maker is None:
        return None
    made = maker(family, instances, operator)
    return [(list(instances), made)] if callable(made) else made


@dataclass(frozen=True)
class RuleMask:
    """The candidates a shape allows: one byte each (catalogue order), where `address`
    points."""

    mask: np.ndarray
    exact: bool  # the rules' answer for every candidate; else some are left to the rules
    address: ctypes.c_void_p


class RuleMasks:
    """The mask of a catalogue's instances for a shape (the same `operator` and dtype): exact
    for the families with a rule key, each family's rules evaluated once per key; the others'
    instances kept where their compiled case allows (a necessary condition: `unsure`)."""

    def __init__(self, instances: Sequence[Instance], operator: str) -> None:
        self.count = len(instances)
        self.rules = [get_family(i.family) for i in instances]
        rows: dict[str, list[int]] = {}
        for r, i in enumerate(instances):
            rows.setdefault(shared_with(i.family), []).append(r)
        self.instances = list(instances)
        self.keyed: list[tuple[RuleKey, np.ndarray, dict]] = []
        self.cased: list[tuple[Any, np.ndarray]] = []
        self.unsure = np.zeros(self.count, bool)
        for name, members in rows.items():
            family, index = get_family(name), np.array(members)
            keys = rule_keys(family, [instances[r] for r in members], operator)
            if keys is not None:
                where = {id(instances[r]): r for r in members}
                self.keyed += [(key, np.array([where[id(i)] for i in part]), {})
                               for part, key in keys]
                continue
            self.unsure[index] = True
            for member in {instances[r].family for r in members}:
                own = get_family(member)
                if type(own).compiled_case is not KernelFamily.compiled_case:
                    self.cased.append((own, np.array([r for r in members
                                                      if instances[r].family == member])))
        self.keys = [key for key, _, _ in self.keyed]
        self.masks: dict[tuple, RuleMask] = {}
        self.shapes: dict[Any, RuleMask] = {}  # by problem (every field: a frozen record)

    def __call__(self, problem: Any) -> RuleMask:
        """The problem's mask: kept per problem, so a shape asked again costs no keys."""
        found = self.shapes.get(problem)
        if found is None:
            found = self._keyed(problem)
            if len(self.shapes) >= CACHE_LIMIT:
                self.shapes.clear()
            self.shapes[problem] = found
        return found

    def _keyed(self, problem: Any) -> RuleMask:
        """The problem's mask by its keys: kept per key, the rules asked on a new one."""
        key = tuple([k(problem) for k in self.keys])
        if self.cased:
            key += tuple(tuple(f.compiled_case(problem).items()) for f, _ in self.cased)
        found = self.masks.get(key)
        if found is None:
            found = self.masks[key] = self._mask(problem, key)
            if len(self.masks) > CACHE_LIMIT:
                self.masks.clear()
                self.masks[key] = found
        return found

    def _mask(self, problem: Any, key: tuple) -> RuleMask:
        mask = np.ones(self.count, np.uint8)
        for (_, rows, seen), part in zip(self.keyed, key):
            allowed = seen.get(part)
            if allowed is None:
                allowed = np.array([self.rules[r].applicable(self.instances[r], problem) is None
                                    for r in rows], np.uint8)
                if len(seen) >= CACHE_LIMIT:
                    seen.clear()
                seen[part] = allowed
            mask[rows] = allowed
        for family, rows in self.cased:
            case = family.compiled_case(problem)
            for r in rows:
                settings = self.instances[r].settings
                if any(settings.get(field) != value for field, value in case.items()):
                    mask[r] = 0
        return RuleMask(mask, not (mask.astype(bool) & self.unsure).any(),
                        ctypes.c_void_p(mask.ctypes.data))
