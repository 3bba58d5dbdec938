"""Training data from the store: one row per measured (problem, instance) pair of an operator,
architecture and dtype, with its catalogue index, whether the family's rules allow it, and its
split. Splits go by whole problem: a hash of every shape field picks validation, and every
problem that occurs in a held-out network (jobs/networks/*.csv) is held out, whichever other
network shares it, so no shape leaks between the parts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from farm.problems import CONV_FIELDS, ConvProblem
from farm.select.catalogue import CatalogueEntry, ResourceLookup, build_catalogue, no_resources
from farm.select.device import DeviceInfo, device_info
from farm.store import Queries, TimingFilter
from farm.store.queries import ModelQueries
from kernels.registry import get_family

NETWORKS_DIR = Path(__file__).resolve().parents[2] / "jobs" / "networks"
DEFAULT_HOLDOUT = ("efficientnet_b0", "resnext50_32x4d")
USABLE = ("ok", "compile_error", "launch_error", "timeout", "wrong_result", "unsupported")
SYNTHETIC_MARK = "SYNTHETIC"


@dataclass(frozen=True)
class SplitConfig:
    """Which problems validate and which are held out."""

    holdout_networks: tuple[str, ...] = DEFAULT_HOLDOUT
    validation_share: float = 0.2
    holdout_share: float = 0.2  # by hash, only where no problem belongs to a held-out network
    salt: str = "farm-select"
    networks_dir: Path = NETWORKS_DIR


@dataclass(frozen=True)
class Dataset:
    """Measured pairs (frame) of one operator/arch/dtype over a catalogue, with splits."""

    operator: str
    arch: str
    dtype: str
    device: DeviceInfo
    catalogue: tuple[CatalogueEntry, ...]
    frame: pd.DataFrame  # problem, candidate, status, median_us, applicable, split, shape fields
    window: dict[str, Any] = field(default_factory=dict)

    def part(self, *splits: str) -> pd.DataFrame:
        return self.frame[self.frame["split"].isin(splits)]


def network_membership(folder: Path = NETWORKS_DIR) -> dict[tuple[int, ...], set[str]]:
    """Shape (every field) -> the networks it occurs in."""
    found: dict[tuple[int, ...], set[str]] = {}
    for path in sorted(Path(folder).glob("*.csv")):
        table = pd.read_csv(path)
        if "network" not in table.columns:
            continue
        for row in table[[*CONV_FIELDS, "network"]].itertuples(index=False):
            found.setdefault(tuple(int(v) for v in row[:-1]), set()).add(str(row[-1]))
    return found


def _bucket(shape: tuple[int, ...], salt: str) -> float:
    digest = hashlib.sha256(f"{salt}|{shape}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def assign_splits(shapes: list[tuple[int, ...]], config: SplitConfig) -> tuple[list[str], dict]:
    """The split of each problem and a description of the holdout."""
    members = network_membership(config.networks_dir)
    held = [bool(members.get(s, set()) & set(config.holdout_networks)) for s in shapes]
    holdout: dict[str, Any] = {"kind": "networks", "networks": list(config.holdout_networks)}
    if not any(held):
        held = [_bucket(s, config.salt + "/holdout") < config.holdout_share for s in shapes]
        holdout = {"kind": "problem_hash", "share": config.holdout_share}
    splits = ["holdout" if h else "validation" if _bucket(s, config.salt) <
              config.validation_share else "train" for s, h in zip(shapes, held)]
    return splits, holdout


def measurements(queries: Queries, operator: str, arch: str, dtype: str,
                 include_replay: bool = False) -> pd.DataFrame:
    """Usable measurements (not `not_recorded`) of an operator/arch/dtype, all statuses."""
    frame = queries.timings(TimingFilter(operator=operator, dtype=dtype, device=arch,
                                         status=None, include_replay=include_replay))
    if frame.empty:
        return frame
    return frame[(frame["arch"] == arch) & frame["status"].isin(USABLE)]


def load_dataset(queries: Queries, operator: str, arch: str, dtype: str,
                 split: SplitConfig = SplitConfig(), resources: ResourceLookup = no_resources,
                 include_replay: bool = False) -> Dataset:
    """The measured pairs of candidate instances, latest measurement per pair."""
    raw = measurements(queries, operator, arch, dtype, include_replay)
    if raw.empty:
        raise LookupError(f"no measurements of {operator} {dtype} on {arch}")
    frame = raw.sort_values("id").drop_duplicates([*CONV_FIELDS, "kernel"], keep="last")
    catalogue = tuple(build_catalogue(operator, dtype, set(frame["kernel"]), resources))
    if not catalogue:
        raise LookupError(f"no measured instance of {operator} {dtype} on {arch} is a "
                          "candidate (the vendor library is never chosen)")
    index = {e.name: i for i, e in enumerate(catalogue)}
    vendor = frame[frame["family"] == "vendor"]
    frame = frame[frame["kernel"].isin(index)].copy()
    shapes = list(frame[list(CONV_FIELDS)].itertuples(index=False, name=None))
    unique = list(dict.fromkeys(shapes))
    problem_of = {s: i for i, s in enumerate(unique)}
    frame["problem"] = [problem_of[s] for s in shapes]
    frame["candidate"] = frame["kernel"].map(index).astype(int)
    frame["applicable"] = _applicable(frame, catalogue, unique, operator, dtype)
    splits, holdout = assign_splits(unique, split)
    frame["split"] = np.array(splits, dtype=object)[frame["problem"].to_numpy()]
    envs = sorted(set(raw["gpu_name"]))
    figures = ModelQueries(queries).arch_figures(arch)
    device = device_info(arch, _number(figures.get("sm_count")), _number(figures.get("l2_bytes")))
    window = {"measurements": int(len(raw)), "pairs": int(len(frame)),
              "problems": len(unique), "ok_pairs": int((frame["status"] == "ok").sum()),
              "first_id": int(raw["id"].min()), "last_id": int(raw["id"].max()),
              "first_at": str(raw["created_at"].min()), "last_at": str(raw["created_at"].max()),
              "environments": envs, "replay": bool(raw["replay_of"].notna().any()),
              "synthetic": any(SYNTHETIC_MARK in e.upper() for e in envs),
              "vendor_pairs": int(len(vendor)), "holdout": holdout,
              "splits": {k: int(v) for k, v in
                         pd.Series(splits).value_counts().sort_index().items()}}
    keep = [*CONV_FIELDS, "problem", "candidate", "kernel", "family", "status", "median_us",
            "applicable", "split", "id"]
    return Dataset(operator, arch, dtype, device, catalogue,
                   frame[keep].reset_index(drop=True), window)


def _applicable(frame: pd.DataFrame, catalogue: tuple[CatalogueEntry, ...],
                shapes: list[tuple[int, ...]], operator: str, dtype: str) -> np.ndarray:
    """The family's rules on every row; a pair the worker called unsupported stays so."""
    instances = [e.instance() for e in catalogue]
    families = [get_family(e.family) for e in catalogue]
    problems = [ConvProblem(operator, *(int(v) for v in s), dtype=dtype) for s in shapes]
    verdict = [families[c].applicable(instances[c], problems[p]) is None
               for p, c in zip(frame["problem"], frame["candidate"])]
    return np.array(verdict, dtype=bool) & (frame["status"] != "unsupported").to_numpy()


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
