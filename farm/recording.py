"""Recordings: the measurements of finished jobs on a real GPU as a parquet file with their
environment (`farm record`), served later by the replay device (farm/replay.py) where that GPU
is absent, or loaded back into a database as the measurements they are (`farm import-recording`,
under the recorded environment, so that selection models train on them).

One row per pair: the kernel's identity (family, instance, kernel_key, operator, dtype, config
as JSON, source_hash), the problem's (layout, its shape fields as a JSON object, problem_key:
whatever the operator's record holds), the measurement
(status, timings, verification error, message, policy and telemetry as JSON) and `fault` (empty
in a real recording; tests set "exit" or "hang" so the replay device fails the way a GPU does).
The file's metadata (key b"farm") holds the environment, the jobs, a note and `synthetic`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from farm.environment import Environment
from farm.problems import Problem, problem_from_store
from farm.store import ImportedJob, NotFound, Queries

FORMAT = 2  # 1: one column per convolution shape field, read and converted on load
META_KEY = b"farm"
RECORDINGS_DIR = Path(__file__).resolve().parents[1] / "jobs" / "recordings"
ENV_FIELDS = ("gpu_name", "arch", "sm_count", "driver", "compiler", "runtime", "farm_version")
TIMING_FIELDS = ("median_us", "min_us", "max_us", "p90_us", "samples", "spread", "tflops",
                 "gbps", "verify_error")
COLUMNS = ("family", "instance", "kernel_key", "operator", "dtype", "config", "source_hash",
           "layout", "shape", "problem_key", "status", *TIMING_FIELDS, "message",
           "policy", "telemetry", "fault")


class RecordingError(ValueError):
    """A recording cannot be written or read; the message says why."""


@dataclass(frozen=True)
class Recording:
    path: Path
    environment: dict[str, Any]  # the recorded environment's fields and its fingerprint
    jobs: tuple[dict[str, Any], ...]
    note: str
    synthetic: bool
    frame: pd.DataFrame

    @property
    def arch(self) -> str:
        return str(self.environment["arch"])


def replay_environment(environment: dict[str, Any]) -> Environment:
    """The environment of replayed rows: the recorded device, named and marked as a replay."""
    return Environment(**{f: environment[f] for f in ENV_FIELDS if f != "gpu_name"},
                       gpu_name=f"replay of {environment['gpu_name']}",
                       replay_of=environment["fingerprint"],
                       details=tuple(sorted((str(k), str(v)) for k, v in
                                            (environment.get("details") or {}).items())))


def write_recording(frame: pd.DataFrame, environment: dict[str, Any], jobs: list[dict], out: Path,
                    note: str = "", synthetic: bool = False) -> Path:
    """Write rows (COLUMNS) and their environment (ENV_FIELDS, fingerprint, details)."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise RecordingError(f"recording rows lack column(s) {', '.join(missing)}")
    meta = {"format": FORMAT, "environment": environment, "jobs": jobs, "note": note,
            "synthetic": synthetic, "rows": len(frame),
            "recorded_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    table = pa.Table.from_pandas(frame[list(COLUMNS)], preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           META_KEY: json.dumps(meta, default=str).encode()})
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.partial")  # a stopped write leaves no half file
    try:
        pq.write_table(table, partial, compression="zstd", compression_level=19)  # 1/4 smaller
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


@dataclass(frozen=True)
class Merged:
    """What merge_recordings wrote: rows, and the pairs a later recording measured again."""

    path: Path
    rows: int
    remeasured: int
    jobs: int


def merge_recordings(sources: list[str | Path], out: Path, note: str = "") -> Merged:
    """One recording of several of one environment (e.g. the per-job files of one sweep): their
    rows, a pair measured in more than one kept as the last of them measured it, and their jobs
    in order (each named with the file it came from). The file is written whole or not at all."""
    if not sources:
        raise RecordingError("no recordings to merge")
    recordings = [read_recording(s) for s in sources]
    kinds = {(r.environment.get("fingerprint"), r.synthetic) for r in recordings}
    if len(kinds) > 1:
        found = "; ".join(f"{r.path.name}: {r.environment.get('fingerprint')} "
                          f"({r.environment.get('gpu_name')}"
                          f"{', synthetic' if r.synthetic else ''})" for r in recordings)
        raise RecordingError(f"recordings of different environments cannot be merged: {found}")
    frame = pd.concat([r.frame[list(COLUMNS)] for r in recordings], ignore_index=True)
    last = ~frame.duplicated(["kernel_key", "problem_key"], keep="last")
    pairs = [(r, job) for r in recordings for job in r.jobs]
    jobs = [{**job, "id": n, "recording": r.path.name} for n, (r, job) in enumerate(pairs, 1)]
    notes = [r.note for r in recordings if r.note]
    path = write_recording(frame[last].reset_index(drop=True), recordings[0].environment, jobs,
                           out, note=note or "; ".join(dict.fromkeys(notes)),
                           synthetic=recordings[0].synthetic)
    return Merged(path, int(last.sum()), int((~last).sum()), len(jobs))


def _json(value: Any) -> str:
    return json.dumps(value if value is not None else {}, sort_keys=True)


def export_recording(store: Queries, job_ids: list[int], out: Path,
                     fingerprint: str | None = None, note: str = "") -> Path:
    """Write the real-GPU measurements of finished jobs to `out` (one environment per file)."""
    jobs = []
    for job_id in job_ids:
        job = store.job(job_id)
        if job.status != "done":
            raise RecordingError(f"job {job_id} is {job.status}; record finished (done) jobs")
        jobs.append({"id": job.id, "name": job.name, "operator": job.operator,
                     "dtype": job.dtype})
    rows = store.recorded_rows(job_ids)
    if len(rows):
        rows = rows[rows["env_replay_of"].isna()]
    if not len(rows):
        raise RecordingError(f"job(s) {', '.join(map(str, job_ids))} have no measurements "
                             "taken on a GPU (replayed rows are never recorded again)")
    found = sorted(rows["env_fingerprint"].unique())
    if fingerprint is None and len(found) > 1:
        raise RecordingError(f"the jobs were measured in {len(found)} environments "
                             f"({', '.join(found)}); choose one with --environment")
    fingerprint = fingerprint or found[0]
    rows = rows[rows["env_fingerprint"] == fingerprint].copy()
    if not len(rows):
        raise RecordingError(f"no measurements of these jobs in environment {fingerprint}")
    try:
        environment = store.environment(fingerprint)
    except NotFound as exc:
        raise RecordingError(str(exc)) from exc
    for column in ("config", "policy", "telemetry", "shape"):
        rows[column] = rows[column].map(_json)
    rows["fault"] = None
    return write_recording(rows, environment, jobs, out, note=note)


def _meta(source: Any, where: str) -> dict[str, Any]:
    try:
        raw = (pq.read_schema(source).metadata or {}).get(META_KEY)
    except (OSError, pa.ArrowInvalid) as exc:
        raise RecordingError(f"{where}: not a parquet file ({exc})") from exc
    if raw is None:
        raise RecordingError(f"{where}: not a farm recording (no {META_KEY.decode()!r} metadata)")
    meta = json.loads(raw)
    if meta.get("format") not in (1, FORMAT):
        raise RecordingError(f"{where}: recording format {meta.get('format')}, expected 1 to "
                             f"{FORMAT}")
    return meta


def recording_meta(path: str | Path) -> dict[str, Any]:
    """The metadata of a recording file, without reading its rows."""
    return _meta(str(path), str(path))


def read_recording(source: str | Path | bytes, name: str = "") -> Recording:
    """A recording from its file, or from the file's bytes (as actors on other nodes get it)."""
    if isinstance(source, bytes):
        path, reader = Path(name or "<recording>"), lambda: pa.BufferReader(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise RecordingError(f"no recording file {path}")
        reader = lambda: str(path)  # noqa: E731
    meta = _meta(reader(), str(path))
    frame = pq.read_table(reader()).to_pandas()
    if "shape" not in frame.columns:
        frame = _flat_shapes_to_json(frame, str(path))
    return Recording(path=path, environment=meta["environment"], jobs=tuple(meta["jobs"]),
                     note=meta.get("note", ""), synthetic=bool(meta.get("synthetic")),
                     frame=frame)


def _flat_shapes_to_json(frame: pd.DataFrame, where: str) -> pd.DataFrame:
    """A format-1 recording's rows with their shape fields (one column each, named as the
    operator's record names them) gathered into the `shape` JSON column."""
    from kernels.registry import UnknownOperator, operator_spec

    shapes = []
    fields_of: dict[str, list[str]] = {}
    for operator in frame["operator"].unique():
        try:
            fields = operator_spec(operator).fields
        except UnknownOperator as exc:
            raise RecordingError(f"{where}: {exc}") from None
        fields_of[operator] = [f for f in fields if f in frame.columns]
    for row in frame.to_dict("records"):
        shapes.append(_json({f: cell(row[f]) for f in fields_of[row["operator"]]
                             if cell(row[f]) is not None}))
    dropped = sorted({f for fields in fields_of.values() for f in fields})
    return frame.drop(columns=dropped).assign(shape=shapes)


def row_problem(row: dict[str, Any]) -> Problem:
    """The problem of a recording's row."""
    return problem_from_store(row["operator"], row["dtype"], row["layout"],
                              json.loads(row["shape"]))


def find_recordings(arch: str | None = None, folder: Path | None = None) -> list[Path]:
    """The newest real (not synthetic) recording of `arch` (any if None) in `folder` (default
    jobs/recordings/ here and in the farm's source tree), then every older one of the same
    environment: together, all that GPU's recorded pairs. Newest first."""
    folders = [Path(folder)] if folder else list(dict.fromkeys(
        [Path.cwd() / "jobs" / "recordings", RECORDINGS_DIR]))
    found = []
    paths = [p for f in folders if f.is_dir() for p in sorted(f.glob("*.parquet"))]
    for path in paths:
        try:
            meta = recording_meta(path)
        except RecordingError:
            continue
        if meta.get("synthetic") or (arch and meta["environment"]["arch"] != arch):
            continue
        found.append((meta.get("recorded_at", ""), path.stat().st_mtime, path,
                      meta["environment"].get("fingerprint")))
    found.sort(reverse=True)
    return [f[2] for f in found if f[3] == found[0][3]] if found else []


def find_recording(arch: str | None = None, folder: Path | None = None) -> Path | None:
    """The newest real recording of `arch` (any if None), or None."""
    found = find_recordings(arch, folder)
    return found[0] if found else None


def cell(value: Any) -> Any:
    """A recording's cell, None where it is missing (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return value


def _loads(value: Any) -> dict[str, Any]:
    return json.loads(value) if isinstance(value, str) and value else {}


def import_recording(store: Queries, source: str | Path | Recording) -> dict[str, int]:
    """Write a recording's rows into `store` as measurements of its recorded environment (not a
    replay: they are that GPU's measurements), one finished job per recorded operator and dtype,
    vendor rows included (the selection models never choose them), each job in one transaction.
    Importing again replaces the rows (the replaced ones go to history). Returns {job name:
    rows}."""
    recording = source if isinstance(source, Recording) else read_recording(source)
    env = dict(recording.environment)
    if env.get("replay_of"):
        raise RecordingError(f"{recording.path}: its rows are a replay of "
                             f"{env['replay_of']}, not measurements")
    env_id = store.environment_id(env["fingerprint"], **{f: env[f] for f in ENV_FIELDS},
                                  replay_of=None, details=env.get("details") or {})
    frame = recording.frame
    kernels = store.kernel_ids(
        {"key": r["kernel_key"], "family": r["family"], "operator": r["operator"],
         "name": r["instance"], "config": _loads(r["config"]), "source_hash": r["source_hash"]}
        for r in frame.drop_duplicates("kernel_key").to_dict("records"))
    names = {(j.get("operator"), j.get("dtype")): j.get("name") for j in recording.jobs}
    written: dict[str, int] = {}
    for (operator, dtype), part in frame.groupby(["operator", "dtype"], sort=False):
        problems = [row_problem(r) for r in part.drop_duplicates("problem_key").to_dict("records")]
        name = names.get((operator, dtype)) or f"{operator} {dtype}"
        name = name if name.endswith(" (imported)") else f"{name} (imported)"
        store.import_job(ImportedJob(
            name=name, operator=operator, dtype=dtype,
            spec={"imported_from": recording.path.name, "environment": env["fingerprint"]},
            problems=tuple(problems), columns=measurement_columns(part, kernels, env_id)))
        written[name] = len(part)
    return written


def measurement_columns(part: pd.DataFrame, kernels: dict[str, int], env_id: int
                        ) -> dict[str, list[Any]]:
    """A recording's rows as the columns of measurement rows (problems named by
    `problem_key`): missing cells None, samples 0 where missing, JSON objects decoded once for
    all the rows that share them."""
    return {"kernel_id": part["kernel_key"].map(kernels).tolist(),
            "problem_key": part["problem_key"].tolist(),
            "environment_id": [env_id] * len(part),
            "status": part["status"].tolist(),
            "message": _cells(part["message"]),
            "policy": _objects(part["policy"]),
            "telemetry": _objects(part["telemetry"]),
            **{f: _cells(part[f]) for f in TIMING_FIELDS if f != "samples"},
            "samples": part["samples"].fillna(0).astype("int64").tolist()}


def _cells(column: pd.Series) -> list[Any]:
    """A column's cells as Python values, None where missing (as `cell` reads them)."""
    values = column.astype(object)
    return values.where(values.notna(), None).tolist()


def _objects(column: pd.Series) -> list[dict[str, Any]]:
    """A column of JSON texts decoded (as `_loads` reads them), each distinct text once."""
    codes, texts = pd.factorize(column)
    decoded = [_loads(text) for text in texts]
    return [decoded[c] if c >= 0 else {} for c in codes]
