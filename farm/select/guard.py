"""Guarded choices: a model does not pick a reference-speed family (conv_naive) or an instance
asked about a shape far outside what it was measured on, where a safer candidate is among its
`depth` best.

A candidate's support is, per numeric shape field, the range of that field over the training
problems on which it ran (an `ok` time, allowed by its rules), widened by a factor of two at
each end ((1 + v) halved and doubled, so that zeros widen too). A shape inside every range is
in support. A candidate is safe on a shape when its family is not a reference family and the
shape is in its support; a candidate without support information (an older bundle) is in
support everywhere.

The guard reorders only the head of the model's order of applicable candidates: up to and
including its `depth`-th candidate of a family that is not reference-speed (so that several
instances of a reference family do not fill the window). Within the head the safe ones come
first, then those of other families outside their support, then the reference families' (the
last resort even where nothing else was measured on such a shape), each group in the model's
order; depth 0 or 1 changes nothing. The Selector, the C export and the evaluation apply the
same rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import pandas as pd

from kernels.registry import get_family

WIDEN = 2.0  # how far beyond its measured range a field may go and stay in support


def support_fields(inputs: Sequence[str], text_fields: Sequence[str]) -> list[int]:
    """Indices (into a problem's number_values) of the numeric shape fields."""
    return [i for i, f in enumerate(inputs) if f not in text_fields]


def measured_support(frame: pd.DataFrame, fields: Sequence[str], count: int
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) bounds per candidate (`count` rows, catalogue order) and field, from the
    pairs of `frame` that ran; +inf / -inf (nothing in support) for a candidate that never did."""
    ran = frame[frame["status"].eq("ok") & frame["applicable"].astype(bool)]
    low = np.full((count, len(fields)), np.inf)
    high = np.full((count, len(fields)), -np.inf)
    if not ran.empty:
        grouped = ran.groupby("candidate")[list(fields)]
        lo, hi = grouped.min(), grouped.max()
        rows = lo.index.to_numpy()
        low[rows] = (1.0 + lo.to_numpy(np.float64)) / WIDEN - 1.0
        high[rows] = (1.0 + hi.to_numpy(np.float64)) * WIDEN - 1.0
    return low, high


@lru_cache(maxsize=None)
def is_reference(family: str) -> bool:
    """Whether a family is reference-speed (an unknown family is not)."""
    try:
        return bool(getattr(get_family(family), "reference", False))
    except LookupError:
        return False


def reference_flags(families: Sequence[str]) -> np.ndarray:
    """Whether each candidate's family is a reference-speed one."""
    return np.array([is_reference(f) for f in families], dtype=bool)


def thin_families(problems: dict[str, int], below: int) -> list[tuple[str, int]]:
    """(family, problems) of the families of `problems` (family: training problems it ran on)
    measured on fewer than `below`, fewest first; reference-speed families left out."""
    found = [(f, n) for f, n in problems.items() if n < below and not is_reference(f)]
    return sorted(found, key=lambda item: (item[1], item[0]))


def safe_rows(values: np.ndarray, candidates: np.ndarray, low: np.ndarray, high: np.ndarray,
              reference: np.ndarray) -> np.ndarray:
    """Whether candidate `candidates[i]` is safe on the shape `values[i]` (numeric fields in
    the order of low/high's columns)."""
    inside = ((values >= low[candidates]) & (values <= high[candidates])).all(axis=1)
    return inside & ~reference[candidates]


def head_length(reference: Sequence[bool], depth: int) -> int:
    """How many of an order's first entries the guard reorders: up to and including its
    `depth`-th entry that is not of a reference family (all of them if it has fewer)."""
    seen = 0
    for i, ref in enumerate(reference):
        seen += not ref
        if seen == depth:
            return i + 1
    return len(reference)


def guarded_order(order: Sequence[int], safe: Sequence[bool], depth: int,
                  reference: Sequence[bool]) -> list[int]:
    """`order` (best first) with its head (head_length of the entries' `reference` flags)
    stably sorted: safe ones, then the other families' unsafe ones, then the reference
    families'. `safe` and `reference` hold one flag per entry of the head at least."""
    if depth <= 1:
        return list(order)
    end = head_length(reference, depth)
    rank = [0 if s else (2 if r else 1) for s, r in zip(safe[:end], reference[:end])]
    head = [c for _, _, c in sorted(zip(rank, range(end), order[:end]))]
    return head + list(order[end:])


class TrainingSupport:
    """The support and reference flags of a catalogue's candidates, measured on a training
    frame (rows: problem, candidate, status, applicable and the shape fields)."""

    def __init__(self, frame: pd.DataFrame, fields: Sequence[str], families: Sequence[str]
                 ) -> None:
        self.fields = list(fields)
        self.low, self.high = measured_support(frame, self.fields, len(families))
        self.reference = reference_flags(families)

    def safe(self, frame: pd.DataFrame) -> np.ndarray:
        """Whether each row's candidate is safe on the row's shape."""
        return safe_rows(frame[self.fields].to_numpy(np.float64),
                         frame["candidate"].to_numpy(), self.low, self.high, self.reference)

    def bounds(self, candidate: int) -> tuple[tuple[float, float], ...]:
        """A candidate's (low, high) per field, as its catalogue entry stores them."""
        return tuple((float(lo), float(hi))
                     for lo, hi in zip(self.low[candidate], self.high[candidate]))
