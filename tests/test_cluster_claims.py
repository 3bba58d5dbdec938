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


def _claim(store, claimer, stale_before=PAST, dead=(), limit=100, **kw):
    claim = store.claim_problems(claimer, stale_before, dead, limit, **kw)
    return None if claim is None else claim.job_id


def test_concurrent_claims_take_each_problem_once(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    jobs = [submit(store, spec(f"j{i}", {**SMALL, "N": [i + 1]}, priority=i % 3), tmp_path)
            for i in range(8)]
    first = store.claim_problems("first", PAST, limit=3)
    assert first.job_id == jobs[2] and len(first.problem_ids) == 3  # highest priority, oldest
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(lambda i: [store.claim_problems(f"c{i}", PAST, limit=3)
                                          for _ in range(4)], range(8)))
    taken = [(c.job_id, p) for per in claims for c in per if c is not None
             for p in c.problem_ids]
    assert len(taken) == len(set(taken)) == 8 * 8 - 3  # every other problem exactly once
    assert {store.job(j).status for j in jobs} == {"running"}
    twin = submit(store, spec("j0", {**SMALL, "N": [1]}), tmp_path)
    assert _claim(store, "c") is None  # it shares its problems with running job j0
    holders = store.running_claims()
    assert set(holders) == {"first"} | {f"c{i}" for i in range(8)} - {
        f"c{i}" for i, per in enumerate(claims) if not any(per)}
    store.cancel_job(jobs[0])  # its claims end with it
    assert _claim(store, "c", limit=2) == twin


def test_problems_finish_a_shared_job_and_stale_or_dead_claims_are_taken(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    job = submit(store, spec("stale"), tmp_path)  # 8 problems
    a = store.claim_problems("alive:1:a", PAST, limit=5)
    b = store.claim_problems("other:2:b", PAST, limit=5)
    assert (len(a.problem_ids), len(b.problem_ids)) == (5, 3)  # two coordinators share it
    assert _claim(store, "third:3:c") is None  # every problem is held and fresh
    stale = store.claim_problems("other:2:b", utcnow() + dt.timedelta(seconds=1), limit=8)
    assert set(a.problem_ids) < set(stale.problem_ids)  # all went silent: b takes a's too
    with pytest.raises(JobStopped, match="taken over"):
        store.record_results(job, "alive:1:a", [], 1, 0, held=a.problem_ids)  # a writes nothing
    assert store.job(job).done_pairs == 0
    store.release_problems(job, "other:2:b")
    assert store.job(job).status == "queued"  # nobody holds it: back in the queue
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claimer = f"{os.uname().nodename}:{dead.pid}:x"
    assert len(store.claim_problems(claimer, PAST, limit=8).problem_ids) == 8
    assert dead_claimers(store.running_claims()) == [claimer]
    taken = store.claim_problems("new:3:c", PAST, dead_claimers(store.running_claims()), 8)
    assert taken.job_id == job and len(taken.problem_ids) == 8
    finished = dict.fromkeys(taken.problem_ids[:7], 2)
    assert not store.record_results(job, "new:3:c", [], 3, 1, finished=finished,
                                    held=taken.problem_ids)
    assert store.record_results(job, "new:3:c", [], 0, 0, finished={taken.problem_ids[7]: 0},
                                held=taken.problem_ids[7:])  # the last one finishes the job
    summary = store.job(job)
    assert (summary.status, summary.done_pairs, summary.failed_pairs,
            summary.cached_pairs) == ("done", 3, 1, 14)
    assert store.jobs_with_open_problems() == []


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


def test_two_coordinators_share_jobs_and_never_measure_the_same_pair(db_url, tmp_path,
                                                                     ray_cluster):
    """Three jobs, two coordinators: both work on each job, by problems; the two jobs that
    share their pairs never measure a problem at the same time, so the later one finds its
    pairs cached."""
    store = open_store(db_url, migrate=True)
    data = spec("pair", MEDIUM)
    rec = recording({**data, "problems": [{"generate": {**MEDIUM, "N": [1, 2]}}]}, tmp_path)
    jobs = [submit(store, data, tmp_path),
            submit(store, {**data, "problems": [{"generate": {**MEDIUM, "N": [2]}}]}, tmp_path),
            submit(store, data, tmp_path)]
    # Paced so that a coordinator's first claim (16 of the first job's 24 problems) lasts
    # seconds: the other one, however slow its actors are to start, claims the rest.
    coordinators = [Coordinator(store, config(rec, replay_actors=2, replay_pace_s=0.1))
                    for _ in range(2)]
    runs = [in_thread(c, until_idle=True) for c in coordinators]
    for thread, _ in runs:
        thread.join(180)
        assert not thread.is_alive()
    for job in jobs:
        assert_complete_exactly_once(store, job)
        mine = [o for _, found in runs for o in found if o.job_id == job]
        assert {o.status for o in mine} <= {"done", "shared"}
        assert sum(o.measured for o in mine) == store.job(job).done_pairs + \
            store.job(job).failed_pairs
    first = [sum(o.measured for o in found if o.job_id == jobs[0]) for _, found in runs]
    assert min(first) > 0, first  # both coordinators measured the first job
    assert store.count_rows("measurements") == 2 * 72
    assert sorted(store.job(j).cached_pairs for j in (jobs[0], jobs[2])) == [0, 72]
