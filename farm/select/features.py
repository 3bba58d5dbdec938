"""Features of a (problem, instance) pair, one formula each, evaluated by NumPy here and by the C
export (farm/select/cexport.py) from the same text, so both give identical doubles.

Groups, in column order: the shape fields; sizes derived from the shape (P, Q, C/G, K/G, the
GEMM view M/N/K of the direction, FLOPs, bytes, roofline time); the device; the instance
(family one-hot, every config field of every family as `cfg.FAMILY.FIELD`, NaN where the
family has no such field, threads, tile sizes, split, vector width, specialised filter size,
registers, shared memory, spills and the occupancy they allow: without the compiled code's
registers, the bound of shared memory and threads alone); and the interactions (tile counts and
last-tile fill per dimension, blocks, waves over the multiprocessors, padding waste, how far a
specialised filter is from the shape's, the padded GEMM work and operand traffic of a tiling
and the time they bound). Missing values are NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from farm.problems import CONV_FIELDS, DTYPE_BYTES
from farm.select.catalogue import CatalogueEntry, candidate_families
from farm.select.device import DeviceInfo
from kernels.conv.igemm import shared_bytes as staged_bytes

FEATURE_VERSION = 2
_GEMM = {"conv2d_fwd": ("N*P*Q", "Kg", "Cg*R*S"),
         "conv2d_bwd_data": ("N*H*W", "Cg", "Kg*R*S"),
         "conv2d_bwd_weight": ("Kg", "Cg*R*S", "N*P*Q")}
CONSTANTS = ("sm_count", "l2_bytes", "bandwidth_gbps", "peak_tflops", "elem_bytes")
INSTANCE = ("threads", "tile_m", "tile_n", "tile_k", "tile_w", "split", "vec", "filter",
            "registers", "shared_bytes", "spill_bytes", "occupancy")
INTERACTIONS = (
    ("tiles_m", "cdiv(gemm_m, tile_m)"), ("fill_m", "(gemm_m - (tiles_m - 1) * tile_m) / tile_m"),
    ("tiles_n", "cdiv(gemm_n, tile_n)"), ("fill_n", "(gemm_n - (tiles_n - 1) * tile_n) / tile_n"),
    ("tiles_k", "cdiv(gemm_k, tile_k)"), ("fill_k", "(gemm_k - (tiles_k - 1) * tile_k) / tile_k"),
    ("tiles_q", "cdiv(Q, tile_w)"), ("fill_q", "(Q - (tiles_q - 1) * tile_w) / tile_w"),
    ("blocks", "tiles_m * tiles_n * G * split"),
    ("k_steps", "tiles_k / split"),
    ("waves", "blocks / (sm_count * occupancy)"),
    ("last_wave", "waves - cdiv(waves, 1) + 1"),
    ("sm_share", "vmin(blocks / sm_count, 1)"),
    ("tile_waste", "tiles_m * tile_m * tiles_n * tile_n / (gemm_m * gemm_n)"),
    ("per_thread_outputs", "tile_m * tile_n / threads"),
    ("filter_gap", "vmax(filter - R, R - filter) + vmax(filter - S, S - filter)"),
    ("padded_flops", "2 * G * tiles_m * tile_m * tiles_n * tile_n * tiles_k * tile_k"),
    ("operand_bytes", "elem_bytes * G * (gemm_m * gemm_k * tiles_n + gemm_n * gemm_k * tiles_m)"),
    ("wave_fill", "waves / cdiv(waves, 1)"),
    ("tile_bound_us", "vmax(padded_flops / (peak_tflops * 1e6 * wave_fill * sm_share), "
                      "operand_bytes / (bandwidth_gbps * 1e3))"),
    ("tile_bound_ratio", "tile_bound_us / roofline_us"),
)


def shape_expressions(operator: str) -> tuple[tuple[str, str], ...]:
    m, n, k = _GEMM[operator]
    return (("P", "fdiv(H + 2 * pad_h - dil_h * (R - 1) - 1, stride_h) + 1"),
            ("Q", "fdiv(W + 2 * pad_w - dil_w * (S - 1) - 1, stride_w) + 1"),
            ("Cg", "C / G"), ("Kg", "K / G"),
            ("gemm_m", m), ("gemm_n", n), ("gemm_k", k),
            ("flops", "2 * N * P * Q * K * Cg * R * S"),
            ("bytes", "elem_bytes * (N * H * W * C + K * Cg * R * S + N * P * Q * K)"),
            ("intensity", "flops / bytes"),
            ("l2_fit", "bytes / l2_bytes"),
            ("roofline_us", "vmax(flops / (peak_tflops * 1e6), bytes / (bandwidth_gbps * 1e3))"))


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
    def shape_formulas(self) -> tuple[tuple[str, str], ...]:
        return shape_expressions(self.operator)

    @property
    def names(self) -> tuple[str, ...]:
        return (*CONV_FIELDS, *(n for n, _ in self.shape_formulas), *CONSTANTS,
                *self.instance, *(n for n, _ in INTERACTIONS))

    def constants(self) -> dict[str, float]:
        d = self.device
        return {"sm_count": float(d.sm_count), "l2_bytes": float(d.l2_bytes),
                "bandwidth_gbps": float(d.bandwidth_gbps), "peak_tflops": float(d.peak_tflops),
                "elem_bytes": float(DTYPE_BYTES[self.dtype])}

    def record(self) -> dict[str, Any]:
        return {"version": self.version, "operator": self.operator, "dtype": self.dtype,
                "device": self.device.record(), "names": list(self.names),
                "instance": list(self.instance),
                "formulas": [list(f) for f in (*self.shape_formulas, *INTERACTIONS)]}

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
    threads = cfg.get("block", 32 * cfg["warps_m"] * cfg["warps_n"] if "warps_m" in cfg else nan)
    generic = {"threads": threads, "tile_m": cfg.get("block_m", nan),
               "tile_n": cfg.get("block_n", nan), "tile_k": cfg.get("block_k", nan),
               "tile_w": cfg.get("tile_w", nan), "split": cfg.get("split_k", 1),
               "vec": cfg.get("vec", nan), "filter": cfg.get("fr", nan),
               **{k: res.get(k, nan) for k in ("registers", "shared_bytes", "spill_bytes")}}
    if math.isnan(generic["shared_bytes"]) and {"stages", "block_m", "block_n"} <= set(cfg):
        generic["shared_bytes"] = staged_bytes(cfg)  # the pipeline's static tiles
    generic["occupancy"] = _occupancy(float(threads), float(generic["registers"]),
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
    names: dict[str, Any] = {f: np.asarray(shapes[f], dtype=np.float64) for f in CONV_FIELDS}
    names.update(spec.constants())
    with np.errstate(divide="ignore", invalid="ignore"):
        for name, formula in spec.shape_formulas:
            names[name] = evaluate(formula, names)
        names.update({n: instances[:, i] for i, n in enumerate(spec.instance)})
        for name, formula in INTERACTIONS:
            names[name] = evaluate(formula, names)
    out = np.empty((rows, len(spec.names)), dtype=np.float64)
    for i, name in enumerate(spec.names):
        out[:, i] = names[name]
    return out
