"""Sweep specs: YAML in, a validated job out, or a SpecError that names the place and the fault.

    name: sd-unet-groupnorm
    operator: groupnorm_bwd       # any registered operator (`farm operators` lists them)
    dtype: bf16                   # bf16 | fp16 | fp32
    priority: 0                   # higher runs first
    problems:                     # one or more sources, each one of:
      - csv: ../networks/groupnorm/sd_unet_64_n8.csv  # relative to this file
      - inline: [{N: 8, C: 320, H: 64, W: 64, G: 32}]
      - generate: {N: [1, 8], C: {start: 128, stop: 1024, mul: 2}, H: [8, 64], W: H, G: 32}
      - synthetic: {count: 200, seed: 0}   # space: coverage for the operator's wider space
    kernels:                      # optional; default: every family of the operator
      - family: gn_twopass
        where: {threads: [256, 512], vec: {min: 4}}
    timing: {min_repeats: 20}     # overrides of farm.timing.TimingPolicy

Fields are the operator's shape record's (a CSV has one column per field; optional ones may
be left out). In `generate`, a field is a value, a list, a range ({start, stop, step} or
{start, stop, mul}, stop included), the name of an earlier field (W: H; G: C for depthwise),
or a word the operator defines (a convolution's padding may be `same`). Fields resolve in
the operator's order. Combinations that break a shape rule (C not divisible by G, ...) are
dropped and counted; a generator that yields nothing valid is an error.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from farm.problems import Problem, ProblemError
from farm.timing import TimingPolicy
from kernels import UnknownFamily, families_for, get_family
from kernels.operator import OperatorSpec
from kernels.registry import UnknownOperator, operator_spec

MAX_GENERATED = 100_000


class SpecError(ValueError):
    """A spec that cannot be queued; `where` names the file and the field or CSV line."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Range(_Strict):
    start: int
    stop: int
    step: int | None = Field(None, ge=1)
    mul: int | None = Field(None, ge=2)

    @model_validator(mode="after")
    def _one_progression(self) -> Range:
        if (self.step is None) == (self.mul is None):
            raise ValueError("a range takes exactly one of step or mul")
        if self.stop < self.start:
            raise ValueError(f"stop={self.stop} is below start={self.start}")
        if self.mul is not None and self.start < 1:
            raise ValueError("a geometric range (mul) must start at 1 or more")
        return self

    def values(self) -> list[int]:
        if self.step is not None:
            return list(range(self.start, self.stop + 1, self.step))
        out, value = [], self.start
        while value <= self.stop:
            out.append(value)
            value *= self.mul
        return out


FieldValues = int | str | list[int | str] | Range


class Synthetic(_Strict):
    count: int = Field(ge=1, le=MAX_GENERATED)
    seed: int = 0
    # one of the operator's shape_spaces: training (its synthetic_shapes), coverage (its wider
    # coverage_shapes), or one it adds (a convolution's stages)
    space: str = "training"


class ProblemSource(_Strict):
    """One of: csv, inline, generate, synthetic."""

    csv: str | None = None
    inline: list[dict[str, Any]] | None = None
    generate: dict[str, FieldValues] | None = None
    synthetic: Synthetic | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> ProblemSource:
        given = [k for k in ("csv", "inline", "generate", "synthetic") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("a problem source takes exactly one of csv, inline, generate, "
                             f"synthetic (got {', '.join(given) or 'none'})")
        return self


class Bounds(_Strict):
    min: int | float | None = None
    max: int | float | None = None


class KernelSelection(_Strict):
    family: str
    where: dict[str, int | float | str | bool | list[int | float | str | bool] | Bounds] = {}


class JobSpec(_Strict):
    name: str = Field(min_length=1, max_length=200)
    operator: str
    dtype: Literal["bf16", "fp16", "fp32"] = "bf16"
    priority: int = 0
    problems: list[ProblemSource] = Field(min_length=1)
    kernels: list[KernelSelection] = []
    timing: TimingPolicy = TimingPolicy()

    @field_validator("operator")
    @classmethod
    def _known_operator(cls, value: str) -> str:
        try:
            operator_spec(value)
        except UnknownOperator as exc:
            raise ValueError(str(exc)) from None
        return value


@dataclass(frozen=True)
class ResolvedSpec:
    """A spec that passed every check, with its problems expanded and deduplicated."""

    spec: JobSpec
    problems: tuple[Problem, ...]
    source: str
    dropped: int  # generated combinations that broke a shape rule

    def record(self) -> dict[str, Any]:
        return {"spec": self.spec.model_dump(mode="json"), "source": self.source,
                "problems": len(self.problems), "dropped": self.dropped}


_TYPE_TAGS = {"int", "str", "float", "bool", "list", "dict", "Range", "Bounds"}


def _location(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, str) and (part in _TYPE_TAGS or "[" in part):
            continue  # the member of a union that pydantic tried, not a place in the file
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def load_spec(path: str | Path) -> ResolvedSpec:
    """Read, validate and expand a spec file; raises SpecError on the first fault found."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "no such spec file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path} line {mark.line + 1}" if mark else str(path)
        raise SpecError(where, f"not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    return resolve_spec(data, path)


def resolve_spec(data: Any, path: Path) -> ResolvedSpec:
    if not isinstance(data, dict):
        raise SpecError(str(path), "a spec is a YAML mapping (name, operator, problems, ...)")
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = next((e for e in errors if e["type"] == "value_error"), errors[0])
        message = first["msg"].removeprefix("Value error, ")
        raise SpecError(f"{path}: {_location(first['loc'])}", message) from exc
    problems: list[Problem] = []
    dropped = 0
    for index, source in enumerate(spec.problems):
        where = f"{path}: problems[{index}]"
        found, skipped = _expand(source, spec, path, where)
        problems.extend(found)
        dropped += skipped
    _check_kernels(spec, path)
    unique = tuple(dict.fromkeys(problems))
    return ResolvedSpec(spec=spec, problems=unique, source=str(path), dropped=dropped)


def _problem(spec: JobSpec, fields: dict[str, Any], where: str) -> Problem:
    try:
        return operator_spec(spec.operator).problem(spec.dtype, fields)
    except ProblemError as exc:
        raise SpecError(where, str(exc)) from exc


def _expand(source: ProblemSource, spec: JobSpec, path: Path,
            where: str) -> tuple[list[Problem], int]:
    if source.csv:
        return _from_csv(path.parent / source.csv, spec, f"{where}.csv"), 0
    if source.inline:
        return [_problem(spec, fields, f"{where}.inline[{i}]")
                for i, fields in enumerate(source.inline)], 0
    if source.synthetic:
        spaces = operator_spec(spec.operator).shape_spaces()
        if source.synthetic.space not in spaces:
            raise SpecError(f"{where}.synthetic.space", f"{spec.operator} has no shape space "
                            f"{source.synthetic.space!r}; its spaces: {', '.join(spaces)}")
        try:
            shapes = spaces[source.synthetic.space](source.synthetic.count,
                                                    source.synthetic.seed)
        except NotImplementedError as exc:
            raise SpecError(f"{where}.synthetic", str(exc)) from None
        return [_problem(spec, fields, f"{where}.synthetic") for fields in shapes], 0
    return _generate(source.generate or {}, spec, f"{where}.generate")


def _from_csv(csv_path: Path, spec: JobSpec, where: str) -> list[Problem]:
    if not csv_path.is_file():
        raise SpecError(where, f"no such CSV file {csv_path}")
    with csv_path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in reader.fieldnames or []]
        reader.fieldnames = header
        record = operator_spec(spec.operator).problem_type
        missing = [f for f in record.FIELDS if f not in header and f not in record.DEFAULTS]
        if missing:
            raise SpecError(f"{where} ({csv_path})",
                            f"the header lacks column(s) {', '.join(missing)}")
        problems = [_problem(spec, row, f"{where} ({csv_path} line {reader.line_num})")
                    for row in reader]
    if not problems:
        raise SpecError(f"{where} ({csv_path})", "the CSV file has no rows")
    return problems


def _order(operator: OperatorSpec) -> tuple[str, ...]:
    return operator.generate_order or operator.fields


def _choices(operator: OperatorSpec, name: str, value: FieldValues, partial: dict[str, Any],
             where: str) -> list[Any]:
    items = value.values() if isinstance(value, Range) else (
        value if isinstance(value, list) else [value])
    texts = operator.problem_type.TEXT_FIELDS.get(name, ())
    out = []
    for item in items:
        derived = None if isinstance(item, int) else operator.generate_value(name, item, partial)
        if isinstance(item, int) or item in texts:
            out.append(item)
        elif derived is not None:
            out.append(derived)
        elif item in partial:
            out.append(partial[item])
        else:
            raise SpecError(f"{where}.{name}", f"{item!r} is neither a value nor an earlier "
                            f"field (fields resolve in the order "
                            f"{', '.join(_order(operator))})")
    return out


def _generate(fields: dict[str, FieldValues], spec: JobSpec,
              where: str) -> tuple[list[Problem], int]:
    operator = operator_spec(spec.operator)
    order, defaults = _order(operator), operator.problem_type.DEFAULTS
    unknown = sorted(set(fields) - set(order))
    if unknown:
        raise SpecError(f"{where}.{unknown[0]}", f"unknown field; {spec.operator} fields are "
                        f"{', '.join(operator.fields)}")
    missing = [f for f in order if f not in fields and f not in defaults]
    if missing:
        raise SpecError(where, f"missing field(s) {', '.join(missing)}")
    partials: list[dict[str, Any]] = [{}]
    for name in order:
        value = fields.get(name, defaults.get(name))
        partials = [{**p, name: v} for p in partials
                    for v in _choices(operator, name, value, p, where)]
        if len(partials) > MAX_GENERATED:
            raise SpecError(where, f"more than {MAX_GENERATED} combinations; narrow the ranges")
    problems, dropped = [], 0
    for fields_ in partials:
        try:
            problems.append(operator.problem(spec.dtype, fields_))
        except ProblemError:
            dropped += 1
    if not problems:
        raise SpecError(where, f"none of the {len(partials)} combinations is a valid shape")
    return problems, dropped


def matches(config: dict[str, Any], where: dict[str, Any]) -> bool:
    """Whether an instance's configuration passes a selection's `where` filter."""
    for name, wanted in where.items():
        value = config.get(name)
        if isinstance(wanted, Bounds):
            if (wanted.min is not None and value < wanted.min) or (
                    wanted.max is not None and value > wanted.max):
                return False
        elif isinstance(wanted, list):
            if value not in wanted:
                return False
        elif value != wanted:
            return False
    return True


def _check_kernels(spec: JobSpec, path: Path) -> None:
    if not spec.kernels:
        return
    for index, selection in enumerate(spec.kernels):
        where = f"{path}: kernels[{index}]"
        try:
            family = get_family(selection.family)
        except UnknownFamily as exc:
            raise SpecError(f"{where}.family", str(exc)) from exc
        if spec.operator not in family.operators:
            served = ", ".join(f.name for f in families_for(spec.operator)) or "none"
            raise SpecError(f"{where}.family", f"family {family.name!r} does not serve "
                            f"{spec.operator}; families that do: {served}")
        fields = family.config_fields(spec.operator)
        for name in selection.where:
            if name not in fields:
                raise SpecError(f"{where}.where.{name}", f"{family.name} has no config field "
                                f"{name!r}; fields: {', '.join(sorted(fields))}")
        if not any(matches(c, selection.where) for c in family.configs(spec.operator)):
            raise SpecError(f"{where}.where", "the filter matches no instance of "
                            f"{family.name} for {spec.operator}")


__all__ = ["JobSpec", "ResolvedSpec", "SpecError", "load_spec", "matches", "resolve_spec"]
