"""Every query the farm makes. Nothing else in the code base writes SQL or touches sessions."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import Engine, exists, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, aliased, sessionmaker

from farm.problems import CONV_FIELDS, ConvProblem
from farm.store.models import (Environment, Job, JobProblem, Kernel, Measurement,
                               MeasurementHistory, Problem, Worker, utcnow)

JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
MEASUREMENT_STATES = ("ok", "compile_error", "launch_error", "timeout", "wrong_result",
                      "unsupported", "not_recorded")
FAILED_STATES = tuple(s for s in MEASUREMENT_STATES if s != "ok")
MEASUREMENT_FIELDS = ("status", "median_us", "min_us", "max_us", "p90_us", "samples", "spread",
                      "tflops", "gbps", "verify_error", "message", "policy", "telemetry")
CLAIM_LOCK = 0x6661726D  # PostgreSQL advisory lock key that serializes job claims ("farm")
_PROBLEM_COLUMNS = {f: f.lower() if len(f) == 1 else f for f in CONV_FIELDS}


class NotFound(LookupError):
    """A job, model or row that the caller named does not exist."""


class JobStopped(RuntimeError):
    """A coordinator's claim on a job ended: it was cancelled or another coordinator took it."""


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
class WorkerSummary:
    name: str
    coordinator: str
    kind: str
    node: str
    gpu_name: str
    arch: str
    state: str
    job_id: int | None
    measuring: str | None
    pairs_done: int
    restarts: int
    started_at: dt.datetime
    updated_at: dt.datetime


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
                                               MeasurementHistory, Environment, Worker)}[table]
        with self.session() as session:
            return session.scalar(select(func.count()).select_from(model)) or 0

    # Environments, kernels and measurements ------------------------------------------------
    def environment_id(self, fingerprint: str, **fields: Any) -> int:
        return _retry_race(lambda: self._environment_id(fingerprint, **fields))

    def _environment_id(self, fingerprint: str, **fields: Any) -> int:
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
        return _retry_race(lambda: self._kernel_ids(kernels))

    def _kernel_ids(self, kernels: list[dict[str, Any]]) -> dict[str, int]:
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
        with self.session.begin() as session:
            _write_measurements(session, rows)

    # The coordinator's queue: claims, heartbeats, guarded writes, workers --------------------
    def running_claims(self) -> list[tuple[int, str]]:
        """(job id, claimed_by) of every running job."""
        with self.session() as session:
            return [tuple(r) for r in session.execute(
                select(Job.id, Job.claimed_by).where(Job.status == "running"))]

    def claim_job(self, claimer: str, stale_before: dt.datetime,
                  dead_claimers: Sequence[str] = (),
                  only: Sequence[int] | None = None) -> int | None:
        """Take the queued job of highest priority (oldest first), or a running one whose
        coordinator is dead or silent since `stale_before` (of `only` these jobs if given);
        None when there is none. A job sharing a problem with another running job waits, so
        two coordinators never measure one pair at once. Safe between coordinators: the
        conditional UPDATE takes a job only if it is still claimable (compare and swap),
        inside SQLite's write lock or, on PostgreSQL, a transaction-scoped advisory lock."""
        mine, theirs, other = aliased(JobProblem), aliased(JobProblem), aliased(Job)
        overlapping = exists().where(mine.job_id == Job.id, theirs.problem_id == mine.problem_id,
                                     theirs.job_id == other.id, other.status == "running",
                                     other.id != Job.id)
        claimable = ((Job.status == "queued") | ((Job.status == "running") & (
            (Job.updated_at < stale_before) | Job.claimed_by.in_(list(dead_claimers)))))
        claimable = claimable & ~overlapping
        if only is not None:
            claimable = claimable & Job.id.in_(list(only))
        while True:  # a lost race means another coordinator took that job: try the next
            with self.session.begin() as session:
                if session.bind.dialect.name == "postgresql":  # one claim at a time
                    session.execute(select(func.pg_advisory_xact_lock(CLAIM_LOCK)))
                job_id = session.scalar(select(Job.id).where(claimable)
                                        .order_by(Job.priority.desc(), Job.id).limit(1)
                                        .with_for_update(skip_locked=True))
                if job_id is None:
                    return None
                now = utcnow()
                taken = session.execute(update(Job).where(Job.id == job_id, claimable).values(
                    status="running", claimed_by=claimer, updated_at=now, finished_at=None,
                    started_at=func.coalesce(Job.started_at, now)))
                if taken.rowcount == 1:
                    return job_id

    def _guard(self, session: Session, job_id: int, claimer: str, **values: Any) -> None:
        """Update a job this coordinator holds; JobStopped if it no longer does."""
        done = session.execute(update(Job).where(
            Job.id == job_id, Job.claimed_by == claimer, Job.status == "running")
            .values(updated_at=utcnow(), **values))
        if done.rowcount != 1:
            job = session.get(Job, job_id)
            why = ("deleted" if job is None else job.status if job.status != "running"
                   else f"claimed by {job.claimed_by}")
            raise JobStopped(f"job {job_id} is {why}")

    def heartbeat(self, job_id: int, claimer: str, **counters: int) -> None:
        """Say the claimer is alive (and set counters); JobStopped if the claim has ended."""
        with self.session.begin() as session:
            self._guard(session, job_id, claimer, **counters)

    def record_results(self, job_id: int, claimer: str, rows: Sequence[dict[str, Any]],
                       done: int, failed: int) -> None:
        """Write a job's measurements and advance its counters in one transaction, only
        while `claimer` holds the job (JobStopped otherwise, and nothing is written)."""
        with self.session.begin() as session:
            self._guard(session, job_id, claimer, done_pairs=Job.done_pairs + done,
                        failed_pairs=Job.failed_pairs + failed)
            _write_measurements(session, rows)

    def finish_job(self, job_id: int, claimer: str, status: str,
                   error: str | None = None) -> None:
        """End a held job: done or failed; `queued` hands it back (finished pairs stay)."""
        values: dict[str, Any] = {"status": status, "error": error}
        if status == "queued":
            values["claimed_by"] = None
        else:
            values["finished_at"] = utcnow()
        with self.session.begin() as session:
            self._guard(session, job_id, claimer, **values)

    def job_problem_ids(self, job_id: int) -> list[tuple[int, ConvProblem]]:
        with self.session() as session:
            rows = session.scalars(select(Problem).join(JobProblem)
                                   .where(JobProblem.job_id == job_id)
                                   .order_by(JobProblem.position))
            return [(row.id, problem_record(row)) for row in rows]

    def finished_pairs(self, problem_ids: Iterable[int], environment_ids: Iterable[int]
                       ) -> list[tuple[int, int, str, int | None]]:
        """(kernel id, problem id, status, job id) of the measurements of these problems in
        these environments."""
        query = select(Measurement.kernel_id, Measurement.problem_id, Measurement.status,
                       Measurement.job_id).where(
            Measurement.problem_id.in_(set(problem_ids)),
            Measurement.environment_id.in_(set(environment_ids)))
        with self.session() as session:
            return [tuple(r) for r in session.execute(query)]

    def save_workers(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or update worker rows (by name)."""
        with self.session.begin() as session:
            for row in rows:
                worker = session.get(Worker, row["name"])
                if worker is None:
                    session.add(Worker(**row))
                else:
                    for field, value in row.items():
                        setattr(worker, field, value)

    def stop_workers(self, coordinator: str) -> None:
        with self.session.begin() as session:
            session.execute(update(Worker).where(Worker.coordinator == coordinator).values(
                state="stopped", job_id=None, measuring=None, updated_at=utcnow()))

    def workers(self, include_stopped: bool = False) -> list[WorkerSummary]:
        query = select(Worker).order_by(Worker.coordinator, Worker.name)
        if not include_stopped:
            query = query.where(Worker.state != "stopped")
        with self.session() as session:
            return [WorkerSummary(**{f: getattr(w, f) for f in WorkerSummary.__dataclass_fields__})
                    for w in session.scalars(query)]

    def recorded_rows(self, job_ids: Sequence[int]) -> pd.DataFrame:
        """Every measurement of these jobs with its kernel, problem and environment, for a
        recording: identities in full, JSON fields as they are stored."""
        query = (select(*[getattr(Measurement, f) for f in MEASUREMENT_FIELDS],
                        Measurement.job_id, Kernel.key.label("kernel_key"), Kernel.family,
                        Kernel.name.label("instance"), Kernel.operator, Kernel.config,
                        Kernel.source_hash, Problem.key.label("problem_key"), Problem.dtype,
                        Problem.layout,
                        *[getattr(Problem, c).label(f) for f, c in _PROBLEM_COLUMNS.items()],
                        Environment.fingerprint.label("env_fingerprint"),
                        Environment.replay_of.label("env_replay_of"))
                 .join(Kernel, Measurement.kernel_id == Kernel.id)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(Environment, Measurement.environment_id == Environment.id)
                 .where(Measurement.job_id.in_(list(job_ids))).order_by(Measurement.id))
        with self.session() as session:
            rows = session.execute(query).mappings().all()
        return pd.DataFrame([dict(r) for r in rows])

    def job_results(self, job_id: int, environment_ids: Iterable[int]) -> pd.DataFrame:
        """The measurements of a job's problems in these environments (whichever job made
        them): status, timings, kernel family and name, problem fields."""
        query = (select(Measurement.status, Measurement.median_us, Measurement.tflops,
                        Measurement.message, Measurement.job_id, Kernel.family,
                        Kernel.name.label("kernel"), Problem.key.label("problem_key"),
                        *[getattr(Problem, c).label(f) for f, c in _PROBLEM_COLUMNS.items()])
                 .join(Kernel, Measurement.kernel_id == Kernel.id)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(JobProblem, (JobProblem.problem_id == Problem.id)
                       & (JobProblem.job_id == job_id))
                 .where(Measurement.environment_id.in_(list(environment_ids)))
                 .order_by(JobProblem.position, Measurement.id))
        with self.engine.connect() as conn:
            return pd.read_sql(query, conn)

    def environment(self, fingerprint: str) -> dict[str, Any]:
        """An environment's fields by fingerprint (NotFound if there is none)."""
        with self.session() as session:
            env = session.scalar(select(Environment).where(Environment.fingerprint == fingerprint))
            if env is None:
                raise NotFound(f"no environment {fingerprint}")
            return {c: getattr(env, c) for c in ("fingerprint", "gpu_name", "arch", "sm_count",
                    "driver", "compiler", "runtime", "farm_version", "replay_of", "details")}

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


def _retry_race(insert: Any) -> Any:
    """Run a select-or-insert; if another process inserted the same key meanwhile, once more."""
    try:
        return insert()
    except IntegrityError:
        return insert()


def _write_measurements(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    for row in rows:
        if row["status"] not in MEASUREMENT_STATES:
            raise ValueError(f"unknown measurement status {row['status']!r}")
    if not rows:
        return
    found = session.scalars(select(Measurement).where(
        Measurement.problem_id.in_({r["problem_id"] for r in rows}),
        Measurement.kernel_id.in_({r["kernel_id"] for r in rows}),
        Measurement.environment_id.in_({r["environment_id"] for r in rows})))
    existing = {(m.kernel_id, m.problem_id, m.environment_id): m for m in found}
    for row in rows:
        old = existing.get((row["kernel_id"], row["problem_id"], row["environment_id"]))
        if old is None:
            new = Measurement(**row)
            session.add(new)
            existing[(row["kernel_id"], row["problem_id"], row["environment_id"])] = new
            continue
        if old.id is None:
            session.flush()  # added earlier in this batch: it needs its id to be archived
        session.add(MeasurementHistory(
            measurement_id=old.id, kernel_id=old.kernel_id, problem_id=old.problem_id,
            environment_id=old.environment_id, job_id=old.job_id, created_at=old.created_at,
            **{f: getattr(old, f) for f in MEASUREMENT_FIELDS}))
        for field, value in row.items():
            setattr(old, field, value)
        old.created_at = utcnow()


def problem_record(row: Problem) -> ConvProblem:
    return ConvProblem(op=row.operator, dtype=row.dtype, layout=row.layout,
                       **{f: getattr(row, c) for f, c in _PROBLEM_COLUMNS.items()})
