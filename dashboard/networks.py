"""Which networks a shape occurs in, from its operator's problem sets of real networks
(OperatorSpec.networks_dir: CSV files with a `network` column). A shape is matched on its
geometry without the batch size N, so a layer is found at any batch."""

from __future__ import annotations

import functools

import pandas as pd

BATCH = "N"  # the batch-size field, left out of the match


@functools.cache
def signature(operator: str) -> tuple[str, ...]:
    """The fields a shape is matched on: its geometry (numeric shape fields) but the batch."""
    from farm.select.data import geometry_fields
    from kernels.registry import UnknownOperator

    try:
        return tuple(f for f in geometry_fields(operator) if f != BATCH)
    except UnknownOperator:
        return ()


@functools.cache
def catalogue(operator: str) -> dict[tuple[int, ...], frozenset[str]]:
    """Signature -> the networks with a layer of that shape (empty for an operator without
    network tables)."""
    from farm.select.data import geometry_fields, network_membership
    from kernels.registry import UnknownOperator

    try:
        geometry = geometry_fields(operator)
        membership = network_membership(operator)
    except UnknownOperator:
        return {}
    keep = [i for i, f in enumerate(geometry) if f != BATCH]
    found: dict[tuple[int, ...], set[str]] = {}
    for shape, nets in membership.items():
        found.setdefault(tuple(shape[i] for i in keep), set()).update(nets)
    return {k: frozenset(v) for k, v in found.items()}


def names(operators: list[str] | tuple[str, ...]) -> list[str]:
    """The networks of these operators' tables, sorted."""
    return sorted({n for op in operators for nets in catalogue(op).values() for n in nets})


def memberships(frame: pd.DataFrame, operator: str) -> pd.Series:
    """Per row of a frame of the operator's shapes (one column per shape field): the networks
    its shape occurs in, as a frozenset (empty if none)."""
    known, fields = catalogue(operator), list(signature(operator))
    if frame.empty or not known or not set(fields) <= set(frame.columns):
        return pd.Series([frozenset()] * len(frame), index=frame.index, dtype=object)
    keys = frame[fields].itertuples(index=False, name=None)
    return pd.Series([known.get(tuple(map(int, k)), frozenset()) for k in keys],
                     index=frame.index, dtype=object)


def text(nets: pd.Series) -> pd.Series:
    """Memberships as comma-separated names ('' if none)."""
    return nets.map(lambda n: ", ".join(sorted(n))).astype(str)


def in_networks(nets: pd.Series, chosen: list[str]) -> pd.Series:
    """Rows whose memberships meet any of `chosen` (all rows when nothing is chosen)."""
    if not chosen:
        return pd.Series(True, index=nets.index)
    wanted = frozenset(chosen)
    return nets.map(lambda n: bool(n & wanted)).astype(bool)
