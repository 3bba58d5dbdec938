"""Kernel families: C++ sources compiled per instance, each with a Python descriptor."""

from kernels.registry import (UnknownFamily, families, families_for, get_family, operator_spec,
                              register)

__all__ = ["UnknownFamily", "families", "families_for", "get_family", "operator_spec",
           "register"]
