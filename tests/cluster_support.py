"""Helpers for the cluster tests: small jobs, their synthetic recordings, and the checks that
every pair of a job is recorded exactly once."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from farm import api
from farm.cluster import Coordinator, CoordinatorConfig
from farm.cluster.pairs import select_instances
from farm.specs import resolve_spec
from farm.store import Queries
from farm.store.models import Measurement
from sqlalchemy import func, select
from tests.data.synthetic_recording import build

SMALL = {"N": [1], "C": [8, 16], "K": "C", "G": [1, "C"], "H": [8], "W": "H", "R": [1, 3],
         "S": "R", "pad_h": "same", "pad_w": "same"}  # 8 problems
MEDIUM = {**SMALL, "C": [8, 16, 32], "H": [8, 16]}  # 24 problems


def spec(name: str, generate: dict = SMALL, kernels: tuple = ("conv_naive", "vendor"),
         **extra) -> dict:
    """A small forward job; its kernels are named, so the test does not depend on which
    families the test session happens to have registered."""
    return {"name": name, "operator": "conv2d_fwd", "dtype": "bf16",
            "problems": [{"generate": generate}], "kernels": [{"family": f} for f in kernels],
            **extra}


def submit(store: Queries, data: dict, tmp_path: Path) -> int:
    return api.queue(resolve_spec(data, tmp_path / f"{data['name']}.yaml"), store)


def recording(data: dict, tmp_path: Path, name: str = "rec", drop: int = 0) -> str:
    """A synthetic recording of every pair of a spec (less the last `drop` pairs)."""
    resolved = resolve_spec(data, tmp_path / "spec.yaml")
    instances = select_instances(resolved.spec)
    pairs = [(p, i) for p in resolved.problems for i in instances]
    return str(build(pairs[:len(pairs) - drop], tmp_path / f"{name}.parquet"))


def config(replay: str, **more) -> CoordinatorConfig:
    settings = dict(replay=replay, replay_actors=3, hang_slack_s=1.5, heartbeat_s=0.3,
                    flush_s=0.2, sync_s=1.0, start_timeout_s=120)
    return CoordinatorConfig(**{**settings, **more})


def in_thread(coordinator: Coordinator, **kwargs) -> tuple[threading.Thread, list]:
    outcomes: list = []
    thread = threading.Thread(target=lambda: outcomes.extend(coordinator.run(**kwargs)),
                              daemon=True)
    thread.start()
    return thread, outcomes


def wait_for_rows(store: Queries, job_id: int, count: int, timeout_s: float = 120,
                  alive=lambda: True) -> int:
    """Wait until the job has written `count` rows (fails after timeout_s, or when `alive()`
    turns false first)."""
    begin = time.monotonic()
    while (found := job_rows(store, job_id)) < count:
        assert alive(), "the coordinator stopped before the job got that far"
        assert time.monotonic() - begin < timeout_s, f"only {found} rows after {timeout_s} s"
        time.sleep(0.05)
    return found


def job_rows(store: Queries, job_id: int) -> int:
    with store.session() as session:
        return session.scalar(select(func.count()).select_from(Measurement)
                              .where(Measurement.job_id == job_id)) or 0


def assert_complete_exactly_once(store: Queries, job_id: int) -> None:
    """The job is done, every pair has one row of this job, and no row was ever replaced."""
    job = store.job(job_id)
    assert job.status == "done", job
    assert job.total_pairs > 0
    assert job.done_pairs + job.failed_pairs + job.cached_pairs == job.total_pairs
    with store.session() as session:
        pairs = session.execute(select(Measurement.kernel_id, Measurement.problem_id)
                                .where(Measurement.job_id == job_id)).all()
    assert len(pairs) == len(set(pairs)) == job.done_pairs + job.failed_pairs
    assert store.count_rows("measurement_history") == 0
