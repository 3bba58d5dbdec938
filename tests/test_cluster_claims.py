"""Claims between coordinators: atomic claims, stale and dead claimers, a coordinator killed
mid-job and restarted, and two coordinators serving one queue (SQLite and PostgreSQL)."""

import datetime as dt
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from farm.cluster import Coordinator
from farm.cluster.coordinator import dead_claimers
from farm.store import JobStopped, open_store
from farm.store.models import Measurement, utcnow
from sqlalchemy import select
from tests.cluster_support import (MEDIUM, SMALL, assert_complete_exactly_once, config,
                                   in_thread, recording, spec, submit, wait_for_rows)

PAST = dt.datetime(2000, 1, 1, tzinfo=dt.timezone.utc)


def _holder(store, job_id):
    return dict(store.running_claims())[job_id]


def test_concurrent_claims_take_each_job_once(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    jobs = [submit(store, spec(f"j{i}", {**SMALL, "N": [i + 1]}, priority=i % 3), tmp_path)
            for i in range(8)]
    assert store.claim_job("first", PAST) == jobs[2]  # highest priority, then oldest
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda i: [store.claim_job(f"c{i}", PAST) for _ in range(3)],
                               range(8)))
    taken = [job for per in claims for job in per if job is not None]
    assert sorted(taken) == sorted(set(jobs) - {jobs[2]})  # each of the rest exactly once
    twin = submit(store, spec("j0", {**SMALL, "N": [1]}), tmp_path)
    assert store.claim_job("c", PAST) is None  # it shares its pairs with running job j0
    store.finish_job(jobs[0], _holder(store, jobs[0]), "done")
    assert store.claim_job("c", PAST) == twin


def test_stale_or_dead_claimers_lose_their_jobs(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    job = submit(store, spec("stale"), tmp_path)
    assert store.claim_job("alive:1:a", PAST) == job
    assert store.claim_job("other:2:b", PAST) is None  # held and fresh
    assert store.claim_job("other:2:b", utcnow() + dt.timedelta(seconds=1)) == job  # stale
    with pytest.raises(JobStopped, match="claimed by other:2:b"):
        store.record_results(job, "alive:1:a", [], 1, 0)  # the old holder can write nothing
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claimer = f"{os.uname().nodename}:{dead.pid}:x"
    store.finish_job(job, "other:2:b", "queued")
    assert store.claim_job(claimer, PAST) == job
    assert dead_claimers(store.running_claims()) == [claimer]
    assert store.claim_job("new:3:c", PAST, dead_claimers(store.running_claims())) == job


def _run_farm(db_url, gcs, rec, *args):
    env = {**os.environ, "FARM_RAY_ADDRESS": gcs, "FARM_DB_URL": db_url}
    return subprocess.Popen([sys.executable, "-m", "farm.cli", "run", "--until-idle", "--quiet",
                             "--replay", rec, "--replay-actors", "2", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_killed_coordinator_is_resumed_without_measuring_twice(db_url, tmp_path, ray_cluster):
    store = open_store(db_url, migrate=True)
    data = spec("resume", MEDIUM)
    rec = recording(data, tmp_path)
    job_id = submit(store, data, tmp_path)
    farm = _run_farm(db_url, ray_cluster, rec, "--replay-pace", "0.1")
    wait_for_rows(store, job_id, 12, alive=lambda: farm.poll() is None)
    farm.kill()
    farm.wait()
    with store.session() as session:
        before = dict(session.execute(select(Measurement.id, Measurement.created_at)
                                      .where(Measurement.job_id == job_id)).all())
    assert store.job(job_id).status == "running" and 12 <= len(before) < 72
    # stale_after is long: only the dead-process check lets the new coordinator take the job
    [outcome] = Coordinator(store, config(rec, stale_after_s=3600)).run(until_idle=True)
    assert outcome.status == "done" and outcome.measured == 72 - len(before)
    assert_complete_exactly_once(store, job_id)
    with store.session() as session:
        after = dict(session.execute(select(Measurement.id, Measurement.created_at)
                                     .where(Measurement.id.in_(before))).all())
    assert after == before  # the pairs finished before the kill were left alone


def test_two_coordinators_never_measure_the_same_pair(db_url, tmp_path, ray_cluster):
    """Three jobs, two coordinators: each job runs once; the two jobs that share their pairs
    never run at the same time, so the later one finds them cached."""
    store = open_store(db_url, migrate=True)
    data = spec("pair", MEDIUM)
    rec = recording({**data, "problems": [{"generate": {**MEDIUM, "N": [1, 2]}}]}, tmp_path)
    jobs = [submit(store, data, tmp_path),
            submit(store, {**data, "problems": [{"generate": {**MEDIUM, "N": [2]}}]}, tmp_path),
            submit(store, data, tmp_path)]
    coordinators = [Coordinator(store, config(rec, replay_actors=2, replay_pace_s=0.01))
                    for _ in range(2)]
    runs = [in_thread(c, until_idle=True) for c in coordinators]
    for thread, _ in runs:
        thread.join(180)
        assert not thread.is_alive()
    outcomes = [o for _, found in runs for o in found]
    assert sorted(o.job_id for o in outcomes) == sorted(jobs)  # each job ran once
    for job in jobs:
        assert_complete_exactly_once(store, job)
    assert store.count_rows("measurements") == 2 * 72
    assert sorted(store.job(j).cached_pairs for j in (jobs[0], jobs[2])) == [0, 72]
