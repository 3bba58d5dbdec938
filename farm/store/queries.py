"""Every query the farm makes. Nothing else in the code base writes SQL or touches sessions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from farm.problems import CONV_FIELDS, ConvProblem
from farm.store.models import (Environment, Job, JobProblem, Kernel, Measurement,
                               MeasurementHistory, Problem, utcnow)

JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
MEASUREMENT_STATES = ("ok", "compile_error", "launch_error", "timeout", "wrong_result",
                      "unsupported", "not_recorded")
FAILED_STATES = tuple(s for s in MEASUREMENT_STATES if s != "ok")
MEASUREMENT_FIELDS = ("status", "median_us", "min_us", "max_us", "p90_us", "samples", "spread",
                      "tflops", "gbps", "verify_error", "message", "policy", "telemetry")
_PROBLEM_COLUMNS = {f: f.lower() if len(f) == 1 else f for f in CONV_FIELDS}


class NotFound(LookupError):
    """A job, model or row that the caller named does not exist."""


@dataclass(frozen=True)
class JobSummary:
    id: int
    name: str
    operator: str
    dtype: str
    status: str
    priority: int
    total_pairs: int
    done_pairs: int
    failed_pairs: int
    cached_pairs: int
    problems: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    error: str | None

    @property
    def finished_pairs(self) -> int:
        return self.done_pairs + self.failed_pairs + self.cached_pairs


@dataclass(frozen=True)
class TimingFilter:
    """Typed filters for historical timings; None means any."""

    operator: str | None = None
    dtype: str | None = None
    device: str | None = None  # matched against the GPU name or the architecture
    family: str | None = None
    kernel: str | None = None
    status: str | None = "ok"
    job_id: int | None = None
    shape: tuple[tuple[str, int], ...] = ()  # (field, value) pairs such as ("G", 32)
    include_replay: bool = True
    limit: int | None = None


class Queries:
    """The farm's database operations, one method each, over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = sessionmaker(engine, expire_on_commit=False)

    # Problems and jobs ---------------------------------------------------------------------
    def _problem_ids(self, session: Session, problems: Sequence[ConvProblem]) -> list[int]:
        keys = [p.key for p in problems]
        found = dict(session.execute(select(Problem.key, Problem.id)
                                     .where(Problem.key.in_(set(keys)))).all())
        for problem in problems:
            if problem.key in found:
                continue
            row = Problem(key=problem.key, operator=problem.op, dtype=problem.dtype,
                          layout=problem.layout, flops=problem.flops,
                          min_bytes=problem.min_bytes,
                          **{_PROBLEM_COLUMNS[f]: getattr(problem, f) for f in CONV_FIELDS})
            session.add(row)
            session.flush()
            found[problem.key] = row.id
        return [found[k] for k in keys]

    def create_job(self, name: str, operator: str, dtype: str, priority: int,
                   spec: dict[str, Any], problems: Sequence[ConvProblem]) -> int:
        """Queue a job and its problems in one transaction; returns the job id."""
        with self.session.begin() as session:
            ids = self._problem_ids(session, problems)
            job = Job(name=name, operator=operator, dtype=dtype, priority=priority, spec=spec,
                      status="queued")
            session.add(job)
            session.flush()
            seen: set[int] = set()
            for position, problem_id in enumerate(ids):
                if problem_id not in seen:
                    seen.add(problem_id)
                    session.add(JobProblem(job_id=job.id, problem_id=problem_id,
                                           position=position))
            return job.id

    def _summary(self, session: Session, job: Job) -> JobSummary:
        problems = session.scalar(select(func.count()).select_from(JobProblem)
                                  .where(JobProblem.job_id == job.id))
        return JobSummary(id=job.id, name=job.name, operator=job.operator, dtype=job.dtype,
                          status=job.status, priority=job.priority,
                          total_pairs=job.total_pairs, done_pairs=job.done_pairs,
                          failed_pairs=job.failed_pairs, cached_pairs=job.cached_pairs,
                          problems=problems or 0, created_at=job.created_at,
                          started_at=job.started_at, finished_at=job.finished_at,
                          error=job.error)

    def job(self, job_id: int) -> JobSummary:
        with self.session() as session:
            job = session.get(Job, job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id}")
            return self._summary(session, job)

    def job_spec(self, job_id: int) -> dict[str, Any]:
        with self.session() as session:
            job = session.get(Job, job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id}")
            return job.spec

    def jobs(self, status: str | None = None, limit: int = 50) -> list[JobSummary]:
        with self.session() as session:
            query = select(Job).order_by(Job.id.desc()).limit(limit)
            if status:
                query = query.where(Job.status == status)
            return [self._summary(session, job) for job in session.scalars(query)]

    def job_problems(self, job_id: int) -> list[ConvProblem]:
        with self.session() as session:
            rows = session.scalars(select(Problem).join(JobProblem)
                                   .where(JobProblem.job_id == job_id)
                                   .order_by(JobProblem.position))
            return [problem_record(row) for row in rows]

    def cancel_job(self, job_id: int) -> JobSummary:
        """Stop a queued or running job; a finished job is left as it is."""
        with self.session.begin() as session:
            job = session.get(Job, job_id)
            if job is None:
                raise NotFound(f"no job with id {job_id}")
            if job.status in ("queued", "running"):
                job.status = "cancelled"
                job.finished_at = job.updated_at = utcnow()
            return self._summary(session, job)

    def set_job_state(self, job_id: int, status: str, error: str | None = None,
                      **counters: int) -> None:
        if status not in JOB_STATES:
            raise ValueError(f"unknown job status {status!r}")
        values: dict[str, Any] = {"status": status, "updated_at": utcnow(), **counters}
        if error is not None:
            values["error"] = error
        if status == "running":
            values["started_at"] = func.coalesce(Job.started_at, utcnow())
        if status in ("done", "failed", "cancelled"):
            values["finished_at"] = utcnow()
        with self.session.begin() as session:
            session.execute(update(Job).where(Job.id == job_id).values(**values))

    def count_rows(self, table: str) -> int:
        """Rows in one of the farm's tables (for checks and summaries)."""
        model = {m.__tablename__: m for m in (Job, Problem, JobProblem, Kernel, Measurement,
                                               MeasurementHistory, Environment)}[table]
        with self.session() as session:
            return session.scalar(select(func.count()).select_from(model)) or 0

    # Environments, kernels and measurements ------------------------------------------------
    def environment_id(self, fingerprint: str, **fields: Any) -> int:
        with self.session.begin() as session:
            found = session.scalar(select(Environment.id)
                                   .where(Environment.fingerprint == fingerprint))
            if found is not None:
                return found
            row = Environment(fingerprint=fingerprint, **fields)
            session.add(row)
            session.flush()
            return row.id

    def kernel_ids(self, kernels: Iterable[dict[str, Any]]) -> dict[str, int]:
        """Ids for kernel records (key, family, operator, name, config, source_hash)."""
        kernels = list(kernels)
        with self.session.begin() as session:
            found = dict(session.execute(select(Kernel.key, Kernel.id).where(
                Kernel.key.in_({k["key"] for k in kernels}))).all())
            for record in kernels:
                if record["key"] not in found:
                    row = Kernel(**record)
                    session.add(row)
                    session.flush()
                    found[record["key"]] = row.id
            return found

    def record_measurements(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace measurements in one transaction; replaced rows go to history."""
        for row in rows:
            if row["status"] not in MEASUREMENT_STATES:
                raise ValueError(f"unknown measurement status {row['status']!r}")
        with self.session.begin() as session:
            for row in rows:
                existing = session.scalar(select(Measurement).where(
                    Measurement.kernel_id == row["kernel_id"],
                    Measurement.problem_id == row["problem_id"],
                    Measurement.environment_id == row["environment_id"]))
                if existing is None:
                    session.add(Measurement(**row))
                    continue
                session.add(MeasurementHistory(
                    measurement_id=existing.id, kernel_id=existing.kernel_id,
                    problem_id=existing.problem_id, environment_id=existing.environment_id,
                    job_id=existing.job_id, created_at=existing.created_at,
                    **{f: getattr(existing, f) for f in MEASUREMENT_FIELDS}))
                for field, value in row.items():
                    setattr(existing, field, value)
                existing.created_at = utcnow()

    def timings(self, where: TimingFilter) -> pd.DataFrame:
        """Historical timings joined with their kernel, problem and environment."""
        query = (select(Measurement.id, Measurement.status, Measurement.median_us,
                        Measurement.min_us, Measurement.p90_us, Measurement.max_us,
                        Measurement.samples, Measurement.spread, Measurement.tflops,
                        Measurement.gbps, Measurement.verify_error, Measurement.message,
                        Measurement.job_id, Measurement.created_at,
                        Kernel.family, Kernel.name.label("kernel"),
                        Problem.operator, Problem.dtype,
                        *[getattr(Problem, c).label(f) for f, c in _PROBLEM_COLUMNS.items()],
                        Environment.gpu_name, Environment.arch, Environment.replay_of)
                 .join(Kernel, Measurement.kernel_id == Kernel.id)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(Environment, Measurement.environment_id == Environment.id)
                 .order_by(Measurement.id))
        if where.operator:
            query = query.where(Problem.operator == where.operator)
        if where.dtype:
            query = query.where(Problem.dtype == where.dtype)
        if where.device:
            pattern = f"%{where.device.lower()}%"
            query = query.where(func.lower(Environment.gpu_name).like(pattern)
                                | (func.lower(Environment.arch) == where.device.lower()))
        if where.family:
            query = query.where(Kernel.family == where.family)
        if where.kernel:
            query = query.where(Kernel.name == where.kernel)
        if where.status:
            query = query.where(Measurement.status == where.status)
        if where.job_id is not None:
            query = query.where(Measurement.job_id == where.job_id)
        if not where.include_replay:
            query = query.where(Environment.replay_of.is_(None))
        for field, value in where.shape:
            query = query.where(getattr(Problem, _PROBLEM_COLUMNS[field]) == value)
        if where.limit:
            query = query.limit(where.limit)
        with self.engine.connect() as conn:
            return pd.read_sql(query, conn)


def problem_record(row: Problem) -> ConvProblem:
    return ConvProblem(op=row.operator, dtype=row.dtype, layout=row.layout,
                       **{f: getattr(row, c) for f, c in _PROBLEM_COLUMNS.items()})
