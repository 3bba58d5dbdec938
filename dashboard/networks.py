"""Which networks a shape occurs in, from the problem sets in jobs/networks (every field but the
batch size N is matched, so a layer is found at any batch)."""

from __future__ import annotations

import csv
import functools
from pathlib import Path

import pandas as pd

from farm.problems import CONV_FIELDS

NETWORKS_DIR = Path(__file__).resolve().parents[1] / "jobs" / "networks"
SIGNATURE = tuple(f for f in CONV_FIELDS if f != "N")


@functools.cache
def catalogue(folder: Path = NETWORKS_DIR) -> dict[tuple[int, ...], frozenset[str]]:
    """Shape signature -> the networks with a layer of that shape."""
    found: dict[tuple[int, ...], set[str]] = {}
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                if row.get("network"):
                    key = tuple(int(row[f]) for f in SIGNATURE)
                    found.setdefault(key, set()).add(row["network"])
    return {k: frozenset(v) for k, v in found.items()}


def names() -> list[str]:
    return sorted({n for nets in catalogue().values() for n in nets})


def networks_of(frame: pd.DataFrame) -> pd.Series:
    """Per row of a frame with the shape fields: its networks, comma-separated ('' if none)."""
    known = catalogue()
    keys = frame[list(SIGNATURE)].itertuples(index=False, name=None) if len(frame) else []
    return pd.Series([", ".join(sorted(known.get(tuple(map(int, k)), ()))) for k in keys],
                     index=frame.index, dtype=str)


def in_networks(frame: pd.DataFrame, chosen: list[str]) -> pd.Series:
    """Rows whose shape occurs in any of `chosen` (all rows when nothing is chosen)."""
    if not chosen:
        return pd.Series(True, index=frame.index)
    wanted = set(chosen)
    known = catalogue()
    keys = frame[list(SIGNATURE)].itertuples(index=False, name=None) if len(frame) else []
    return pd.Series([bool(known.get(tuple(map(int, k)), frozenset()) & wanted) for k in keys],
                     index=frame.index, dtype=bool)
