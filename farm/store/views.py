"""Read-only queries for the dashboard. Counts and filters run in SQL; the results pages read
one scope's ok timings in one scan and rank them in memory (farm.store.scope). Results come
back as DataFrames and frozen dataclasses. Open them with farm.store.readonly.open_views, whose
engine cannot write.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Engine, case, func, or_, select

from farm.store.models import (FAILED_STATES, Artifact, Environment, Job, JobProblem, Kernel,
                               Measurement, Model, Problem, Worker)
from farm.store.queries import shape_condition, shape_frame, with_shapes
from farm.store.scope import VENDOR, ScopeTimings

M = Measurement


@dataclass(frozen=True)
class Totals:
    jobs: dict[str, int]  # jobs per status
    statuses: dict[str, int]  # measurements per status
    problems: int
    kernels: int
    models: int
    workers_active: int

    @property
    def measurements(self) -> int:
        return sum(self.statuses.values())

    @property
    def failed(self) -> int:
        """Measurements that failed (an unsupported pair is settled, not failed)."""
        return sum(n for s, n in self.statuses.items() if s in FAILED_STATES)

    @property
    def empty(self) -> bool:
        return not self.jobs and not self.statuses and not self.models


@dataclass(frozen=True)
class Choices:
    """The values the dashboard's filters offer, from the small tables."""

    operators: tuple[str, ...]
    dtypes: tuple[str, ...]
    archs: tuple[str, ...]
    gpu_names: tuple[str, ...]
    families: tuple[str, ...]


@dataclass(frozen=True)
class TimingSelection:
    """Filters of the timings explorer; empty means any."""

    operator: str | None = None
    dtype: str | None = None
    archs: tuple[str, ...] = ()
    gpu_names: tuple[str, ...] = ()
    families: tuple[str, ...] = ()
    kernels: tuple[str, ...] = ()
    shape: tuple[tuple[str, tuple[Any, ...]], ...] = ()  # (field, allowed values)
    status: str | None = "ok"  # one status, "failed" (any of FAILED_STATES), or None (any)
    include_replay: bool = True


class Views:
    """The dashboard's queries over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def _frame(self, query) -> pd.DataFrame:
        with self.engine.connect() as conn:
            return pd.read_sql(query, conn)

    def _columns(self, query, dtypes: dict[str, str]) -> pd.DataFrame:
        """A large result of plain numbers, read from the driver's cursor without building a
        row object per row (several times faster than read_sql on 100k+ rows)."""
        with self.engine.connect() as conn:
            result = conn.execute(query)
            rows = result.cursor.fetchall()
        return pd.DataFrame(np.array(rows, dtype=np.float64).reshape(-1, len(dtypes)),
                            columns=list(dtypes)).astype(dtypes)

    def _rows(self, query) -> list[tuple]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(query)]

    # Overview ------------------------------------------------------------------------------
    def totals(self) -> Totals:
        count = lambda model: select(func.count()).select_from(model)
        with self.engine.connect() as conn:
            jobs = dict(conn.execute(select(Job.status, func.count()).group_by(Job.status)).all())
            statuses = dict(conn.execute(select(M.status, func.count()).group_by(M.status)).all())
            scalars = [conn.scalar(count(m)) for m in (Problem, Kernel, Model)]
            active = conn.scalar(count(Worker).where(Worker.state != "stopped"))
        return Totals(jobs, statuses, *scalars, active)

    def job_queue(self, finished: int = 50) -> pd.DataFrame:
        """Queued and running jobs, then the latest `finished` others, with problem counts."""
        problems = (select(func.count()).where(JobProblem.job_id == Job.id)
                    .correlate(Job).scalar_subquery())
        columns = [Job.id, Job.name, Job.operator, Job.dtype, Job.status, Job.priority,
                   Job.total_pairs, Job.done_pairs, Job.failed_pairs, Job.cached_pairs,
                   problems.label("problems"), Job.claimed_by, Job.error, Job.created_at,
                   Job.started_at, Job.finished_at, Job.updated_at]
        active = Job.status.in_(("queued", "running"))
        live = self._frame(select(*columns).where(active))
        done = self._frame(select(*columns).where(~active).order_by(Job.id.desc())
                           .limit(finished))
        return pd.concat([f for f in (live, done) if len(f)] or [live], ignore_index=True)

    def workers(self) -> pd.DataFrame:
        return self._frame(select(Worker).order_by(Worker.coordinator, Worker.name))

    def throughput(self, since: dt.datetime, bucket_s: int) -> pd.DataFrame:
        """Measurements taken per time bucket since `since` (UTC): time, ok, failed. A pair
        measured again counts once, when last taken (history rows are not counted)."""
        if self.engine.dialect.name == "sqlite":  # stored as 'YYYY-MM-DD HH:MM:SS.ffffff'
            minute = func.substr(M.created_at, 1, 16)
        else:
            minute = func.date_trunc("minute", M.created_at)
        ok = func.sum(case((M.status == "ok", 1), else_=0))
        failed = func.sum(case((M.status.in_(FAILED_STATES), 1), else_=0))
        frame = self._frame(select(minute.label("minute"), ok.label("ok"), failed.label("failed"))
                            .where(M.created_at >= since).group_by(minute))
        frame["time"] = pd.to_datetime(frame["minute"], utc=True).dt.floor(f"{bucket_s}s")
        return frame.groupby("time", as_index=False)[["ok", "failed"]].sum()

    def failures(self, limit: int = 200) -> pd.DataFrame:
        """Failed measurements (FAILED_STATES) grouped by status and message, most frequent
        first."""
        count = func.count().label("count")
        return self._frame(select(M.status, M.message, count,
                                  func.max(M.created_at).label("last_seen"))
                           .where(M.status.in_(FAILED_STATES)).group_by(M.status, M.message)
                           .order_by(count.desc()).limit(limit))

    # Filters -------------------------------------------------------------------------------
    def choices(self) -> Choices:
        distinct = lambda col: tuple(sorted(v for (v,) in self._rows(
            select(col).distinct()) if v is not None))
        return Choices(distinct(Problem.operator), distinct(Problem.dtype),
                       distinct(Environment.arch), distinct(Environment.gpu_name),
                       distinct(Kernel.family))

    def problems(self, operator: str | None = None) -> pd.DataFrame:
        query = select(Problem.id, Problem.key, Problem.operator, Problem.dtype, Problem.layout,
                       Problem.shape, Problem.flops, Problem.min_bytes)
        if operator:
            query = query.where(Problem.operator == operator)
        return shape_frame(self._frame(query.order_by(Problem.id)))

    def kernels(self, operator: str | None = None) -> pd.DataFrame:
        query = select(Kernel.id, Kernel.key, Kernel.name, Kernel.family, Kernel.operator)
        if operator:
            query = query.where(Kernel.operator == operator)
        return self._frame(query.order_by(Kernel.family, Kernel.name))

    # Results per shape ---------------------------------------------------------------------
    def scope(self, operator: str, dtype: str, arch: str) -> ScopeTimings:
        """The ok timings of one operator and dtype on one architecture, with the kernels,
        problems and environments they name (see farm.store.scope for what is derived)."""
        timings = self._columns(select(M.problem_id, M.environment_id, M.kernel_id, M.median_us)
                                .where(*_scope(operator, dtype, arch)),
                                {"problem_id": "int64", "environment_id": "int64",
                                 "kernel_id": "int64", "median_us": "float64"})
        kernels = self._frame(select(Kernel.id, Kernel.name, Kernel.key, Kernel.family)
                              .where(Kernel.operator == operator))
        problems = shape_frame(self._frame(
            select(Problem.id.label("problem_id"), Problem.key.label("problem_key"),
                   Problem.layout, Problem.shape, Problem.flops, Problem.min_bytes)
            .where(Problem.operator == operator, Problem.dtype == dtype)))
        environments = self._frame(select(Environment.id.label("environment_id"),
                                          Environment.gpu_name, Environment.replay_of)
                                   .where(Environment.arch == arch))
        return ScopeTimings(timings, kernels, problems, environments)

    # Models --------------------------------------------------------------------------------
    def models(self) -> pd.DataFrame:
        return self._frame(select(Model.id, Model.operator, Model.arch, Model.dtype,
                                  Model.version, Model.promoted, Model.created_at,
                                  Model.metrics, Model.data_window, Model.artifact_id,
                                  Artifact.size.label("bundle_bytes"))
                           .outerjoin(Artifact, Model.artifact_id == Artifact.id)
                           .order_by(Model.operator, Model.arch, Model.dtype, Model.version))

    def bundle(self, artifact_id: int) -> tuple[str, bytes]:
        """An exported model bundle: its key and bytes."""
        rows = self._rows(select(Artifact.key, Artifact.data).where(Artifact.id == artifact_id))
        if not rows:
            raise LookupError(f"no artifact with id {artifact_id}")
        return rows[0][0], bytes(rows[0][1])

    # Timings explorer ----------------------------------------------------------------------
    def timings(self, where: TimingSelection, limit: int) -> pd.DataFrame:
        """At most `limit` timings matching `where`, newest pairs last."""
        query = (select(M.id, M.status, M.median_us, M.min_us, M.p90_us, M.spread, M.samples,
                        M.tflops, M.gbps, M.message, M.job_id, M.created_at, Kernel.family,
                        Kernel.name.label("kernel"), Problem.operator, Problem.dtype,
                        Problem.layout, M.problem_id,
                        Problem.flops, Problem.min_bytes, Problem.key.label("problem_key"),
                        Environment.gpu_name, Environment.arch, Environment.replay_of)
                 .join(Kernel, M.kernel_id == Kernel.id)
                 .join(Problem, M.problem_id == Problem.id)
                 .join(Environment, M.environment_id == Environment.id))
        for column, value in ((Problem.operator, where.operator), (Problem.dtype, where.dtype)):
            if value:
                query = query.where(column == value)
        if where.status:
            query = query.where(M.status.in_(FAILED_STATES) if where.status == "failed"
                                else M.status == where.status)
        for column, values in ((Environment.arch, where.archs),
                               (Environment.gpu_name, where.gpu_names),
                               (Kernel.family, where.families), (Kernel.name, where.kernels)):
            if values:
                query = query.where(column.in_(list(values)))
        for field, values in where.shape:
            if values:
                query = query.where(or_(*(shape_condition(field, v) for v in values)))
        if not where.include_replay:
            query = query.where(Environment.replay_of.is_(None))
        with self.engine.connect() as conn:
            return with_shapes(conn, pd.read_sql(query.order_by(M.id).limit(limit), conn))


def _ok():
    """status = 'ok', written so that SQLite never walks the status index for it (nearly
    every row is ok; without ANALYZE statistics it would pick that index over better ones)."""
    return M.status.concat("") == "ok"


def _scope(operator: str, dtype: str, arch: str) -> tuple[Any, ...]:
    """ok timings of one operator and dtype on one architecture (problems and environments
    by id, so the planner walks the (problem, environment) index)."""
    return (_ok(), M.median_us.is_not(None),
            M.problem_id.in_(select(Problem.id).where(Problem.operator == operator,
                                                      Problem.dtype == dtype)),
            M.environment_id.in_(select(Environment.id).where(Environment.arch == arch)))


__all__ = ["VENDOR", "Choices", "ScopeTimings", "TimingSelection", "Totals", "Views"]
