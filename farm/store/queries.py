"""Every query the farm makes. Nothing else in the code base writes SQL or touches sessions."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from sqlalchemy import Engine, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from farm.problems import Problem as ProblemRecord, problem_from_store
from farm.store.claims import ClaimQueries, JobStopped, ProblemClaim  # noqa: F401
from farm.store.writes import (MEASUREMENT_FIELDS, write_measurement_columns,
                               write_measurements)
from farm.store.models import (FAILED_STATES, JOB_STATES, MEASUREMENT_STATES,  # noqa: F401
                               SETTLED_STATES, Artifact, Environment, Job, JobProblem, Kernel, Measurement,
                               MeasurementHistory, Model, Problem, Worker, utcnow)


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
class ImportedJob:
    """A finished job to write at once: its problems and its measurement rows a column at a
    time (column -> one value per row), each row naming its problem by key (`problem_key`)
    instead of problem_id and job_id."""

    name: str
    operator: str
    dtype: str
    spec: dict[str, Any]
    problems: tuple[ProblemRecord, ...]
    columns: dict[str, list[Any]]


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
    shape: tuple[tuple[str, Any], ...] = ()  # (field, value) pairs such as ("G", 32)
    include_replay: bool = True
    limit: int | None = None


class Queries(ClaimQueries):
    """The farm's database operations, one method each, over one engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.session = sessionmaker(engine, expire_on_commit=False)

    # Problems and jobs ---------------------------------------------------------------------
    def _problem_ids(self, session: Session, problems: Sequence[ProblemRecord]) -> list[int]:
        """The problems' ids, stored first where they are new."""
        keys = [p.key for p in problems]
        found = dict(session.execute(select(Problem.key, Problem.id)
                                     .where(Problem.key.in_(set(keys)))).all())
        new = _first_of_each(problems, lambda p: p.key, found)
        if new:
            session.execute(insert(Problem.__table__), [
                {"key": p.key, "operator": p.op, "dtype": p.dtype, "layout": p.layout,
                 "shape": p.shape(), "flops": p.flops, "min_bytes": p.min_bytes}
                for p in new.values()])
            found.update(session.execute(select(Problem.key, Problem.id)
                                         .where(Problem.key.in_(list(new)))).all())
        return [found[k] for k in keys]

    def create_job(self, name: str, operator: str, dtype: str, priority: int,
                   spec: dict[str, Any], problems: Sequence[ProblemRecord]) -> int:
        """Queue a job and its problems in one transaction; returns the job id."""
        with self.session.begin() as session:
            return self._add_job(session, name, operator, dtype, priority, spec,
                                 self._problem_ids(session, problems))

    def _add_job(self, session: Session, name: str, operator: str, dtype: str, priority: int,
                 spec: dict[str, Any], problem_ids: Sequence[int]) -> int:
        job = Job(name=name, operator=operator, dtype=dtype, priority=priority, spec=spec,
                  status="queued")
        session.add(job)
        session.flush()
        first = {problem_id: position for position, problem_id in reversed(list(
            enumerate(problem_ids)))}
        session.execute(insert(JobProblem.__table__), [
            {"job_id": job.id, "problem_id": p, "position": i} for p, i in first.items()])
        return job.id

    def import_job(self, job: ImportedJob) -> int:
        """Write a finished job with its problems and measurements in one transaction (pairs
        already measured in that environment are replaced, the old rows kept in history);
        returns the job id."""
        with self.session.begin() as session:
            problem_ids = self._problem_ids(session, job.problems)
            job_id = self._add_job(session, job.name, job.operator, job.dtype, 0, job.spec,
                                   problem_ids)
            ids = dict(zip((p.key for p in job.problems), problem_ids))
            keys = job.columns["problem_key"]
            write_measurement_columns(session, {**job.columns, "job_id": [job_id] * len(keys),
                                                "problem_id": [ids[k] for k in keys]})
            failed = sum(status in FAILED_STATES for status in job.columns["status"])
            self._set_state(session, job_id, "done", total_pairs=len(keys),
                            done_pairs=len(keys) - failed, failed_pairs=failed)
            return job_id

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

    def job_problems(self, job_id: int) -> list[ProblemRecord]:
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
                session.execute(update(JobProblem).where(
                    JobProblem.job_id == job_id, JobProblem.state == "claimed")
                    .values(state="open", claimed_by=None))
            return self._summary(session, job)

    def set_job_state(self, job_id: int, status: str, error: str | None = None,
                      **counters: int) -> None:
        with self.session.begin() as session:
            self._set_state(session, job_id, status, error, **counters)

    def _set_state(self, session: Session, job_id: int, status: str, error: str | None = None,
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
        session.execute(update(Job).where(Job.id == job_id).values(**values))
        if status == "done":
            session.execute(update(JobProblem).where(JobProblem.job_id == job_id)
                            .values(state="done", claimed_by=None))

    def count_rows(self, table: str) -> int:
        """Rows in one of the farm's tables (for checks and summaries)."""
        model = {m.__tablename__: m for m in (Job, Problem, JobProblem, Kernel, Measurement,
                                               MeasurementHistory, Environment, Worker,
                                               Artifact)}[table]
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
            new = _first_of_each(kernels, lambda k: k["key"], found)
            if new:
                session.execute(insert(Kernel.__table__), list(new.values()))
                found.update(session.execute(select(Kernel.key, Kernel.id)
                                             .where(Kernel.key.in_(list(new)))).all())
            return found

    def record_measurements(self, rows: Sequence[dict[str, Any]]) -> None:
        """Insert or replace measurements in one transaction; replaced rows go to history."""
        with self.session.begin() as session:
            write_measurements(session, rows)

    # Workers and job problems ------------------------------------------------------------
    def job_problem_ids(self, job_id: int) -> list[tuple[int, ProblemRecord]]:
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
                        Problem.shape,
                        Environment.fingerprint.label("env_fingerprint"),
                        Environment.replay_of.label("env_replay_of"))
                 .join(Kernel, Measurement.kernel_id == Kernel.id)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(Environment, Measurement.environment_id == Environment.id)
                 .where(Measurement.job_id.in_(list(job_ids))).order_by(Measurement.id))
        with self.session() as session:
            rows = session.execute(query).mappings().all()
        return pd.DataFrame([dict(r) for r in rows])  # the shape stays one JSON object

    def job_results(self, job_id: int, environment_ids: Iterable[int]) -> pd.DataFrame:
        """The measurements of a job's problems in these environments (whichever job made
        them): status, timings, kernel family and name, problem fields."""
        query = (select(Measurement.status, Measurement.median_us, Measurement.tflops,
                        Measurement.message, Measurement.job_id, Kernel.family,
                        Kernel.name.label("kernel"), Problem.key.label("problem_key"),
                        Problem.shape)
                 .join(Kernel, Measurement.kernel_id == Kernel.id)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(JobProblem, (JobProblem.problem_id == Problem.id)
                       & (JobProblem.job_id == job_id))
                 .where(Measurement.environment_id.in_(list(environment_ids)))
                 .order_by(JobProblem.position, Measurement.id))
        with self.engine.connect() as conn:
            return shape_frame(pd.read_sql(query, conn))

    def environment(self, fingerprint: str) -> dict[str, Any]:
        """An environment's fields by fingerprint (NotFound if there is none)."""
        with self.session() as session:
            env = session.scalar(select(Environment).where(Environment.fingerprint == fingerprint))
            if env is None:
                raise NotFound(f"no environment {fingerprint}")
            return {c: getattr(env, c) for c in ("fingerprint", "gpu_name", "arch", "sm_count",
                    "driver", "compiler", "runtime", "farm_version", "replay_of", "details")}

    # Code objects: the compile cache a cluster's nodes share ---------------------------------
    def code_object(self, key: str) -> dict[str, Any] | None:
        """A cached code object (data, target, compiler, resources, log), or None."""
        with self.session() as session:
            row = session.execute(
                select(Artifact.data, Artifact.target, Artifact.compiler, Artifact.resources,
                       Artifact.log)
                .where(Artifact.key == key, Artifact.kind == "code_object")).first()
        return None if row is None else row._asdict()

    def put_code_object(self, key: str, target: str, compiler: str, data: bytes,
                        resources: dict[str, Any], log: str) -> None:
        """Store a code object once; a concurrent put of the same key is not an error."""
        try:
            with self.session.begin() as session:
                if session.scalar(select(Artifact.id).where(Artifact.key == key)) is None:
                    session.add(Artifact(key=key, kind="code_object", target=target,
                                         compiler=compiler[:64], data=data, size=len(data),
                                         resources=resources, log=log))
        except IntegrityError:
            pass  # another node stored the same key first: identical by construction

    def timings(self, where: TimingFilter) -> pd.DataFrame:
        """Historical timings joined with their kernel, problem and environment."""
        query = (select(Measurement.id, Measurement.status, Measurement.median_us,
                        Measurement.min_us, Measurement.p90_us, Measurement.max_us,
                        Measurement.samples, Measurement.spread, Measurement.tflops,
                        Measurement.gbps, Measurement.verify_error, Measurement.message,
                        Measurement.job_id, Measurement.created_at,
                        Kernel.family, Kernel.name.label("kernel"),
                        Problem.operator, Problem.dtype, Problem.layout,
                        Measurement.problem_id,
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
            query = query.where(shape_condition(field, value))
        if where.limit:
            query = query.limit(where.limit)
        with self.engine.connect() as conn:
            frame = pd.read_sql(query, conn)
            return with_shapes(conn, frame)


def with_shapes(conn: Any, frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (with a problem_id column) joined with one column per shape field of its
    problems, each problem's JSON read once."""
    ids = sorted(set(frame["problem_id"].tolist())) if len(frame) else []
    shapes: dict[int, dict[str, Any]] = {}
    for start in range(0, len(ids), 10000):
        chunk = ids[start:start + 10000]
        shapes.update(conn.execute(select(Problem.id, Problem.shape)
                                   .where(Problem.id.in_(chunk))).all())
    table = pd.DataFrame.from_dict(shapes, orient="index") if shapes else pd.DataFrame()
    if table.empty:
        return frame
    table = table[[c for c in table.columns if c not in frame.columns]]
    return frame.join(table, on="problem_id")


def _first_of_each(items: Iterable[Any], key: Any, found: Container[str]) -> dict[str, Any]:
    """The first item of each key not in `found`, by key, in order."""
    first: dict[str, Any] = {}
    for item in items:
        if key(item) not in found:
            first.setdefault(key(item), item)
    return first


def _retry_race(insert: Any) -> Any:
    """Run a select-or-insert; if another process inserted the same key meanwhile, once more."""
    try:
        return insert()
    except IntegrityError:
        return insert()


def problem_record(row: Problem) -> ProblemRecord:
    return problem_from_store(row.operator, row.dtype, row.layout, row.shape)


def shape_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with its `shape` column (JSON objects) spread into one column per field."""
    if "shape" not in frame.columns:
        return frame
    shapes = pd.DataFrame([s if isinstance(s, dict) else json.loads(s) for s in frame["shape"]],
                          index=frame.index)
    shapes = shapes[[c for c in shapes.columns if c not in frame.columns]]
    return pd.concat([frame.drop(columns="shape"), shapes], axis=1)


def shape_condition(field: str, value: Any) -> Any:
    """SQL: the problem's shape field `field` equals `value` (a number or a name)."""
    element = Problem.shape[field]
    return (element.as_integer() == value if isinstance(value, int)
            else element.as_string() == str(value))


# Selection models: the model registry (farm/select) -----------------------------------------
# Kept apart from the measurement queries above; the bundle of each model is an artifact row
# of kind model_bundle.


@dataclass(frozen=True)
class ModelSummary:
    """A trained selection model as the registry lists it."""

    id: int
    operator: str
    arch: str
    dtype: str
    version: int
    metrics: dict[str, Any]
    data_window: dict[str, Any]
    artifact_id: int | None
    bundle_bytes: int
    promoted: bool
    created_at: dt.datetime


class ModelQueries:
    """The model registry's operations, over the sessions of a Queries."""

    def __init__(self, queries: Queries) -> None:
        self.session = queries.session

    @staticmethod
    def _summary(model: Model, size: int | None) -> ModelSummary:
        return ModelSummary(id=model.id, operator=model.operator, arch=model.arch,
                            dtype=model.dtype, version=model.version, metrics=model.metrics,
                            data_window=model.data_window, artifact_id=model.artifact_id,
                            bundle_bytes=size or 0, promoted=model.promoted,
                            created_at=model.created_at)

    def _listing(self, query: Any) -> list[ModelSummary]:
        query = query.add_columns(Artifact.size).outerjoin(Artifact,
                                                           Model.artifact_id == Artifact.id)
        with self.session() as session:
            return [self._summary(m, size) for m, size in session.execute(query)]

    def measurement_count(self, operator: str, arch: str, dtype: str,
                          include_replay: bool = False) -> int:
        """Recorded measurements (every status but not_recorded) of an operator/arch/dtype."""
        query = (select(func.count()).select_from(Measurement)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(Environment, Measurement.environment_id == Environment.id)
                 .where(Problem.operator == operator, Problem.dtype == dtype,
                        Environment.arch == arch, Measurement.status != "not_recorded"))
        if not include_replay:
            query = query.where(Environment.replay_of.is_(None))
        with self.session() as session:
            return session.scalar(query) or 0

    def arch_figures(self, arch: str) -> dict[str, Any]:
        """The multiprocessor count and recorded details (cache size...) of an architecture's
        newest environment; empty if none."""
        with self.session() as session:
            env = session.scalars(select(Environment).where(Environment.arch == arch)
                                  .order_by(Environment.id.desc()).limit(1)).first()
            return {} if env is None else {"sm_count": env.sm_count, **(env.details or {})}

    def add_model(self, operator: str, arch: str, dtype: str, metrics: dict[str, Any],
                  data_window: dict[str, Any], bundle: bytes, bundle_key: str,
                  compiler: str) -> ModelSummary:
        """Store a bundle (once per content) and a model row with the next version."""
        return _retry_race(lambda: self._add_model(operator, arch, dtype, metrics, data_window,
                                                   bundle, bundle_key, compiler))

    def _add_model(self, operator: str, arch: str, dtype: str, metrics: dict[str, Any],
                   data_window: dict[str, Any], bundle: bytes, bundle_key: str,
                   compiler: str) -> ModelSummary:
        with self.session.begin() as session:
            artifact_id = session.scalar(select(Artifact.id).where(Artifact.key == bundle_key))
            if artifact_id is None:
                artifact = Artifact(key=bundle_key, kind="model_bundle", target=arch,
                                    compiler=compiler, data=bundle, size=len(bundle))
                session.add(artifact)
                session.flush()
                artifact_id = artifact.id
            latest = session.scalar(select(func.max(Model.version)).where(
                Model.operator == operator, Model.arch == arch, Model.dtype == dtype))
            model = Model(operator=operator, arch=arch, dtype=dtype, version=(latest or 0) + 1,
                          metrics=metrics, data_window=data_window, artifact_id=artifact_id,
                          promoted=False)
            session.add(model)
            session.flush()
            return self._summary(model, len(bundle))

    def models(self, operator: str | None = None, arch: str | None = None,
               dtype: str | None = None) -> list[ModelSummary]:
        """Models, newest first, optionally of one operator/arch/dtype."""
        query = select(Model).order_by(Model.id.desc())
        for column, value in ((Model.operator, operator), (Model.arch, arch),
                              (Model.dtype, dtype)):
            if value:
                query = query.where(column == value)
        return self._listing(query)

    def model(self, model_id: int) -> ModelSummary:
        found = self._listing(select(Model).where(Model.id == model_id))
        if not found:
            raise NotFound(f"no model with id {model_id}")
        return found[0]

    def promoted_model(self, operator: str, arch: str, dtype: str) -> ModelSummary | None:
        found = self._listing(select(Model).where(
            Model.operator == operator, Model.arch == arch, Model.dtype == dtype,
            Model.promoted.is_(True)).order_by(Model.version.desc()).limit(1))
        return found[0] if found else None

    def latest_model(self, operator: str, arch: str, dtype: str) -> ModelSummary | None:
        found = self._listing(select(Model).where(
            Model.operator == operator, Model.arch == arch, Model.dtype == dtype
        ).order_by(Model.version.desc()).limit(1))
        return found[0] if found else None

    def model_bundle(self, model_id: int) -> bytes:
        with self.session() as session:
            data = session.scalar(select(Artifact.data).join(
                Model, Model.artifact_id == Artifact.id).where(Model.id == model_id))
        if data is None:
            raise NotFound(f"model {model_id} has no stored bundle")
        return data

    def promote_model(self, model_id: int) -> None:
        """Make this the promoted model of its operator/arch/dtype (the others step down)."""
        with self.session.begin() as session:
            model = session.get(Model, model_id)
            if model is None:
                raise NotFound(f"no model with id {model_id}")
            session.execute(update(Model).where(
                Model.operator == model.operator, Model.arch == model.arch,
                Model.dtype == model.dtype, Model.id != model_id).values(promoted=False))
            model.promoted = True

    def measured_targets(self, include_replay: bool = False) -> list[tuple[str, str, str, int]]:
        """(operator, arch, dtype, measurements) of everything measured, most first."""
        count = func.count()
        query = (select(Problem.operator, Environment.arch, Problem.dtype, count)
                 .select_from(Measurement)
                 .join(Problem, Measurement.problem_id == Problem.id)
                 .join(Environment, Measurement.environment_id == Environment.id)
                 .where(Measurement.status != "not_recorded")
                 .group_by(Problem.operator, Environment.arch, Problem.dtype)
                 .order_by(count.desc()))
        if not include_replay:
            query = query.where(Environment.replay_of.is_(None))
        with self.session() as session:
            return [tuple(r) for r in session.execute(query)]
