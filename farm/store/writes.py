"""Writing measurement rows: new pairs in bulk (one executemany, COPY on PostgreSQL), re-measured
pairs replaced in bulk with the old rows kept in measurement_history.

Rows are written a column at a time (name -> one value per row): a coordinator's rows (dicts)
are turned into columns, an imported recording's rows come as columns."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from itertools import repeat
from operator import is_
from typing import Any

from sqlalchemy import DateTime, bindparam, insert, literal, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import ValuesBase
from sqlalchemy.types import JSON

from farm.store.models import MEASUREMENT_STATES, Measurement, MeasurementHistory, utcnow

MEASUREMENT_FIELDS = ("status", "median_us", "min_us", "max_us", "p90_us", "samples", "spread",
                      "tflops", "gbps", "verify_error", "message", "policy", "telemetry")
_KEY_COLUMNS = ("kernel_id", "problem_id", "environment_id")
_SET_COLUMNS = ("job_id", *MEASUREMENT_FIELDS)  # what a re-measurement may replace
_COLUMNS = (*_KEY_COLUMNS, *_SET_COLUMNS)
_DEFAULTS = {"samples": 0, "policy": {}, "telemetry": {}}
_IN_LIMIT = 500  # values in one IN list (SQLite and PostgreSQL cap a statement's parameters)
_CHUNK = 20000  # rows bound at once in an executemany

Key = tuple[int, int, int]  # kernel, problem, environment
Columns = dict[str, list[Any]]  # column -> one value per row


class _Absent:
    """A field that a row leaves out: its default in a new row, kept in a replaced one."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT = _Absent()


def write_measurements(session: Session, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert or replace measurements (one per kernel x problem x environment) given as dicts;
    a field a row leaves out is ABSENT."""
    write_measurement_columns(session, {c: [row.get(c, ABSENT) for row in rows]
                                        for c in _COLUMNS})


def write_measurement_columns(session: Session, columns: Columns) -> None:
    """Insert or replace measurements given a column at a time (every column of a measurement
    row, values ABSENT where a row leaves a field out); a pair given twice is written, then
    replaced, in order."""
    for status in set(columns["status"]):
        if status not in MEASUREMENT_STATES:
            raise ValueError(f"unknown measurement status {status!r}")
    keys = list(zip(*(columns[c] for c in _KEY_COLUMNS)))
    if not keys:
        return
    stored = _stored_ids(session, set(keys))
    fresh, again, seen = [], [], set(stored)
    for index, key in enumerate(keys):
        (again if key in seen else fresh).append(index)
        seen.add(key)
    if fresh:
        _insert(session, _take(columns, fresh, len(keys)))
    if again:
        if any(keys[i] not in stored for i in again):  # given twice, inserted just now
            stored = _stored_ids(session, {keys[i] for i in again})
        _replace(session, _take(columns, again, len(keys)), [stored[keys[i]] for i in again])


def _take(columns: Columns, indices: list[int], rows: int) -> Columns:
    """The columns' values at `indices` (all of them, uncopied, when those are every row)."""
    if len(indices) == rows:
        return columns
    return {c: [values[i] for i in indices] for c, values in columns.items()}


def _stored_ids(session: Session, keys: set[Key]) -> dict[Key, int]:
    """The ids of the stored measurements of these pairs."""
    kernels, problems, environments = (set(c) for c in zip(*keys))
    problems = sorted(problems)
    table = Measurement.__table__
    found: dict[Key, int] = {}
    for start in range(0, len(problems), _IN_LIMIT):
        query = select(table.c.id, *(table.c[c] for c in _KEY_COLUMNS)).where(
            table.c.problem_id.in_(problems[start:start + _IN_LIMIT]),
            table.c.environment_id.in_(environments))
        if len(kernels) <= _IN_LIMIT:
            query = query.where(table.c.kernel_id.in_(kernels))
        for stored_id, kernel, problem, environment in session.execute(query).all():
            if (kernel, problem, environment) in keys:
                found[kernel, problem, environment] = stored_id
    return found


def _insert(session: Session, columns: Columns) -> None:
    """New rows (ABSENT fields at their defaults): COPY on PostgreSQL, one executemany
    elsewhere."""
    values = {c: _or_default(columns[c], _DEFAULTS.get(c)) for c in _COLUMNS}
    values["created_at"] = [utcnow()] * len(values["status"])
    if session.bind.dialect.name == "postgresql":
        _copy(session, values)
    else:
        statement = insert(Measurement.__table__).inline()
        _executemany(session, statement.values({c: bindparam(c) for c in values}), values)


def _or_default(values: list[Any], default: Any) -> list[Any]:
    return [default if v is ABSENT else v for v in values] if _any_absent(values) else values


def _any_absent(values: list[Any]) -> bool:
    return any(map(is_, values, repeat(ABSENT)))


def _executemany(session: Session, statement: ValuesBase, columns: Columns) -> None:
    """Run `statement` once per row of `columns` (parameter name -> values) through the
    driver's executemany, each value bound as SQLAlchemy binds it (a JSON object encoded once
    however many rows share it), without SQLAlchemy's per-row work."""
    dialect = session.bind.dialect
    compiled = statement.compile(dialect=dialect)
    names = compiled.positiontup if compiled.positional else list(compiled.binds)
    bound = [_bound(compiled.binds[n].type, dialect, columns[n]) for n in names]
    connection = session.connection()
    for start in range(0, len(bound[0]), _CHUNK):
        values = zip(*(b[start:start + _CHUNK] for b in bound))
        params = list(values) if compiled.positional else [dict(zip(names, v)) for v in values]
        connection.exec_driver_sql(compiled.string, params)


def _bound(type_: Any, dialect: Any, values: list[Any]) -> list[Any]:
    """Values as the driver receives them for a column of `type_`; JSON objects and times,
    which rows share, bound once per object."""
    process = type_.dialect_impl(dialect).bind_processor(dialect)
    if process is None:
        return values
    if not isinstance(type_, (JSON, DateTime)):
        return list(map(process, values))
    bound: dict[int, Any] = {}  # id -> bound value; the values keep their objects alive
    for value in values:
        if id(value) not in bound:
            bound[id(value)] = process(value)
    return [bound[id(v)] for v in values]


def _copy(session: Session, columns: Columns) -> None:
    """New rows through PostgreSQL's COPY, inside the open transaction."""
    for name in ("policy", "telemetry"):
        columns[name] = _json_texts(columns[name])
    raw = session.connection().connection.driver_connection
    with raw.cursor() as cursor, cursor.copy(
            f"COPY measurements ({', '.join(columns)}) FROM STDIN") as copy:
        for row in zip(*columns.values()):
            copy.write_row(row)


def _json_texts(values: list[Any]) -> list[str]:
    """JSON texts of objects (None as {}), each object encoded once."""
    texts: dict[int, str] = {}
    for value in values:
        if id(value) not in texts:
            texts[id(value)] = json.dumps(value or {})
    return [texts[id(v)] for v in values]


def _replace(session: Session, columns: Columns, ids: list[int]) -> None:
    """Re-measured pairs (`ids`: the stored row of each): archive the old rows, then overwrite
    the fields each row gives."""
    for batch in _rounds(ids):
        _archive(session, [ids[i] for i in batch])
        now = utcnow()
        for names, group in _by_fields(columns, batch).items():
            statement = update(Measurement.__table__).where(
                Measurement.__table__.c.id == bindparam("stored_id")).values(
                {**{n: bindparam(n) for n in names}, "created_at": bindparam("now")})
            _executemany(session, statement, {
                **{n: [columns[n][i] for i in group] for n in names},
                "now": [now] * len(group), "stored_id": [ids[i] for i in group]})


def _rounds(ids: list[int]) -> list[list[int]]:
    """Positions of `ids` in rounds of distinct ids: an id's second position in the second
    round, and so on."""
    if len(set(ids)) == len(ids):
        return [list(range(len(ids)))]
    rounds: list[list[int]] = []
    seen: dict[int, int] = {}
    for position, stored_id in enumerate(ids):
        seen[stored_id] = seen.get(stored_id, -1) + 1
        if seen[stored_id] == len(rounds):
            rounds.append([])
        rounds[seen[stored_id]].append(position)
    return rounds


def _by_fields(columns: Columns, positions: list[int]) -> dict[tuple[str, ...], list[int]]:
    """The positions grouped by the fields their rows give (those not ABSENT, pair aside)."""
    partial = [c for c in _SET_COLUMNS if _any_absent(columns[c])]
    given = tuple(c for c in _SET_COLUMNS if c not in partial)
    groups: dict[tuple[str, ...], list[int]] = {}
    for position in positions:
        names = given + tuple(c for c in partial if columns[c][position] is not ABSENT)
        groups.setdefault(names, []).append(position)
    return groups


def _archive(session: Session, ids: Sequence[int]) -> None:
    """Copy stored measurements into measurement_history, as they are."""
    table = Measurement.__table__
    copied = ["kernel_id", "problem_id", "environment_id", "job_id", "created_at",
              *MEASUREMENT_FIELDS]
    archived_at = literal(utcnow(), DateTime(timezone=True))
    for start in range(0, len(ids), _IN_LIMIT):
        source = (select(table.c.id, *(table.c[c] for c in copied), archived_at)
                  .where(table.c.id.in_(ids[start:start + _IN_LIMIT])).order_by(table.c.id))
        session.execute(insert(MeasurementHistory.__table__).from_select(
            ["measurement_id", *copied, "archived_at"], source))
