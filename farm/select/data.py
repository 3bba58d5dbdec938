"""Training data from the store: one row per measured (problem, instance) pair of an operator,
architecture and dtype, with its catalogue index, whether the family's rules allow it, and its
split. Splits go by whole problem: a hash of the shape's geometry (its numeric fields) picks
validation, and every problem that occurs in a held-out network (the operator's networks_dir,
CSV files with a `network` column) is held out unless a training network has it too. Two
problems that differ in the batch size alone are the same shape: a held-out network is judged
on its shapes that no training network has at any batch size, and those shapes are held out
at every batch size, so no shape leaks between the parts."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from farm.select.catalogue import CatalogueEntry, ResourceLookup, build_catalogue, no_resources
from farm.select.device import DeviceInfo, device_info
from farm.store import Queries, TimingFilter
from farm.store.queries import ModelQueries
from kernels.registry import get_family, operator_spec

DEFAULT_HOLDOUT = ("efficientnet_b0", "resnext50_32x4d")  # the convolutions' held-out networks
USABLE = ("ok", "compile_error", "launch_error", "timeout", "wrong_result", "unsupported")
SYNTHETIC_MARK = "SYNTHETIC"
THIN = 30  # a family that ran ok on fewer training problems than this is thinly measured


@dataclass(frozen=True)
class SplitConfig:
    """Which problems validate and which are held out."""

    holdout_networks: tuple[str, ...] | None = None  # None: OperatorSpec.holdout_networks
    validation_share: float = 0.2
    holdout_share: float = 0.2  # by hash, only where no problem belongs to a held-out network
    salt: str = "farm-select"
    networks_dir: Path | None = None  # None: the operator's own (OperatorSpec.networks_dir)


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


def geometry_fields(operator: str) -> tuple[str, ...]:
    """The numeric shape fields: what makes two problems the same shape (Problem.geometry)."""
    record = operator_spec(operator).problem_type
    return tuple(f for f in record.FIELDS if f not in record.TEXT_FIELDS)


def geometries(operator: str, frame: pd.DataFrame) -> list[tuple[int, ...]]:
    """Each row's geometry (one column per shape field)."""
    return [tuple(int(v) for v in row) for row in
            frame[list(geometry_fields(operator))].itertuples(index=False, name=None)]


def networks_dir(operator: str, config: SplitConfig = SplitConfig()) -> Path | None:
    return config.networks_dir or operator_spec(operator).networks_dir


def network_membership(operator: str, folder: Path | None = None
                       ) -> dict[tuple[int, ...], set[str]]:
    """Geometry -> the networks it occurs in, from the operator's network tables (CSV files with
    a `network` column; a field the table leaves out takes its default)."""
    folder = folder or operator_spec(operator).networks_dir
    record = operator_spec(operator).problem_type
    fields = geometry_fields(operator)
    found: dict[tuple[int, ...], set[str]] = {}
    for path in sorted(Path(folder).glob("*.csv")) if folder else []:
        table = pd.read_csv(path)
        if "network" not in table.columns:
            continue
        for name in fields:
            if name not in table.columns:
                if name not in record.DEFAULTS:
                    break
                table[name] = record.DEFAULTS[name]
        else:
            for shape, network in zip(geometries(operator, table), table["network"]):
                found.setdefault(shape, set()).add(str(network))
    return found


BATCH_FIELD = "N"  # the field that does not make two problems different shapes


def batch_free(operator: str) -> Callable[[tuple[int, ...]], tuple[int, ...]]:
    """A geometry without its batch size (the key that makes two problems the same shape)."""
    fields = geometry_fields(operator)
    if BATCH_FIELD not in fields:
        return lambda shape: shape
    i = fields.index(BATCH_FIELD)
    return lambda shape: shape[:i] + shape[i + 1:]


def held_out_shapes(members: dict[tuple[int, ...], set[str]], networks: Sequence[str],
                    key: Callable[[tuple[int, ...]], tuple[int, ...]]
                    ) -> tuple[set[tuple[int, ...]], int]:
    """The batch-free shapes that the held-out networks have and no other network has, and
    the count of those left out because a training network has them too."""
    held_nets = set(networks)
    in_held = {key(s) for s, nets in members.items() if nets & held_nets}
    in_training = {key(s) for s, nets in members.items() if nets - held_nets}
    return in_held - in_training, len(in_held & in_training)


def bucket(shape: tuple[int, ...], salt: str) -> float:
    digest = hashlib.sha256(f"{salt}|{shape}".encode()).digest()
    return int.from_bytes(digest[:8], "little") / 2**64


def assign_splits(shapes: list[tuple[int, ...]], config: SplitConfig, operator: str
                  ) -> tuple[list[str], dict]:
    """The split of each problem (by its geometry) and a description of the holdout."""
    members = network_membership(operator, networks_dir(operator, config))
    networks = (operator_spec(operator).holdout_networks if config.holdout_networks is None
                else config.holdout_networks)
    key = batch_free(operator)
    tested, shared = held_out_shapes(members, networks, key)
    held = [key(s) in tested for s in shapes]
    holdout: dict[str, Any] = {"kind": "networks", "networks": list(networks),
                               "shapes": len(tested), "shared_with_training": shared}
    if not any(held):
        held = [bucket(s, config.salt + "/holdout") < config.holdout_share for s in shapes]
        holdout = {"kind": "problem_hash", "share": config.holdout_share}
    splits = ["holdout" if h else "validation" if bucket(s, config.salt) <
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


def one_gpu_per_problem(frame: pd.DataFrame, fields: list[str]) -> pd.DataFrame:
    """Each problem's rows from one GPU model only: the one that measured most of its pairs
    (on a tie, the one measured last). Two GPUs of one architecture (an H100 and an H200, in a
    cluster or in imported recordings) time the same instances differently, so a problem's
    candidates are compared on the same GPU."""
    if frame["gpu_name"].nunique() < 2:
        return frame
    counts = (frame.groupby([*fields, "gpu_name"], sort=False)["id"].agg(["size", "max"])
              .reset_index().sort_values(["size", "max"]).drop_duplicates(fields, keep="last"))
    keep = frame[[*fields, "gpu_name"]].merge(counts[[*fields, "gpu_name"]], how="left",
                                              indicator=True)["_merge"].eq("both").to_numpy()
    return frame[keep]


def load_dataset(queries: Queries, operator: str, arch: str, dtype: str,
                 split: SplitConfig = SplitConfig(), resources: ResourceLookup = no_resources,
                 include_replay: bool = False) -> Dataset:
    """The measured pairs of candidate instances, latest measurement per pair."""
    raw = measurements(queries, operator, arch, dtype, include_replay)
    if raw.empty:
        raise LookupError(f"no measurements of {operator} {dtype} on {arch}")
    fields = list(operator_spec(operator).fields)
    frame = one_gpu_per_problem(raw.sort_values("id"), fields)
    frame = frame.drop_duplicates([*fields, "kernel"], keep="last")
    catalogue = tuple(build_catalogue(operator, dtype, set(frame["kernel"]), resources))
    if not catalogue:
        raise LookupError(f"no measured instance of {operator} {dtype} on {arch} is a "
                          "candidate (the vendor library is never chosen)")
    index = {e.name: i for i, e in enumerate(catalogue)}
    vendor = frame[frame["family"] == "vendor"]
    frame = frame[frame["kernel"].isin(index)].copy()
    shapes = list(frame[fields].itertuples(index=False, name=None))
    unique = list(dict.fromkeys(shapes))
    problem_of = {s: i for i, s in enumerate(unique)}
    frame["problem"] = [problem_of[s] for s in shapes]
    frame["candidate"] = frame["kernel"].map(index).astype(int)
    frame["applicable"] = _applicable(frame, catalogue, unique, operator, dtype)
    splits, holdout = assign_splits(
        geometries(operator, pd.DataFrame(unique, columns=fields)), split, operator)
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
    keep = [*fields, "problem", "candidate", "kernel", "family", "status", "median_us",
            "applicable", "split", "id"]
    return Dataset(operator, arch, dtype, device, catalogue,
                   frame[keep].reset_index(drop=True), window)


def _applicable(frame: pd.DataFrame, catalogue: tuple[CatalogueEntry, ...],
                shapes: list[tuple[int, ...]], operator: str, dtype: str) -> np.ndarray:
    """The family's rules on every row; a pair the worker called unsupported stays so."""
    instances = [e.instance() for e in catalogue]
    families = [get_family(e.family) for e in catalogue]
    spec = operator_spec(operator)
    fields = spec.fields
    problems = [spec.problem(dtype, dict(zip(fields, s))) for s in shapes]
    verdict = [families[c].applicable(instances[c], problems[p]) is None
               for p, c in zip(frame["problem"], frame["candidate"])]
    return np.array(verdict, dtype=bool) & (frame["status"] != "unsupported").to_numpy()


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def family_problems(data: Dataset) -> dict[str, int]:
    """The training problems on which each candidate family (of the catalogue) ran ok where its
    rules allow it; 0 for a family that never did."""
    train = data.part("train")
    ran = train[train["status"].eq("ok") & train["applicable"].astype(bool)]
    families = np.array([e.family for e in data.catalogue])
    counts = ran.assign(family=families[ran["candidate"].to_numpy()]).groupby(
        "family")["problem"].nunique()
    return {str(f): int(counts.get(f, 0)) for f in dict.fromkeys(families)}
