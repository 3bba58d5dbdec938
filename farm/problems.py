"""Problem records: one shape of one operator, validated, with its derived sizes.

Every operator's shape record is a frozen dataclass deriving from `Problem`: its fields are
`op`, the operator's shape fields (FIELDS, in order), then `dtype` and `layout`. The record
says how a mapping of fields (a CSV line, a YAML mapping, the store's JSON) becomes a problem,
what it costs (flops, min_bytes) and how it is named (key, label). Which record serves which
operator is the registry's business (kernels.registry).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from functools import cached_property
from typing import Any, ClassVar

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
MAX_TENSOR_ELEMENTS = 2**31 - 1  # kernels index with 32-bit integers


class ProblemError(ValueError):
    """A shape that no kernel can run: the message names the field and the rule."""


def as_int(name: str, value: Any) -> int:
    """`value` as an int (an integral float or a digit string too), or a ProblemError."""
    if isinstance(value, bool):
        raise ProblemError(f"{name} must be an integer, got {value!r}")
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        value = value.item()  # a NumPy scalar, as pandas gives
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    digits = value.strip().lstrip("-") if isinstance(value, str) else ""
    if digits.isascii() and digits.isdigit():  # "²" is a digit to isdigit(), not to int()
        value = int(value.strip())
    if not isinstance(value, int):
        raise ProblemError(f"{name} must be an integer, got {value!r}")
    return value


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ProblemError(f"unknown {name} {value!r}; known: {', '.join(choices)}")
    return value


class Problem:
    """The base of every operator's shape record (a frozen dataclass with fields op, the
    shape fields, dtype and layout). Subclasses set the class variables and define flops,
    min_bytes and label."""

    FIELDS: ClassVar[tuple[str, ...]]  # the shape fields, in order
    DEFAULTS: ClassVar[dict[str, Any]] = {}  # optional shape fields and their values
    TEXT_FIELDS: ClassVar[dict[str, tuple[str, ...]]] = {}  # shape fields that are names
    OPERATORS: ClassVar[tuple[str, ...]]  # the operators this record describes

    op: str
    dtype: str
    layout: str

    @classmethod
    def from_fields(cls, op: str, dtype: str, fields: Mapping[str, Any]) -> Problem:
        """Build from a mapping of shape fields: extra keys are ignored, optional ones
        defaulted, numbers given as text converted. A `layout` key sets the layout."""
        values: dict[str, Any] = {}
        missing = []
        for name in cls.FIELDS:
            value = fields.get(name)
            if value is None or (isinstance(value, str) and not value.strip()):
                if name not in cls.DEFAULTS:
                    missing.append(name)
                    continue
                value = cls.DEFAULTS[name]
            if name in cls.TEXT_FIELDS:
                value = check_choice(name, str(value).strip(), cls.TEXT_FIELDS[name])
            else:
                value = as_int(name, value)
            values[name] = value
        if missing:
            raise ProblemError(f"missing field(s) {', '.join(missing)}")
        extra = {"layout": str(fields["layout"]).strip()} if (
            "layout" in fields and "layout" not in cls.FIELDS and fields["layout"]) else {}
        return cls(op=op, dtype=dtype, **values, **extra)

    # Identity ------------------------------------------------------------------------------
    def shape(self) -> dict[str, Any]:
        """The shape fields by name, in FIELDS order (what the store keeps as JSON)."""
        return {f: getattr(self, f) for f in self.FIELDS}

    def geometry(self) -> tuple[int, ...]:
        """The numeric shape fields in order: what makes two problems the same shape for
        splits and held-out networks (the same geometry in another layout is the same)."""
        return tuple(getattr(self, f) for f in self.FIELDS if f not in self.TEXT_FIELDS)

    def numbers(self) -> dict[str, int]:
        """Every shape field as a number (a name field as its index among its choices): the
        inputs of the selection models' features."""
        return {f: (self.TEXT_FIELDS[f].index(v) if f in self.TEXT_FIELDS else v)
                for f, v in self.shape().items()}

    def number_values(self) -> tuple[int, ...]:
        """numbers(), values only, in FIELDS order (computed once per problem)."""
        return self._number_values

    @cached_property
    def _number_values(self) -> tuple[int, ...]:
        return tuple(self.numbers().values())

    def record(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @cached_property
    def key(self) -> str:
        """A hash of every field: two problems share it only if they are the same problem."""
        text = json.dumps(self.record(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def flops(self) -> int:
        raise NotImplementedError

    @property
    def min_bytes(self) -> int:
        """The bytes a kernel must move at least: every input read and output written once."""
        raise NotImplementedError

    def label(self) -> str:
        return " ".join(f"{f}{v}" for f, v in self.shape().items())

    def check_common(self) -> None:
        """The checks every record makes: operator and element type."""
        if self.op not in self.OPERATORS:
            raise ProblemError(f"unknown operator {self.op!r}; known: "
                               f"{', '.join(self.OPERATORS)}")
        if self.dtype not in DTYPE_BYTES:
            raise ProblemError(f"unknown dtype {self.dtype!r}; known: {', '.join(DTYPE_BYTES)}")


def problem_from_fields(op: str, dtype: str, fields: Mapping[str, Any]) -> Problem:
    """The problem record of any registered operator."""
    from kernels.registry import UnknownOperator, operator_spec

    try:
        spec = operator_spec(op)
    except UnknownOperator as exc:
        raise ProblemError(str(exc)) from None
    return spec.problem_type.from_fields(op, dtype, fields)


def problem_from_store(op: str, dtype: str, layout: str, shape: Mapping[str, Any]) -> Problem:
    """A problem as the store or a recording keeps it: its shape fields and layout."""
    return problem_from_fields(op, dtype, {**shape, "layout": layout})
