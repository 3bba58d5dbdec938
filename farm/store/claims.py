"""The coordinators' queue: problem claims, heartbeats and guarded writes.

A job is shared by problems. A coordinator claims a few of a job's problems at a time
(job_problems.state 'open' -> 'claimed', claimed_by, updated_at), renews its claims with every
write, and marks a problem 'done' in the transaction that writes its last row; the job is done
in the same transaction once none of its problems is left. Several coordinators can so serve one
job, and one that dies (silent since `stale_before`, or a process of this host that is gone)
leaves claims that any other takes over: the rows it wrote stay, the rest of its problems are
measured by the new holder.

Safe between coordinators: every claim runs under one lock (SQLite's write lock, taken first;
a transaction-scoped advisory lock on PostgreSQL), and every write first checks that the job is
running and that the writer still holds all its claims (JobStopped otherwise, and nothing is
written). A problem claimed in one running job is not claimed in another, so two coordinators
never measure one pair at once. Locks are taken in one order, the job row before its problems.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import exists, false, func, select, update
from sqlalchemy.orm import Session, aliased, sessionmaker

from farm.store.models import Job, JobProblem, utcnow
from farm.store.writes import write_measurements

CLAIM_LOCK = 0x6661726D  # PostgreSQL advisory lock key that serializes claims ("farm")


class JobStopped(RuntimeError):
    """A coordinator's claim on a job ended: it was cancelled, failed, or another coordinator
    took over its problems."""


@dataclass(frozen=True)
class ProblemClaim:
    """Problems of one job that a coordinator now holds, in the job's order."""

    job_id: int
    problem_ids: tuple[int, ...]


class ClaimQueries:
    """Mixed into Queries (farm/store/queries.py)."""

    session: sessionmaker

    @staticmethod
    def _claim_lock(session: Session) -> None:
        if session.bind.dialect.name == "postgresql":
            session.execute(select(func.pg_advisory_xact_lock(CLAIM_LOCK)))
        else:  # a write statement takes SQLite's write lock for the whole transaction
            session.execute(update(Job).where(false()).values(id=Job.id))

    def claim_problems(self, claimer: str, stale_before: dt.datetime,
                       dead_claimers: Sequence[str] = (), limit: int = 8,
                       only: Sequence[int] | None = None,
                       job_id: int | None = None) -> ProblemClaim | None:
        """Claim up to `limit` problems of the queued or running job of highest priority
        (oldest first; of `job_id`, or of `only` these jobs, if given): problems still open, or
        held by a coordinator that is silent since `stale_before` or in `dead_claimers`.
        A problem held in another running job waits. None when nothing is claimable."""
        other, other_job = aliased(JobProblem), aliased(Job)
        held_elsewhere = exists().where(
            other.problem_id == JobProblem.problem_id, other.job_id != JobProblem.job_id,
            other.state == "claimed", other.job_id == other_job.id,
            other_job.status == "running", other.updated_at >= stale_before,
            other.claimed_by.not_in(list(dead_claimers)))
        claimable = ((JobProblem.state == "open") | ((JobProblem.state == "claimed") & (
            (JobProblem.updated_at < stale_before)
            | JobProblem.claimed_by.in_(list(dead_claimers))))) & ~held_elsewhere
        jobs = Job.status.in_(("queued", "running"))
        if job_id is not None:
            jobs = jobs & (Job.id == job_id)
        if only is not None:
            jobs = jobs & Job.id.in_(list(only))
        with self.session.begin() as session:
            self._claim_lock(session)
            chosen = session.scalar(select(Job.id).where(jobs, exists().where(
                JobProblem.job_id == Job.id, claimable)).order_by(Job.priority.desc(), Job.id)
                .limit(1))
            if chosen is None:
                return None
            now = utcnow()
            session.execute(update(Job).where(Job.id == chosen).values(
                status="running", claimed_by=claimer, updated_at=now, finished_at=None,
                started_at=func.coalesce(Job.started_at, now)))
            problems = list(session.scalars(
                select(JobProblem.problem_id).where(JobProblem.job_id == chosen, claimable)
                .order_by(JobProblem.position).limit(limit)))
            session.execute(update(JobProblem).where(
                JobProblem.job_id == chosen, JobProblem.problem_id.in_(problems)).values(
                state="claimed", claimed_by=claimer, updated_at=now))
            return ProblemClaim(chosen, tuple(problems))

    def running_claims(self) -> list[str]:
        """The coordinators that hold problems of running jobs."""
        with self.session() as session:
            return list(session.scalars(
                select(JobProblem.claimed_by).join(Job, Job.id == JobProblem.job_id)
                .where(JobProblem.state == "claimed", Job.status == "running").distinct()))

    def jobs_with_open_problems(self) -> list[int]:
        """Queued or running jobs with problems that nobody holds or finished."""
        with self.session() as session:
            return list(session.scalars(
                select(JobProblem.job_id).join(Job, Job.id == JobProblem.job_id)
                .where(JobProblem.state == "open", Job.status.in_(("queued", "running")))
                .distinct()))

    def _guard(self, session: Session, job_id: int, claimer: str,
               held: Collection[int] | None, **values: Any) -> None:
        """Update a running job and renew the writer's claims on it (those of `held`, or
        all); JobStopped if the job is not running or the writer no longer holds all `held`."""
        now = utcnow()
        done = session.execute(update(Job).where(Job.id == job_id, Job.status == "running")
                               .values(updated_at=now, **values))
        if done.rowcount != 1:
            job = session.get(Job, job_id)
            raise JobStopped(f"job {job_id} is {'deleted' if job is None else job.status}")
        mine = (JobProblem.job_id == job_id) & (JobProblem.claimed_by == claimer) & (
            JobProblem.state == "claimed")
        if held is not None:
            mine = mine & JobProblem.problem_id.in_(list(held))
        renewed = session.execute(update(JobProblem).where(mine).values(updated_at=now))
        if held is not None and renewed.rowcount != len(held):
            raise JobStopped(f"job {job_id}: {len(held) - renewed.rowcount} of the {len(held)} "
                             f"problems held by {claimer} were taken over by another "
                             "coordinator")

    def heartbeat(self, job_id: int, claimer: str, held: Collection[int] | None = None,
                  **counters: Any) -> None:
        """Say the claimer is alive (and set counters); JobStopped if its claim has ended."""
        with self.session.begin() as session:
            self._guard(session, job_id, claimer, held, **counters)

    def record_results(self, job_id: int, claimer: str, rows: Sequence[dict[str, Any]],
                       done: int, failed: int, finished: Mapping[int, int] | None = None,
                       held: Collection[int] | None = None) -> bool:
        """In one transaction, while `claimer` holds the `held` problems of the running job
        (JobStopped otherwise, and nothing is written): write measurement rows, advance the
        job's counters, and mark `finished` problems done (problem id -> its cached pairs, added
        to the job's count). True when this finished the job."""
        finished = finished or {}
        with self.session.begin() as session:
            self._guard(session, job_id, claimer, held, done_pairs=Job.done_pairs + done,
                        failed_pairs=Job.failed_pairs + failed,
                        cached_pairs=Job.cached_pairs + sum(finished.values()))
            write_measurements(session, rows)
            if not finished:
                return False
            session.execute(update(JobProblem).where(
                JobProblem.job_id == job_id, JobProblem.claimed_by == claimer,
                JobProblem.problem_id.in_(list(finished))).values(state="done"))
            left = exists().where(JobProblem.job_id == job_id, JobProblem.state != "done")
            return session.execute(update(Job).where(Job.id == job_id, Job.status == "running",
                                                     ~left)
                                   .values(status="done", finished_at=utcnow())).rowcount == 1

    def release_problems(self, job_id: int, claimer: str) -> None:
        """Give a job's unfinished problems back (a coordinator that stops); the job is queued
        again when no coordinator holds any of its problems."""
        with self.session.begin() as session:
            session.execute(update(JobProblem).where(
                JobProblem.job_id == job_id, JobProblem.claimed_by == claimer,
                JobProblem.state == "claimed").values(state="open", claimed_by=None))
            held = exists().where(JobProblem.job_id == job_id, JobProblem.state == "claimed")
            session.execute(update(Job).where(Job.id == job_id, Job.status == "running", ~held)
                            .values(status="queued", claimed_by=None, updated_at=utcnow()))

    def fail_job(self, job_id: int, error: str) -> None:
        """End a running job as failed (its plan cannot run); JobStopped if it is not running."""
        with self.session.begin() as session:
            if session.execute(update(Job).where(Job.id == job_id, Job.status == "running")
                               .values(status="failed", error=error, finished_at=utcnow(),
                                       updated_at=utcnow())).rowcount != 1:
                raise JobStopped(f"job {job_id} is no longer running")
