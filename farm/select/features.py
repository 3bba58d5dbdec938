"""Features of a (problem, instance) pair, one formula each, evaluated by NumPy here and by the C
export (farm/select/cexport.py) from the same text, so both give identical doubles.

Groups, in column order: the shape fields as numbers (farm.problems.Problem.numbers); sizes
derived from the shape (the operator's shape_formulas: a convolution's P, Q, GEMM view, FLOPs,
bytes, roofline time); the device; the instance (family one-hot, every config field of every
family as `cfg.FAMILY.FIELD`, NaN where the family has no such field, then the generic
columns the operator maps each configuration to (OperatorSpec.instance_features: threads,
tile sizes, split, vector width, ...), registers, shared memory, spills and the occupancy they
allow: without the compiled code's registers, the bound of shared memory and threads alone);
and the operator's interactions of shape and instance (tile counts, waves, padding waste, the
time a tiling bounds, ...). Missing values are NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.problems import DTYPE_BYTES
from farm.select.catalogue import CatalogueEntry, candidate_families
from farm.select.device import DeviceInfo
from kernels.registry import operator_spec

FEATURE_VERSION = 5
CONSTANTS = ("sm_count", "l2_bytes", "bandwidth_gbps", "peak_tflops", "elem_bytes")
INSTANCE = ("threads", "tile_m", "tile_n", "tile_k", "tile_w", "split", "c_split", "tiles", "vec",
            "filter", "registers", "shared_bytes", "spill_bytes", "occupancy")


def _cdiv(a, b):
    return np.ceil(a / b)


def _fdiv(a, b):
    return np.floor(a / b)


HELPERS = {"cdiv": _cdiv, "fdiv": _fdiv, "vmin": np.minimum, "vmax": np.maximum}
_COMPILED: dict[str, Any] = {}


def evaluate(expression: str, names: Mapping[str, Any]) -> Any:
    code = _COMPILED.get(expression)
    if code is None:
        code = _COMPILED[expression] = compile(expression, "<feature>", "eval")
    return eval(code, {"__builtins__": {}, **HELPERS}, names)  # noqa: S307 (our own formulas)


def instance_names(operator: str) -> tuple[str, ...]:
    """Family one-hots and every config field of every candidate family (numbers as they are,
    other values one-hot as `cfg.F.field=value`), then the generic instance columns."""
    names = []
    for family in candidate_families(operator):
        names.append(f"fam.{family.name}")
        for field, values in family.config_fields(operator).items():
            if all(isinstance(v, (int, float, bool)) for v in values):
                names.append(f"cfg.{family.name}.{field}")
            else:
                names += [f"cfg.{family.name}.{field}={v}" for v in values]
    return (*names, *INSTANCE)


@dataclass(frozen=True)
class FeatureSpec:
    """The columns of one model, in order, with what they were computed for."""

    version: int
    operator: str
    dtype: str
    device: DeviceInfo
    instance: tuple[str, ...]

    @classmethod
    def build(cls, operator: str, dtype: str, device: DeviceInfo) -> FeatureSpec:
        return cls(FEATURE_VERSION, operator, dtype, device, instance_names(operator))

    @property
    def inputs(self) -> tuple[str, ...]:
        """The shape fields, in order: the numbers a caller gives (C export: int64 each)."""
        return operator_spec(self.operator).fields

    @property
    def shape_formulas(self) -> tuple[tuple[str, str], ...]:
        return operator_spec(self.operator).shape_formulas

    @property
    def interactions(self) -> tuple[tuple[str, str], ...]:
        return operator_spec(self.operator).interactions

    @property
    def names(self) -> tuple[str, ...]:
        return (*self.inputs, *(n for n, _ in self.shape_formulas), *CONSTANTS,
                *self.instance, *(n for n, _ in self.interactions))

    def constants(self) -> dict[str, float]:
        d = self.device
        return {"sm_count": float(d.sm_count), "l2_bytes": float(d.l2_bytes),
                "bandwidth_gbps": float(d.bandwidth_gbps), "peak_tflops": float(d.peak_tflops),
                "elem_bytes": float(DTYPE_BYTES[self.dtype])}

    def record(self) -> dict[str, Any]:
        return {"version": self.version, "operator": self.operator, "dtype": self.dtype,
                "device": self.device.record(), "names": list(self.names),
                "instance": list(self.instance),
                "formulas": [list(f) for f in (*self.shape_formulas, *self.interactions)]}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> FeatureSpec:
        if r["version"] != FEATURE_VERSION:
            raise ValueError(f"feature spec version {r['version']} is not this farm's "
                             f"{FEATURE_VERSION}: retrain the model")
        spec = cls(r["version"], r["operator"], r["dtype"], DeviceInfo.from_record(r["device"]),
                   tuple(r["instance"]))
        if list(spec.names) != list(r["names"]):
            raise ValueError("feature names differ from this farm's at the same version")
        return spec


def _occupancy(threads: float, registers: float, shared: float, d: DeviceInfo) -> float:
    """Resident blocks per multiprocessor from registers (allocated per warp in 256s), shared
    memory and threads; without registers, from shared memory and threads alone (a bound);
    NaN without threads."""
    if math.isnan(threads):
        return math.nan
    warps = math.ceil(threads / 32)
    by_regs = (d.max_blocks_per_sm if math.isnan(registers) else
               d.regs_per_sm // (math.ceil(registers * 32 / 256) * 256 * warps))
    by_smem = d.smem_per_sm // shared if shared > 0 else d.max_blocks_per_sm
    return float(min(by_regs, by_smem, d.max_threads_per_sm // threads, d.max_blocks_per_sm))


def _instance_row(spec: FeatureSpec, entry: CatalogueEntry) -> list[float]:
    cfg, res, nan = dict(entry.config), dict(entry.resources), math.nan
    generic = {name: nan for name in INSTANCE}
    mapped = operator_spec(spec.operator).instance_features(cfg)
    static_shared = mapped.pop("static_shared_bytes", nan)
    generic.update(mapped)
    for one in ("split", "c_split", "tiles"):  # none given: one
        generic[one] = generic[one] if not math.isnan(generic[one]) else 1.0
    generic.update({k: res.get(k, nan) for k in ("registers", "shared_bytes", "spill_bytes")})
    if math.isnan(generic["shared_bytes"]):
        generic["shared_bytes"] = static_shared  # what the code declares, without its cubin
    generic["occupancy"] = _occupancy(float(generic["threads"]), float(generic["registers"]),
                                      float(generic["shared_bytes"]), spec.device)
    row = []
    for name in spec.instance:
        if name.startswith("fam."):
            row.append(float(name[4:] == entry.family))
        elif name.startswith("cfg."):
            family, _, field = name[4:].partition(".")
            field, eq, value = field.partition("=")
            if family != entry.family or field not in cfg:
                row.append(nan)
            elif eq:
                row.append(float(str(cfg[field]) == value))
            else:
                row.append(float(cfg[field]))
        else:
            row.append(float(generic[name]))
    return row


def instance_matrix(spec: FeatureSpec, entries: Sequence[CatalogueEntry]) -> np.ndarray:
    """The instance columns of each catalogue entry (rows in catalogue order)."""
    return np.array([_instance_row(spec, e) for e in entries], dtype=np.float64
                    ).reshape(len(entries), len(spec.instance))


def feature_matrix(spec: FeatureSpec, shapes: Mapping[str, Any], instances: np.ndarray
                   ) -> np.ndarray:
    """Rows of features: shape fields (arrays of the rows' length, or scalars to broadcast
    over `instances`) against the instance columns of each row."""
    rows = instances.shape[0]
    names: dict[str, Any] = {f: np.asarray(shapes[f], dtype=np.float64) for f in spec.inputs}
    names.update(spec.constants())
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, formula in spec.shape_formulas:
            names[name] = evaluate(formula, names)
        names.update({n: instances[:, i] for i, n in enumerate(spec.instance)})
        for name, formula in spec.interactions:
            names[name] = evaluate(formula, names)
    out = np.empty((rows, len(spec.names)), dtype=np.float64)
    for i, name in enumerate(spec.names):
        out[:, i] = names[name]
    return out


def shape_numbers(operator: str, frame: Any) -> dict[str, np.ndarray]:
    """The shape fields of a frame's rows (one column per field) as numbers: a field that
    takes names becomes its index among the record's choices."""
    record = operator_spec(operator).problem_type
    out = {}
    for field in record.FIELDS:
        column = frame[field]
        if field in record.TEXT_FIELDS:
            column = column.map({v: i for i, v in enumerate(record.TEXT_FIELDS[field])})
        out[field] = np.asarray(column, dtype=np.float64)
    return out
