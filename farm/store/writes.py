"""Writing measurement rows: new pairs in one multi-row insert, re-measured pairs replaced with
the old row kept in measurement_history."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from farm.store.models import MEASUREMENT_STATES, Measurement, MeasurementHistory, utcnow

MEASUREMENT_FIELDS = ("status", "median_us", "min_us", "max_us", "p90_us", "samples", "spread",
                      "tflops", "gbps", "verify_error", "message", "policy", "telemetry")
_COLUMNS = ("kernel_id", "problem_id", "environment_id", "job_id", *MEASUREMENT_FIELDS)
_DEFAULTS = {"samples": 0, "policy": {}, "telemetry": {}}

Key = tuple[int, int, int]  # kernel, problem, environment


def _key(row: dict[str, Any]) -> Key:
    return row["kernel_id"], row["problem_id"], row["environment_id"]


def write_measurements(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Insert or replace measurements (one per kernel x problem x environment)."""
    for row in rows:
        if row["status"] not in MEASUREMENT_STATES:
            raise ValueError(f"unknown measurement status {row['status']!r}")
    if not rows:
        return
    found = set(map(tuple, session.execute(select(
        Measurement.kernel_id, Measurement.problem_id, Measurement.environment_id).where(
        Measurement.problem_id.in_({r["problem_id"] for r in rows}),
        Measurement.kernel_id.in_({r["kernel_id"] for r in rows}),
        Measurement.environment_id.in_({r["environment_id"] for r in rows})))))
    fresh, again = [], []
    for row in rows:
        key = _key(row)
        if key in found:
            again.append(row)
        else:
            found.add(key)
            fresh.append(row)
    if fresh and session.bind.dialect.name == "postgresql":
        _copy(session, fresh)
    elif fresh:
        now = utcnow()
        session.execute(insert(Measurement.__table__), [
            {**{c: row.get(c, _DEFAULTS.get(c)) for c in _COLUMNS}, "created_at": now}
            for row in fresh])
    if again:
        _replace(session, again)


def _copy(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """New rows through PostgreSQL's COPY, inside the session's transaction."""
    now = utcnow()
    json_columns = {"policy", "telemetry"}
    columns = [*_COLUMNS, "created_at"]
    texts: dict[int, tuple[Any, str]] = {}  # id -> (object, its JSON): rows share policies

    def as_json(value: Any) -> str:
        if id(value) not in texts:
            texts[id(value)] = (value, json.dumps(value or {}))
        return texts[id(value)][1]

    raw = session.connection().connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(
            f"COPY measurements ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([as_json(row.get(c)) if c in json_columns
                            else row.get(c, _DEFAULTS.get(c)) for c in _COLUMNS] + [now])


def _replace(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Re-measured pairs: archive each old row, then overwrite it."""
    for row in rows:
        old = session.scalars(select(Measurement).where(
            Measurement.kernel_id == row["kernel_id"], Measurement.problem_id == row["problem_id"],
            Measurement.environment_id == row["environment_id"])).one()
        session.add(MeasurementHistory(
            measurement_id=old.id, kernel_id=old.kernel_id, problem_id=old.problem_id,
            environment_id=old.environment_id, job_id=old.job_id, created_at=old.created_at,
            **{f: getattr(old, f) for f in MEASUREMENT_FIELDS}))
        for field, value in row.items():
            setattr(old, field, value)
        old.created_at = utcnow()
        session.flush()
