"""Connecting to the database (FARM_DB_URL, SQLite by default) and migrating it with Alembic."""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import platformdirs
from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError


class DatabaseError(RuntimeError):
    """The database cannot be used: unreachable, unmigrated, or a bad URL."""


def migrations_dir() -> Path:
    """The Alembic environment: the top-level `migrations` package installed with the farm."""
    try:
        root = resources.files("migrations")
    except ModuleNotFoundError:
        raise DatabaseError("the farm's migrations are not installed: reinstall kernel-farm "
                            "(its wheel ships the top-level package `migrations`)") from None
    if not isinstance(root, Path) or not (root / "env.py").is_file():
        raise DatabaseError(f"the package `migrations` at {root} is not the farm's Alembic "
                            "environment (another package of that name shadows it)")
    return root


def default_url() -> str:
    """FARM_DB_URL, or a SQLite file in the user's data directory."""
    url = os.environ.get("FARM_DB_URL")
    if url:
        return url
    path = Path(platformdirs.user_data_dir("kernel-farm")) / "farm.db"
    return f"sqlite:///{path}"


def describe(url: str) -> str:
    """The URL with its password hidden, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return "<malformed URL>"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def make_engine(url: str | None = None) -> Engine:
    """An engine for `url`; raises DatabaseError naming the database when it cannot connect."""
    url = url or default_url()
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise DatabaseError(f"FARM_DB_URL is not a database URL: {url!r}") from exc
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    if parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("", "psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    kwargs = {"pool_pre_ping": True}
    if parsed.get_backend_name() == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        engine = create_engine(parsed, **kwargs)
    except (NoSuchModuleError, ModuleNotFoundError) as exc:
        raise DatabaseError(f"no driver for {describe(url)}: {exc} "
                            "(PostgreSQL needs the 'postgres' extra)") from exc
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except DBAPIError as exc:
        engine.dispose()
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
        raise DatabaseError(f"cannot reach the database at {describe(url)}: {reason}") from exc
    return engine


def alembic_config(engine: Engine):
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.attributes["connection_engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the migrations up to `revision`."""
    from alembic import command

    command.upgrade(alembic_config(engine), revision)


def current_revision(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(engine: Engine) -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


def require_current(engine: Engine) -> None:
    """Refuse a database whose schema is behind the code, with the command that fixes it."""
    current, head = current_revision(engine), head_revision(engine)
    if current != head:
        state = "empty" if current is None else f"at revision {current}"
        raise DatabaseError(f"the database at {describe(str(engine.url))} is {state}, the code "
                            f"needs {head}: run `farm db upgrade`")
