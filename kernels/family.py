"""The descriptor every kernel family provides: its operators and its configuration space."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any

Config = Mapping[str, Any]


class KernelFamily(abc.ABC):
    """One algorithm for one or more operators, instantiated by configuration."""

    name: str
    operators: tuple[str, ...]

    @abc.abstractmethod
    def configs(self, operator: str) -> list[dict[str, Any]]:
        """Every instance's configuration for `operator`, generated from the family's rules."""

    def config_fields(self, operator: str) -> dict[str, tuple[Any, ...]]:
        """Each configuration field and the values its instances take."""
        fields: dict[str, set[Any]] = {}
        for config in self.configs(operator):
            for key, value in config.items():
                fields.setdefault(key, set()).add(value)
        return {k: tuple(sorted(v, key=repr)) for k, v in fields.items()}
