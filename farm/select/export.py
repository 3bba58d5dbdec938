"""Model bundles: plain files, no pickle. The registry stores the core files (LightGBM text
model, feature spec, catalogue, metrics) as one gzip'd JSON artifact; an export writes them as a
directory with a README and the C export beside them."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

import lightgbm as lgb

from farm.select.catalogue import CatalogueEntry, catalogue_json
from farm.select.cexport import c_source, header, symbol_prefix
from farm.select.evaluate import Efficiency
from farm.select.features import FeatureSpec
from farm.select.train import TrainedModel
from kernels.registry import operator_spec

FORMAT = "farm-select-bundle/1"
MODEL, SPEC, CATALOGUE, METRICS, README = ("model.txt", "features.json", "catalogue.json",
                                           "metrics.json", "README.md")
C_FILE, H_FILE = "farm_select.c", "farm_select.h"
CORE = (MODEL, SPEC, CATALOGUE, METRICS)


def bundle_files(model: TrainedModel) -> dict[str, str]:
    """The core files of a trained model."""
    info = {"format": FORMAT, "operator": model.operator, "arch": model.arch,
            "dtype": model.dtype, "kind": model.kind, "lightgbm": lgb.__version__,
            "synthetic": bool(model.metrics.get("synthetic")), "metrics": model.metrics,
            "data_window": model.data_window, "train_config": model.config}
    return {MODEL: model.model_text, SPEC: json.dumps(model.spec.record(), indent=1),
            CATALOGUE: catalogue_json(model.catalogue),
            METRICS: json.dumps(info, indent=1, sort_keys=True, default=str)}


def pack(files: dict[str, str]) -> bytes:
    """Core files as deterministic gzip'd JSON (the artifact's bytes)."""
    text = json.dumps({"format": FORMAT, "files": {k: files[k] for k in CORE}},
                      sort_keys=True)
    return gzip.compress(text.encode(), mtime=0)


def unpack(data: bytes) -> dict[str, str]:
    payload = json.loads(gzip.decompress(data))
    if payload.get("format") != FORMAT:
        raise ValueError(f"not a {FORMAT} artifact")
    return payload["files"]


def bundle_key(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def parse(files: dict[str, str]) -> tuple[FeatureSpec, list[CatalogueEntry], dict[str, Any]]:
    """(feature spec, catalogue, metrics info) of core files."""
    spec = FeatureSpec.from_record(json.loads(files[SPEC]))
    catalogue = [CatalogueEntry.from_record(r) for r in json.loads(files[CATALOGUE])]
    return spec, catalogue, json.loads(files[METRICS])


def c_files(files: dict[str, str], cascade: tuple[int, int] | None = None) -> dict[str, str]:
    """The C export (source and header) of core files; `cascade` (trees, keep): see
    farm.select.cexport.c_source."""
    spec, catalogue, info = parse(files)
    prefix = symbol_prefix(info["operator"], info["arch"], info["dtype"])
    note = ("SYNTHETIC training data: not a measured model." if info.get("synthetic")
            else "Trained on measured data.")
    text_fields = tuple(operator_spec(info["operator"]).problem_type.TEXT_FIELDS)
    guard_depth = int(info.get("train_config", {}).get("guard_depth", 0))
    return {C_FILE: c_source(spec, catalogue, files[MODEL], info["kind"], prefix, note,
                             guard_depth, text_fields, cascade=cascade),
            H_FILE: header(prefix, spec.inputs)}


def readme(files: dict[str, str]) -> str:
    spec, catalogue, info = parse(files)
    m, prefix = info["metrics"], symbol_prefix(info["operator"], info["arch"], info["dtype"])
    label = ("\n**SYNTHETIC**: trained on invented timings from a cost model; these figures "
             "are not measured results.\n" if info.get("synthetic") else "")
    model = info.get("model", {})
    rows = [f"| {part} | " + Efficiency(**m[part]).line() + " |"
            for part in ("validation", "holdout") if part in m]
    return f"""# Kernel selection model: {info['operator']} {info['dtype']} on {info['arch']}
{label}
Model {model.get('id', '?')} version {model.get('version', '?')}: LightGBM {info['kind']}
({m.get('trees')} trees) over {len(spec.names)} features (spec version {spec.version}) choosing
among {len(catalogue)} instances. Data window: {json.dumps(info['data_window'].get('splits'))}
problems per split, measurements {info['data_window'].get('first_id')} to
{info['data_window'].get('last_id')}.

| part | efficiency vs the measured oracle |
|---|---|
{chr(10).join(rows)}

Files: `{MODEL}` (LightGBM text model), `{SPEC}` (feature names, order, version, device),
`{CATALOGUE}` (candidate instances, configs, resources), `{METRICS}`, and the C export
`{C_FILE}` / `{H_FILE}` (C99 + libm; build with `-ffp-contract=off`; symbols `{prefix}_*`).

Python: `Selector.load(DIR).select(problem)` filters candidates by the kernel families'
applicability rules. C: `{prefix}_best(shape, allowed)` with shape = {' '.join(spec.inputs)}
(int64 each; a field that takes names as the index of its value) and `allowed` one byte per
candidate (the dispatcher's rules).
"""


def write_bundle(out: str | Path, files: dict[str, str], model: dict[str, Any] | None = None,
                 cascade: tuple[int, int] | None = None) -> Path:
    """Write a bundle directory: core files, the C export (with `cascade`, see c_files) and a
    README."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = dict(files)
    if model:
        info = json.loads(files[METRICS])
        info["model"] = model
        files[METRICS] = json.dumps(info, indent=1, sort_keys=True, default=str)
    everything = {**{k: files[k] for k in CORE}, **c_files(files, cascade),
                  README: readme(files)}
    for name, text in everything.items():
        (out / name).write_text(text)
    return out


def read_bundle(path: str | Path) -> dict[str, str]:
    path = Path(path)
    missing = [f for f in CORE if not (path / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{path} is not a model bundle: missing {', '.join(missing)}")
    files = {f: (path / f).read_text() for f in CORE}
    if (path / C_FILE).is_file():
        files[C_FILE] = (path / C_FILE).read_text()
    return files
