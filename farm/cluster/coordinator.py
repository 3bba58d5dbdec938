"""The coordinator (`farm run`): connects to Ray, keeps one measure actor per GPU, claims
queued or running jobs by priority, a few problems at a time, and measures them
(farm/cluster/jobrun.py).

Several coordinators share the queue and each job: problems are claimed under one lock, a
holder renews its claims with every write (at least every heartbeat_s) and writes only while it
holds them (farm/store/claims.py). A coordinator that stops gives its unfinished problems back;
one that died leaves claims that are taken over once silent for stale_after_s, or at once when
it ran on this host and its process is gone (claimed_by is host:pid:nonce). The new holder
resumes them: the rows already written count as finished, so no finished pair is measured
twice.

Selection models are retrained in the background (farm/cluster/retrain.py): after each job an
operator/arch/dtype whose data grew 20% since its model (or, with retrain_every_s, whose model is
older than that; also checked while measuring) gets a Ray CPU training task, and the model is
registered when the task is done.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import ray

from farm.cluster.actor import WorkerConfig
from farm.cluster.compiling import Compiles
from farm.cluster.config import CoordinatorConfig, NoWorkers, QuietReporter, Reporter
from farm.cluster.jobrun import JobRun, problems_to_hold
from farm.cluster.pairs import plan_job
from farm.cluster.pool import ActorPool
from farm.cluster.retrain import Retrainer, task_url
from farm.recording import find_recordings, recording_meta
from farm.store import JobStopped, ProblemClaim, Queries
from farm.store.models import utcnow


@dataclass(frozen=True)
class JobOutcome:
    job_id: int
    name: str
    status: str  # done | failed | cancelled | shared (other coordinators hold the rest of its
    # problems) | stopped (this coordinator's claims were taken over)
    total: int
    done: int
    failed: int
    cached: int
    measured: int  # rows this coordinator wrote
    seconds: float
    error: str | None = None


def claimer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_claimers(claimers: list[str]) -> list[str]:
    """Claimers that ran on this host in a process that no longer exists."""
    dead = []
    for claimer in claimers:
        host, _, rest = (claimer or "").partition(":")
        pid = rest.partition(":")[0]
        if host == socket.gethostname() and pid.isdigit() and not _alive(int(pid)):
            dead.append(claimer)
    return dead


def connect_ray(address: str | None = None) -> None:
    """Join the Ray cluster at `address` or FARM_RAY_ADDRESS, else start Ray in-process."""
    if ray.is_initialized():
        return
    address = address or os.environ.get("FARM_RAY_ADDRESS")
    main = threading.current_thread() is threading.main_thread()
    on_sigterm = signal.getsignal(signal.SIGTERM) if main else None
    if address:
        ray.init(address=address, log_to_driver=False)
    else:
        ray.init(address="local", include_dashboard=False, log_to_driver=False)
    if main and on_sigterm is not None:  # ray.init replaces it with an exit
        signal.signal(signal.SIGTERM, on_sigterm)


class Coordinator:
    def __init__(self, store: Queries, config: CoordinatorConfig = CoordinatorConfig(),
                 reporter: Reporter | None = None) -> None:
        self.store, self.config = store, config
        self.reporter = reporter or QuietReporter()
        self.claimer = claimer_id()
        self.pool: ActorPool | None = None
        self.compiles: dict[str, Compiles] = {}
        self.environment_ids: set[int] = set()  # the environments that served jobs
        self.kind: str | None = None  # gpu | replay, once started
        self.retrainer: Retrainer | None = None

    def _cluster_gpus(self) -> float:
        """The GPUs of the Ray cluster. A cluster that was named (not the local Ray) is given
        start_timeout_s for its GPU nodes to join: it never falls back to replay by itself."""
        gpus = ray.cluster_resources().get("GPU", 0)
        address = self.config.ray_address or os.environ.get("FARM_RAY_ADDRESS")
        if gpus or not address or self.config.replay:
            return gpus
        begin = time.monotonic()
        while not (gpus := ray.cluster_resources().get("GPU", 0)):
            if time.monotonic() - begin > self.config.start_timeout_s:
                raise NoWorkers(f"no GPU joined the Ray cluster at {address} in "
                                f"{self.config.start_timeout_s:g} s (pass --replay FILE to "
                                "replay a recording instead)")
            time.sleep(1.0)
        return gpus

    def worker_config(self) -> WorkerConfig:
        """GPU actors where the cluster has GPUs, else the replay device (if it can)."""
        recordings = [Path(self.config.replay)] if self.config.replay else []
        if not recordings and self._cluster_gpus() == 0:
            recordings = find_recordings(self.config.arch)
            if not recordings:
                raise NoWorkers("no GPU in the Ray cluster and no recording in jobs/recordings/"
                                " to replay: record one on a GPU machine with `farm record`, or "
                                "pass --replay FILE")
        if recordings:
            metas = [recording_meta(path) for path in recordings]
            env = metas[0]["environment"]
            label = (" (SYNTHETIC: invented numbers, for tests)"
                     if any(m.get("synthetic") for m in metas) else "")
            rows = sum(m.get("rows", 0) for m in metas)
            self.reporter.note(f"replaying {' + '.join(map(str, recordings))}: "
                               f"{env['gpu_name']} ({env['arch']}), {rows} pairs{label}")
            return WorkerConfig(kind="replay",
                                recordings=tuple((str(p), p.read_bytes()) for p in recordings),
                                pace_s=self.config.replay_pace_s,
                                code_cache=self.config.code_cache, code_db=self.code_db)
        return WorkerConfig(kind="gpu", code_cache=self.config.code_cache, code_db=self.code_db)

    @property
    def code_db(self) -> str | None:
        """The database the cluster shares code objects through: the store, unless it is the
        embedded SQLite file (one machine: the folder cache is enough)."""
        sqlite = self.store.engine.url.get_backend_name() == "sqlite"
        return None if sqlite else task_url(self.store)

    def start(self) -> None:
        connect_ray(self.config.ray_address)
        worker = self.worker_config()
        self.kind = worker.kind
        self.pool = ActorPool(self.store, self.claimer, worker, self.config.replay_actors)
        self.pool.sync()
        begin = time.monotonic()
        while time.monotonic() - begin < self.config.start_timeout_s:
            self.pool.poll()
            ready, slots = self.pool.ready(), self.pool.slots
            if slots and (len(ready) == len(slots) or ready and time.monotonic() - begin > 10):
                break
            if not slots and self.pool.failures:
                break
            time.sleep(0.05)
        if not self.pool.ready():
            why = "; ".join(dict.fromkeys(self.pool.failures)) or "none started in time"
            self.stop()
            raise NoWorkers(f"no measure actor could start: {why}")
        self.store.save_workers(self.pool.worker_rows(force=True))
        if self.config.retrain:
            self.retrainer = Retrainer(self.store, self.config, self.reporter)

    def stop(self) -> None:
        if self.retrainer is not None:
            self.retrainer.cancel()
        if self.pool is not None:
            self.pool.shutdown()
            self.pool = None
        for compiles in self.compiles.values():
            compiles.cancel()
        self.store.stop_workers(self.claimer)

    def claim(self, only: list[int] | None = None, job_id: int | None = None,
              limit: int | None = None) -> ProblemClaim | None:
        stale = utcnow() - dt.timedelta(seconds=self.config.stale_after_s)
        limit = limit or problems_to_hold(len(self.pool.slots), self.config)
        return self.store.claim_problems(self.claimer, stale,
                                         dead_claimers(self.store.running_claims()), limit,
                                         only=only, job_id=job_id)

    def run(self, until_idle: bool = False, max_jobs: int | None = None,
            only: list[int] | None = None) -> list[JobOutcome]:
        """Serve the queue (or only these jobs): forever, or until nothing is left to claim and
        the trainings it started are registered (until_idle), or max_jobs ran."""
        outcomes: list[JobOutcome] = []
        self.start()
        try:
            while max_jobs is None or len(outcomes) < max_jobs:
                claim = self.claim(only)
                if claim is not None:
                    outcomes.append(self.run_job(claim))
                    if self.retrainer is not None:
                        self.retrainer.poll(check=True)  # the job's data may make one due
                    continue
                if until_idle and not self._waiting(only):
                    if self.retrainer is not None:
                        queued = self.retrainer.queued_jobs()
                        self.retrainer.wait()  # the trainings the jobs started
                        if self.retrainer.queued_jobs() != queued and only is None:
                            continue  # they queued active-sampling jobs: serve those too
                    break
                if self.retrainer is not None:
                    self.retrainer.poll()
                time.sleep(self.config.poll_s)
                self.pool.sync()
                self.pool.poll()
                self.store.save_workers(self.pool.worker_rows())
        finally:
            self.stop()
        return outcomes

    def _waiting(self, only: list[int] | None) -> bool:
        """Jobs with problems nobody holds that wait for a running job sharing them
        (until_idle waits for those)."""
        return any(only is None or j in only for j in self.store.jobs_with_open_problems())

    def _serving(self) -> tuple[str, str]:
        """The architecture this job runs on (all its GPUs share it) and its compile target."""
        ready = self.pool.ready(self.config.arch)
        begin = time.monotonic()
        while not ready:  # every actor is restarting, or the cluster lost them: wait for one
            if time.monotonic() - begin > self.config.start_timeout_s:
                raise NoWorkers(f"no measure actor became ready in "
                                f"{self.config.start_timeout_s:g} s")
            time.sleep(0.1)
            self.pool.sync()
            self.pool.poll()
            ready = self.pool.ready(self.config.arch)
        arch = self.config.arch or Counter(s.arch for s in ready).most_common(1)[0][0]
        return arch, next(s.info["target"] for s in ready if s.arch == arch)

    def run_job(self, claim: ProblemClaim) -> JobOutcome:
        """Measure the claimed problems of a job, and more of its problems while any is left."""
        begin, job_id = time.monotonic(), claim.job_id
        job = self.store.job(job_id)
        run: JobRun | None = None
        status, error = "done", None
        try:
            plan = plan_job(self.store, job_id)
            arch, target = self._serving()
            if target not in self.compiles:
                self.compiles[target] = Compiles(target, self.config.code_cache,
                                                 self.config.compile_timeout_s, self.code_db)
            run = JobRun(self.store, self.pool, self.compiles[target], plan, self.claimer,
                         arch, self.config, self.reporter,
                         lambda limit: self.claim(job_id=job_id, limit=limit), claim)
            if self.retrainer is not None:
                run.background = self.retrainer.poll
            self.environment_ids.update(self.pool.environment_ids(arch))
            run.run()
        except JobStopped:
            status = "stopped"
            if run is not None:
                run.abandon(release=False)
        except (KeyboardInterrupt, NoWorkers):
            if run is not None:
                run.abandon(release=False)
                try:
                    run.write_out()
                except JobStopped:
                    pass
            self.store.release_problems(job_id, self.claimer)  # for the next coordinator
            raise
        except Exception as exc:  # noqa: BLE001 - the job fails with the reason, the farm goes on
            error = f"{type(exc).__name__}: {exc}"
            if run is not None:
                run.abandon(release=False)
            try:
                self.store.fail_job(job_id, error)
            except JobStopped:
                pass
        finally:
            if run is not None:
                run.close()
        for slot in self.pool.slots:
            slot.job_id, slot.measuring, slot.changed = None, None, True
            if slot.environment_id is not None:
                self.environment_ids.add(slot.environment_id)
        if run is not None:
            run.store_workers(force=True)
        summary = self.store.job(job_id)
        if summary.status in ("done", "failed", "cancelled"):
            status = summary.status
        elif status != "stopped":
            status = "shared"  # other coordinators hold the rest of its problems
        self.reporter.job_finished(job_id, status, error or summary.error or "")
        return JobOutcome(job_id=job_id, name=job.name, status=status,
                          total=summary.total_pairs, done=summary.done_pairs,
                          failed=summary.failed_pairs, cached=summary.cached_pairs,
                          measured=run.measured if run else 0,
                          seconds=time.monotonic() - begin, error=error)
