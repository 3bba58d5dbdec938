"""What the dashboard shows of a shape, as its operator's record says it (kernels.registry): the
label (Problem.label), the coarse class (OperatorSpec.shape_class) and the fields to filter and
plot on (OperatorSpec.shape_columns). Labels and classes are computed once per distinct problem.
A problem of an operator this installation does not know is labelled by its key."""

from __future__ import annotations

import functools
from typing import Any

import pandas as pd

from farm.problems import ProblemError, problem_from_store
from kernels.registry import UnknownOperator, operator_spec

UNKNOWN = "unknown"  # the class of a problem whose operator or shape this install cannot read


@functools.cache
def fields(operator: str) -> tuple[str, ...]:
    """The operator's shape fields (() for an operator this installation does not know)."""
    try:
        return operator_spec(operator).fields
    except UnknownOperator:
        return ()


@functools.cache
def columns(operator: str) -> tuple[str, ...]:
    """The fields the dashboard shows and filters on for the operator."""
    try:
        return operator_spec(operator).shape_columns
    except UnknownOperator:
        return ()


@functools.cache
def text_fields(operator: str) -> tuple[str, ...]:
    """The operator's shape fields that are names (a layout), not numbers."""
    try:
        return tuple(operator_spec(operator).problem_type.TEXT_FIELDS)
    except UnknownOperator:
        return ()


def union(operators: list[str] | tuple[str, ...], of=columns) -> list[str]:
    """The fields of several operators, each once, in the order they first appear."""
    return list(dict.fromkeys(f for op in operators for f in of(op)))


@functools.lru_cache(maxsize=1 << 16)
def described(operator: str, dtype: str, layout: str,
              shape: tuple[tuple[str, Any], ...]) -> tuple[str, str] | None:
    """(label, class) of one problem; None where the record refuses it."""
    try:
        problem = problem_from_store(operator, dtype, layout, dict(shape))
        return problem.label(), operator_spec(operator).shape_class(problem)
    except (ProblemError, UnknownOperator):
        return None


def _problem_descriptions(firsts: pd.DataFrame, key: str, operator: str, dtype: str
                          ) -> dict[Any, tuple[str, str]]:
    """(label, class) by problem key, for rows of one operator and dtype."""
    names, text = fields(operator), text_fields(operator)
    absent = pd.Series(None, index=firsts.index, dtype=object)
    layouts = firsts["layout"] if "layout" in firsts else absent.fillna("")
    out = {}
    for problem, layout, *values in zip(firsts[key], layouts,
                                        *(firsts[f] if f in firsts else absent for f in names)):
        try:  # a field the problem's JSON lacks (NaN here) takes the record's default
            shape = tuple((f, str(v) if f in text else int(v)) for f, v in zip(names, values)
                          if not pd.isna(v))
        except (TypeError, ValueError):
            continue
        found = described(operator, dtype, str(layout), shape)
        if found:
            out[problem] = found
    return out


def describe(frame: pd.DataFrame, operator: str | None = None,
             dtype: str | None = None) -> pd.DataFrame:
    """`frame` (one row per problem or per timing, with problem_key, layout and the shape
    fields) with a `shape` label and a `class` column. The operator and dtype come from the
    frame's own columns where it has them, else from the arguments."""
    key = "problem_key" if "problem_key" in frame.columns else "problem_id"
    firsts = frame.drop_duplicates(key)
    firsts = firsts.assign(**{c: firsts[c] if c in firsts else v for c, v in
                              (("operator", operator), ("dtype", dtype))})
    found: dict[Any, tuple[str, str]] = {}
    for (op, dt), part in firsts.groupby(["operator", "dtype"], sort=False):
        found.update(_problem_descriptions(part, key, str(op), str(dt)))
    keys = frame[key]
    return frame.assign(
        shape=keys.map(lambda k: found[k][0] if k in found else str(k)[:12]).astype(str),
        **{"class": keys.map(lambda k: found[k][1] if k in found else UNKNOWN).astype(str)})
