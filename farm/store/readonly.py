"""Opening the database for reading only: whether it can be shown at all (missing, empty,
behind the code), and an engine that cannot write (SQLite `query_only`, PostgreSQL read-only
transactions) under the dashboard's queries."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import event, make_url
from sqlalchemy.exc import ArgumentError

from farm.store.db import DatabaseError, current_revision, describe, head_revision, make_engine
from farm.store.views import Views


@dataclass(frozen=True)
class DbState:
    """Whether the database can be shown: status is ready, missing, empty, behind or
    unreachable; detail says why in words."""

    url: str
    status: str
    detail: str = ""


def database_state(url: str) -> DbState:
    """Can the dashboard read this database? Never creates or migrates it."""
    shown = describe(url)
    try:
        parsed = make_url(url)
    except ArgumentError:
        return DbState(shown, "unreachable", f"FARM_DB_URL is not a database URL: {url!r}")
    file = parsed.database if parsed.get_backend_name() == "sqlite" else None
    if file not in (None, "", ":memory:") and not Path(file).expanduser().is_file():
        return DbState(shown, "missing", f"there is no database file at {file}")
    try:
        engine = make_engine(url)
    except DatabaseError as exc:
        return DbState(shown, "unreachable", str(exc))
    try:
        current, head = current_revision(engine), head_revision(engine)
    finally:
        engine.dispose()
    if current is None:
        return DbState(shown, "empty", "the database has no tables yet")
    if current != head:
        return DbState(shown, "behind", f"the database is at revision {current}, the code "
                                        f"needs {head}")
    return DbState(shown, "ready")


def open_views(url: str) -> Views:
    """The dashboard's queries over a read-only engine (DatabaseError when it cannot connect)."""
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_read_only)
    else:
        event.listen(engine, "connect", _pg_read_only)
    engine.dispose()  # the pooled connection make_engine opened predates the listener
    return Views(engine)


def _sqlite_read_only(dbapi_connection, _record) -> None:
    dbapi_connection.execute("PRAGMA query_only=ON")


def _pg_read_only(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("SET default_transaction_read_only = on")
    cursor.close()
    dbapi_connection.commit()
