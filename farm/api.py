"""The farm's operations as a small Python API; the CLI is a thin shell over these."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from farm.specs import ResolvedSpec, load_spec
from farm.store import JobSummary, Queries, TimingFilter, open_store


def submit(spec_path: str | Path, store: Queries | None = None) -> int:
    """Validate a spec file completely, then queue it; returns the job id."""
    resolved = load_spec(spec_path)
    return queue(resolved, store or open_store())


def queue(resolved: ResolvedSpec, store: Queries) -> int:
    spec = resolved.spec
    return store.create_job(name=spec.name, operator=spec.operator, dtype=spec.dtype,
                            priority=spec.priority, spec=resolved.record(),
                            problems=resolved.problems)


def status(job_id: int | None = None, store: Queries | None = None) -> list[JobSummary]:
    store = store or open_store()
    return [store.job(job_id)] if job_id is not None else store.jobs()


def cancel(job_id: int, store: Queries | None = None) -> JobSummary:
    return (store or open_store()).cancel_job(job_id)


def timings(where: TimingFilter = TimingFilter(), store: Queries | None = None) -> pd.DataFrame:
    """Historical timings as a DataFrame (one row per kernel x problem x environment)."""
    return (store or open_store()).timings(where)
