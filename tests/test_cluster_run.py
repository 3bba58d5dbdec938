"""The coordinator on a local Ray with replay actors standing in for GPUs (SQLite and
PostgreSQL): jobs run to completion with every pair recorded exactly once, through faults,
actor deaths and cancellation."""

import time

import pytest
import ray
import yaml
from typer.testing import CliRunner

import kernels.testing.faulty  # noqa: F401 - registers conv_faulty for the fault tests
from farm import recording as recording_module
from farm.cli import app
from farm.cluster import Coordinator
from farm.store import TimingFilter, open_store
from tests.cluster_support import (MEDIUM, assert_complete_exactly_once, config, in_thread,
                                   job_rows, recording, spec, submit, wait_for_rows)

pytestmark = pytest.mark.usefixtures("ray_cluster")


def test_a_job_runs_to_completion_and_a_repeat_is_cached(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    data = spec("small")
    rec = recording(data, tmp_path)
    first = submit(store, data, tmp_path)
    [outcome] = Coordinator(store, config(rec, code_cache=str(tmp_path / "code"))).run(
        until_idle=True)
    assert (outcome.job_id, outcome.status) == (first, "done")
    assert_complete_exactly_once(store, first)
    # a cluster database also holds the compile cache its nodes share; SQLite keeps folders
    shared = store.engine.url.get_backend_name() != "sqlite"
    assert (store.count_rows("artifacts") == 2) == shared  # the two conv_naive code objects
    job = store.job(first)
    assert job.total_pairs == 8 * 3 and job.done_pairs == 24  # 8 shapes x (2 naive + vendor)
    replayed = store.timings(TimingFilter(job_id=first))
    assert len(replayed) == 24 and set(replayed["gpu_name"]) == {
        "replay of SYNTHETIC test GPU (not measured)"}
    assert replayed["replay_of"].notna().all()
    assert store.timings(TimingFilter(job_id=first, include_replay=False)).empty
    workers = store.workers(include_stopped=True)
    assert len(workers) == 3 and {w.state for w in workers} == {"stopped"}
    assert sum(w.pairs_done for w in workers) == 24

    again = submit(store, data, tmp_path)
    [outcome] = Coordinator(store, config(rec)).run(until_idle=True)
    job = store.job(again)
    assert (job.status, job.cached_pairs, job.done_pairs, outcome.measured) == ("done", 24, 0, 0)
    assert store.count_rows("measurements") == 24


def test_pairs_missing_from_the_recording_are_not_recorded(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    data = spec("partial")
    job_id = submit(store, data, tmp_path)
    Coordinator(store, config(recording(data, tmp_path, drop=5))).run(until_idle=True)
    assert_complete_exactly_once(store, job_id)
    frame = store.timings(TimingFilter(job_id=job_id, status="not_recorded"))
    assert len(frame) == 5 and store.job(job_id).failed_pairs == 5
    assert frame["message"].str.contains("no measurement of this pair").all()


def test_faulty_instances_fail_as_data_and_the_job_completes(db_url, tmp_path):
    """conv_faulty on the replay device: out_of_bounds ends the actor's process (Ray restarts
    it), hang is killed after the deadline, wrong and unwritten give wrong_result."""
    store = open_store(db_url, migrate=True)
    data = spec("faults", {**MEDIUM, "C": [8], "H": [8], "R": [3]},
                kernels=["conv_naive", "conv_faulty"], timing={"timeout_s": 0.25})
    job_id = submit(store, data, tmp_path)
    begin = time.monotonic()
    [outcome] = Coordinator(store, config(recording(data, tmp_path))).run(until_idle=True)
    assert outcome.status == "done" and time.monotonic() - begin < 90
    assert_complete_exactly_once(store, job_id)
    frame = store.timings(TimingFilter(job_id=job_id, status=None))
    by_kernel = frame.groupby("kernel")["status"].agg(set).to_dict()
    assert by_kernel == {"faulty_fwd_bf16_fault0": {"ok"}, "faulty_fwd_bf16_fault1": {"wrong_result"},
                         "faulty_fwd_bf16_fault2": {"wrong_result"},
                         "faulty_fwd_bf16_fault3": {"launch_error"},
                         "faulty_fwd_bf16_fault4": {"timeout"},
                         "naive_fwd_bf16_block128": {"ok"}, "naive_fwd_bf16_block256": {"ok"}}
    messages = frame.set_index("kernel")["message"]
    assert messages["faulty_fwd_bf16_fault3"].str.contains(
        r"\[attempts: launch_error, launch_error\]").all()
    assert messages["faulty_fwd_bf16_fault4"].str.contains(
        r"killed and restarted \[attempts: timeout, timeout\]").all()
    assert sum(w.restarts for w in store.workers(include_stopped=True)) >= 4 * 2


def test_killing_actors_mid_job_leaves_a_complete_job(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    data = spec("kill", MEDIUM)
    job_id = submit(store, data, tmp_path)
    # paced so that the pairs left after the second kill outlast the replacement's start
    coordinator = Coordinator(store, config(recording(data, tmp_path), replay_pace_s=0.3))
    thread, outcomes = in_thread(coordinator, until_idle=True)
    wait_for_rows(store, job_id, 10, alive=thread.is_alive)
    slots = list(coordinator.pool.slots)
    ray.kill(slots[0].actor, no_restart=False)  # a crash: Ray restarts the process
    wait_for_rows(store, job_id, 30, alive=thread.is_alive)
    ray.kill(slots[1].actor)  # gone for good: the pool starts a replacement
    thread.join(120)
    assert not thread.is_alive() and outcomes[0].status == "done"
    assert_complete_exactly_once(store, job_id)
    # the pairs in flight were measured again; only a pair that was in flight at both kills
    # (requeued from the first actor onto the second) failed twice, and says so
    frame = store.timings(TimingFilter(job_id=job_id, status=None))
    failed = frame[frame["status"] != "ok"]
    assert len(failed) <= 1 and store.job(job_id).done_pairs == 24 * 3 - len(failed)
    assert (failed["status"] == "launch_error").all()
    assert failed["message"].str.contains(
        r"died during this pair .*\[attempts: launch_error, launch_error\]").all()
    workers = store.workers(include_stopped=True)
    assert len(workers) == 4 and sum(w.restarts for w in workers) >= 1  # one was replaced


def test_cancel_stops_the_remaining_pairs(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    data = spec("cancel", MEDIUM)
    job_id = submit(store, data, tmp_path)
    coordinator = Coordinator(store, config(recording(data, tmp_path), replay_pace_s=0.05))
    thread, outcomes = in_thread(coordinator, until_idle=True)
    wait_for_rows(store, job_id, 6, alive=thread.is_alive)
    store.cancel_job(job_id)
    written = job_rows(store, job_id)
    thread.join(30)
    assert not thread.is_alive() and outcomes[0].status == "cancelled"
    job = store.job(job_id)
    assert job.status == "cancelled" and job_rows(store, job_id) == written < job.total_pairs
    assert job.done_pairs == written  # counters move only with the rows they count


def test_farm_run_workers_and_demo_commands(sqlite_url, tmp_path, monkeypatch):
    runner = CliRunner()
    env = {"FARM_DB_URL": sqlite_url}
    data = spec("cli")
    rec = recording(data, tmp_path)
    spec_file = tmp_path / "cli.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    assert runner.invoke(app, ["submit", str(spec_file)], env=env).exit_code == 0
    result = runner.invoke(app, ["run", "--until-idle", "--quiet", "--replay", rec], env=env)
    assert result.exit_code == 0, result.output
    assert "job 1 cli: done, 24 ok or unsupported, 0 failed, 0 cached of 24" in result.stdout
    result = runner.invoke(app, ["workers", "--all"], env=env)
    assert result.exit_code == 0 and result.stdout.count("stopped") == 2
    assert "replay of SYNTHETIC" in result.stdout

    result = runner.invoke(app, ["demo", "--replay", rec, "--spec", str(spec_file)], env=env)
    assert result.exit_code == 0, result.output
    assert "best instance per shape" in result.stdout and "24 cached" in result.stdout
    assert "throughput: 0 pairs replayed" in result.stdout

    monkeypatch.setattr(recording_module, "RECORDINGS_DIR", tmp_path / "none")
    monkeypatch.chdir(tmp_path)  # and none in ./jobs/recordings
    # no GPU and no recording: compile only
    result = runner.invoke(app, ["demo", "--spec", str(spec_file)], env=env)
    assert result.exit_code == 0, result.output
    assert "no GPU here and no recording" in result.stdout and "0 failed" in result.stdout
    assert open_store(sqlite_url).count_rows("jobs") == 2  # nothing queued that cannot run
