"""The database schema as SQLAlchemy 2 models. Migrations in migrations/ must match it exactly."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy import (JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer,
                        LargeBinary, MetaData, String, Text, UniqueConstraint)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JSONType = JSON().with_variant(JSONB(), "postgresql")

NAMING = {"ix": "ix_%(table_name)s_%(column_0_N_name)s",
          "uq": "uq_%(table_name)s_%(column_0_N_name)s",
          "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
          "pk": "pk_%(table_name)s"}


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


JOB_STATES = ("queued", "running", "done", "failed", "cancelled")
MEASUREMENT_STATES = ("ok", "compile_error", "launch_error", "timeout", "wrong_result",
                      "unsupported", "not_recorded")
SETTLED_STATES = ("ok", "unsupported")  # a pair that needs nothing more: counted as done
FAILED_STATES = tuple(s for s in MEASUREMENT_STATES if s not in SETTLED_STATES)

class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType}


class Environment(Base):
    """Where a measurement was taken: the GPU, its software, and the farm's version."""

    __tablename__ = "environments"
    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    gpu_name: Mapped[str] = mapped_column(String(128))
    arch: Mapped[str] = mapped_column(String(32), index=True)
    sm_count: Mapped[int] = mapped_column(Integer)
    driver: Mapped[str] = mapped_column(String(200))
    compiler: Mapped[str] = mapped_column(String(200))  # e.g. nvrtc with its package versions
    runtime: Mapped[str] = mapped_column(String(200))
    farm_version: Mapped[str] = mapped_column(String(64))
    replay_of: Mapped[str | None] = mapped_column(String(64))
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Kernel(Base):
    """One instance of a kernel family: its configuration and the hash of its source."""

    __tablename__ = "kernels"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    family: Mapped[str] = mapped_column(String(64), index=True)
    operator: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(200))
    config: Mapped[dict[str, Any]] = mapped_column()
    source_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Problem(Base):
    """One shape of one operator: its record's shape fields as JSON (the operator's package
    says what they mean), with element type, layout, FLOPs and minimal bytes beside it;
    `key` hashes every field."""

    __tablename__ = "problems"
    __table_args__ = (Index("ix_problems_operator_dtype", "operator", "dtype"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    operator: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str] = mapped_column(String(8))
    layout: Mapped[str] = mapped_column(String(16))
    shape: Mapped[dict[str, Any]] = mapped_column()
    flops: Mapped[int] = mapped_column(BigInteger)
    min_bytes: Mapped[int] = mapped_column(BigInteger)


class Job(Base):
    """A submitted sweep: its spec, its place in the queue and its counters."""

    __tablename__ = "jobs"
    __table_args__ = (Index("ix_jobs_queue", "status", "priority", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    operator: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str] = mapped_column(String(8))
    spec: Mapped[dict[str, Any]] = mapped_column()
    status: Mapped[str] = mapped_column(String(16))
    priority: Mapped[int] = mapped_column(Integer, default=0)
    total_pairs: Mapped[int] = mapped_column(Integer, default=0)
    done_pairs: Mapped[int] = mapped_column(Integer, default=0)
    failed_pairs: Mapped[int] = mapped_column(Integer, default=0)
    cached_pairs: Mapped[int] = mapped_column(Integer, default=0)
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


PROBLEM_STATES = ("open", "claimed", "done")


class JobProblem(Base):
    """The problems of a job, in the order the spec gave them. Each is also the unit that
    coordinators claim: open, claimed (by claimed_by, renewed at updated_at) or done, so several
    coordinators share one job's problems."""

    __tablename__ = "job_problems"
    __table_args__ = (Index("ix_job_problems_job_state", "job_id", "state"),)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"),
                                        primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"), primary_key=True,
                                            index=True)
    position: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16), server_default="open")
    claimed_by: Mapped[str | None] = mapped_column(String(128))
    updated_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class MeasurementFields:
    """The columns a measurement and its archived history rows share."""

    status: Mapped[str] = mapped_column(String(16), index=True)
    median_us: Mapped[float | None] = mapped_column(Float)
    min_us: Mapped[float | None] = mapped_column(Float)
    max_us: Mapped[float | None] = mapped_column(Float)
    p90_us: Mapped[float | None] = mapped_column(Float)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    spread: Mapped[float | None] = mapped_column(Float)
    tflops: Mapped[float | None] = mapped_column(Float)
    gbps: Mapped[float | None] = mapped_column(Float)
    verify_error: Mapped[float | None] = mapped_column(Float)
    message: Mapped[str | None] = mapped_column(Text)
    policy: Mapped[dict[str, Any]] = mapped_column(default=dict)
    telemetry: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Measurement(MeasurementFields, Base):
    """The latest result of one kernel on one problem in one environment."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("kernel_id", "problem_id", "environment_id"),
                      Index("ix_measurements_scope", "problem_id", "environment_id", "status",
                            "kernel_id", "median_us"),  # covers a scope's ok timings
                      Index("ix_measurements_created_status", "created_at", "status"))
    id: Mapped[int] = mapped_column(primary_key=True)
    kernel_id: Mapped[int] = mapped_column(ForeignKey("kernels.id"))
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id"))
    environment_id: Mapped[int] = mapped_column(ForeignKey("environments.id"))
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"),
                                               index=True)


class MeasurementHistory(MeasurementFields, Base):
    """Earlier results of a pair, kept when a re-measurement replaces them."""

    __tablename__ = "measurement_history"
    id: Mapped[int] = mapped_column(primary_key=True)
    measurement_id: Mapped[int] = mapped_column(ForeignKey("measurements.id", ondelete="CASCADE"),
                                                index=True)
    kernel_id: Mapped[int] = mapped_column(Integer)
    problem_id: Mapped[int] = mapped_column(Integer)
    environment_id: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int | None] = mapped_column(Integer)
    archived_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Worker(Base):
    """A measure process of a coordinator (one per GPU, or a replay stand-in) and what it is
    doing; the coordinator keeps these rows current for `farm workers`."""

    __tablename__ = "workers"
    name: Mapped[str] = mapped_column(String(160), primary_key=True)
    coordinator: Mapped[str] = mapped_column(String(128), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # gpu | replay
    node: Mapped[str] = mapped_column(String(64))
    gpu_name: Mapped[str] = mapped_column(String(160))
    arch: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))  # starting | idle | measuring | restarting | stopped
    job_id: Mapped[int | None] = mapped_column(Integer)
    measuring: Mapped[str | None] = mapped_column(String(400))
    pairs_done: Mapped[int] = mapped_column(Integer, default=0)
    restarts: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Artifact(Base):
    """A compiled code object, addressed by the hash of what produced it."""

    __tablename__ = "artifacts"
    id: Mapped[int] = mapped_column(primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(16))  # code_object | model_bundle
    target: Mapped[str] = mapped_column(String(32))
    compiler: Mapped[str] = mapped_column(String(64))
    data: Mapped[bytes] = mapped_column(LargeBinary)
    size: Mapped[int] = mapped_column(Integer)
    resources: Mapped[dict[str, Any]] = mapped_column(default=dict)
    log: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Model(Base):
    """A trained selection model and how well it chose on held-out problems."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("operator", "arch", "dtype", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    operator: Mapped[str] = mapped_column(String(32))
    arch: Mapped[str] = mapped_column(String(32))
    dtype: Mapped[str] = mapped_column(String(8))
    version: Mapped[int] = mapped_column(Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(default=dict)
    data_window: Mapped[dict[str, Any]] = mapped_column(default=dict)
    artifact_id: Mapped[int | None] = mapped_column(ForeignKey("artifacts.id"))
    promoted: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
