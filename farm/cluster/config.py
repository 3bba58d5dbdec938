"""The coordinator's settings, and what it reports while it works."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class NoWorkers(RuntimeError):
    """Nothing can measure: no GPU in the Ray cluster and no recording, or every actor gone."""


@dataclass(frozen=True)
class CoordinatorConfig:
    """How `farm run` serves the queue. Times in seconds."""

    ray_address: str | None = None  # None: FARM_RAY_ADDRESS, else a local Ray in this process
    replay: str | None = None  # a recording to replay (default: jobs/recordings/ if no GPU)
    replay_actors: int = 2  # replay actors standing in for GPUs
    replay_pace_s: float = 0.0  # sleep per replayed pair
    arch: str | None = None  # serve jobs on this architecture (default: the most GPUs)
    code_cache: str | None = None  # compile cache folder (default: FARM_CODE_CACHE or user cache)
    max_batch: int = 64  # pairs of one problem per batch
    batches_per_actor: int = 2  # batches in flight per actor
    hang_factor: float = 2.0  # a pair hangs after hang_factor * policy.timeout_s ...
    hang_slack_s: float = 60.0  # ... + this with no result (setup, module load, compiles)
    heartbeat_s: float = 2.0  # how often a running job's claim is renewed
    stale_after_s: float = 60.0  # a running job silent this long is reclaimed
    flush_rows: int = 256  # write results in transactions of at most this many rows ...
    flush_s: float = 0.5  # ... or at least this often
    sync_s: float = 10.0  # how often the actors are matched to the cluster's GPUs
    poll_s: float = 2.0  # how often an idle coordinator looks at the queue
    start_timeout_s: float = 300.0  # how long to wait for the first actor
    compile_timeout_s: float = 300.0  # the time limit of one compile task
    retrain: bool = True  # train selection models in the background (farm/cluster/retrain.py)
    retrain_growth: float = 0.2  # ... when an operator/arch/dtype's data grew this much
    retrain_every_s: float | None = None  # ... or its model is this old and new data exist
    retrain_check_s: float = 30.0  # how often a measuring coordinator asks (with a period)
    retrain_include_replay: bool = False  # train on replayed rows too (tests only)
    active_batch: int = 0  # after a training, queue this many shapes where the model is unsure
    # or was wrong (farm/select/active.py); 0: no active sampling
    active_rounds: int = 3  # ... at most this many such jobs per operator/arch/dtype
    active_pool: int = 2000  # ... chosen from this many generated shapes
    active_shapes: str | None = None  # ... or from the problems of this job spec (its operator
    # and dtype; the others still from generated shapes)


class Reporter(Protocol):
    """Progress of the jobs a coordinator runs (the CLI draws bars; tests pass nothing)."""

    def job_started(self, job_id: int, name: str, total: int, finished: int) -> None: ...

    def job_progress(self, job_id: int, done: int, failed: int, cached: int) -> None: ...

    def job_finished(self, job_id: int, status: str, message: str = "") -> None: ...

    def note(self, message: str) -> None: ...


class QuietReporter:
    def __enter__(self) -> QuietReporter:
        return self

    def __exit__(self, *exc) -> None:
        pass

    def job_started(self, job_id: int, name: str, total: int, finished: int) -> None:
        pass

    def job_progress(self, job_id: int, done: int, failed: int, cached: int) -> None:
        pass

    def job_finished(self, job_id: int, status: str, message: str = "") -> None:
        pass

    def note(self, message: str) -> None:
        pass
