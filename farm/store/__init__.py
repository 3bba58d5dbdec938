"""The farm's database: models, migrations and every query."""

from farm.store.db import DatabaseError, default_url, describe, make_engine, require_current, upgrade
from farm.store.queries import (FAILED_STATES, JOB_STATES, MEASUREMENT_STATES, SETTLED_STATES,
                                ImportedJob, ProblemClaim,
                                JobStopped, JobSummary, NotFound, Queries, TimingFilter,
                                WorkerSummary)


def open_store(url: str | None = None, *, migrate: bool | None = None) -> Queries:
    """Connect to the database. SQLite (the embedded default) is migrated on open; a shared
    PostgreSQL database must be at the code's revision already (`farm db upgrade`)."""
    engine = make_engine(url)
    if migrate or (migrate is None and engine.dialect.name == "sqlite"):
        upgrade(engine)
    else:
        require_current(engine)
    return Queries(engine)


__all__ = ["DatabaseError", "FAILED_STATES", "ImportedJob", "JOB_STATES", "JobStopped",
           "JobSummary",
           "MEASUREMENT_STATES", "SETTLED_STATES",
           "NotFound", "ProblemClaim", "Queries", "TimingFilter", "default_url", "describe", "make_engine",
           "open_store", "require_current", "upgrade", "WorkerSummary"]
