"""Recordings and the replay device (no Ray): `farm record` exports a finished job's GPU rows
with their environment; the replay worker serves them back with the same statuses and
timings, labelled as a replay; pairs it lacks are not_recorded (unsupported where the rules refuse
them); recorded faults play out."""

import dataclasses
import os
import shutil

import pytest
from typer.testing import CliRunner

import kernels.testing.faulty  # noqa: F401 - registers conv_faulty
from farm.cli import app
from farm.cluster.pairs import plan_job, select_instances
from farm.environment import Environment
from farm.measure import DeviceLost
from farm.recording import (RecordingError, export_recording, find_recording, find_recordings,
                            merge_recordings, read_recording, recording_meta, write_recording)
from farm.replay import ReplayWorker
from farm.specs import JobSpec, resolve_spec
from farm.store import TimingFilter, open_store
from tests.cluster_support import recording, spec, submit
from tests.data.synthetic_recording import SYNTHETIC_FILE

H100 = Environment(gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90", sm_count=132, driver="580",
                   compiler="nvrtc 13.0", runtime="cuda 13.0", farm_version="0.1.0",
                   details=(("sm_clock_mhz", "1980"),))


def _measured_job(store, tmp_path, environment=H100):
    """A job measured "on a GPU": rows written straight to the store, then marked done."""
    job_id = submit(store, spec("recorded", kernels=["conv_naive"]), tmp_path)
    plan = plan_job(store, job_id)
    env = store.environment_id(environment.fingerprint, **environment.record())
    rows = []
    for n, (problem_id, kernel_id) in enumerate(plan.pairs):
        ok = n % 5 != 0
        rows.append({"kernel_id": kernel_id, "problem_id": problem_id, "environment_id": env,
                     "job_id": job_id, "status": "ok" if ok else "wrong_result",
                     "median_us": 10.0 + n if ok else None, "min_us": 9.0 + n if ok else None,
                     "samples": 20 if ok else 0, "verify_error": 1e-3,
                     "message": None if ok else "relative L2 error 0.5",
                     "policy": {"min_repeats": 10}, "telemetry": {"sm_clock_mhz": 1980}})
    store.record_measurements(rows)
    store.set_job_state(job_id, "done")
    return job_id, plan, rows


def test_record_then_replay_gives_the_same_rows(db_url, tmp_path):
    store = open_store(db_url, migrate=True)
    job_id, plan, rows = _measured_job(store, tmp_path)
    out = tmp_path / "h100.parquet"
    result = CliRunner().invoke(app, ["record", str(job_id), "--out", str(out)],
                                env={"FARM_DB_URL": db_url})
    assert result.exit_code == 0, result.output
    assert "wrote 16 pairs of NVIDIA H100 80GB HBM3 (sm_90)" in result.stdout
    recorded = read_recording(out)
    assert recorded.environment["fingerprint"] == H100.fingerprint and not recorded.synthetic
    assert recorded.jobs[0]["name"] == "recorded"

    worker = ReplayWorker(out)
    assert worker.environment.gpu_name == "replay of NVIDIA H100 80GB HBM3"
    assert worker.environment.replay_of == H100.fingerprint and worker.target == "sm_90a"
    expected = {(r["problem_id"], r["kernel_id"]): r for r in rows}
    for problem_id, problem in plan.problems.items():
        kernel_ids = list(plan.instances)
        served = list(worker.measure_problem(problem, [plan.instances[k] for k in kernel_ids]))
        for kernel_id, (instance, result) in zip(kernel_ids, served):
            row = expected[(problem_id, kernel_id)]
            assert (result.status, result.median_us, result.min_us, result.samples,
                    result.message) == (row["status"], row["median_us"], row["min_us"],
                                        row["samples"], row["message"])
            assert result.policy == {"min_repeats": 10}
    vendor = select_instances(JobSpec.model_validate(spec("v", kernels=["vendor"])))[0]
    [(_, missing)] = worker.measure_problem(problem, [vendor])
    assert missing.status == "not_recorded" and "no measurement" in missing.message
    changed = dataclasses.replace(plan.instances[kernel_ids[0]], source_hash="0" * 32)
    [(_, stale)] = worker.measure_problem(problem, [changed])
    assert stale.status == "not_recorded" and "source" in stale.message
    # a pair missing from the recording that its family's rules refuse needs no GPU to settle
    from kernels.registry import families_for

    refused = next((i, f.refusal(i, problem, worker.target)) for f in families_for(problem.op)
                   for i in f.instances(problem.op, problem.dtype)
                   if f.compiled and f.refusal(i, problem, worker.target))
    [(_, settled)] = worker.measure_problem(problem, [refused[0]])
    assert (settled.status, settled.message) == ("unsupported", refused[1])


def test_import_recording_loads_real_rows_under_the_recorded_environment(tmp_path):
    source = open_store(f"sqlite:///{tmp_path / 'gpu.db'}")
    job_id, _, rows = _measured_job(source, tmp_path)
    out = tmp_path / "h100.parquet"
    export_recording(source, [job_id], out)
    url = f"sqlite:///{tmp_path / 'copy.db'}"
    result = CliRunner().invoke(app, ["import-recording", str(out)], env={"FARM_DB_URL": url})
    assert result.exit_code == 0, result.output
    assert "recorded (imported): 16 pairs" in result.stdout
    store = open_store(url)
    frame = store.timings(TimingFilter(status=None))  # replayed rows excluded: these are real
    assert len(frame) == 16 and set(frame["gpu_name"]) == {H100.gpu_name}
    assert frame["replay_of"].isna().all()
    assert store.environment(H100.fingerprint)["arch"] == "sm_90"
    original = source.timings(TimingFilter(status=None))
    key = ["kernel", "C", "K", "G", "R"]
    merged = frame.merge(original, on=key, suffixes=("", "_gpu"))
    assert len(merged) == 16 and (merged["status"] == merged["status_gpu"]).all()
    assert merged["median_us"].equals(merged["median_us_gpu"])
    [job] = store.jobs()
    assert (job.status, job.total_pairs, job.failed_pairs) == ("done", 16, 4)
    again = tmp_path / "again.parquet"  # an imported job recorded and imported again
    export_recording(store, [job.id], again)
    result = CliRunner().invoke(app, ["import-recording", str(again)],
                                env={"FARM_DB_URL": f"sqlite:///{tmp_path / 'third.db'}"})
    assert result.exit_code == 0 and "recorded (imported): 16 pairs" in result.stdout


def test_record_refuses_unfinished_or_replayed_jobs(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    job_id, *_ = _measured_job(store, tmp_path)
    runner = CliRunner()
    store.set_job_state(job_id, "running")
    result = runner.invoke(app, ["record", str(job_id), "--out", str(tmp_path / "x.parquet")],
                           env={"FARM_DB_URL": sqlite_url})
    assert result.exit_code == 1 and "is running" in result.stderr
    replayed = dataclasses.replace(H100, gpu_name="replay of H100", replay_of=H100.fingerprint)
    other, *_ = _measured_job(store, tmp_path, replayed)
    result = runner.invoke(app, ["record", str(other), "--out", str(tmp_path / "x.parquet")],
                           env={"FARM_DB_URL": sqlite_url})
    assert result.exit_code == 1 and "replayed rows are never recorded" in result.stderr


def test_recorded_faults_play_out_as_on_a_gpu(tmp_path):
    data = spec("faults", kernels=["conv_faulty"])
    worker = ReplayWorker(recording(data, tmp_path), hang_s=0.01)
    resolved = resolve_spec(data, tmp_path / "faults.yaml")
    instances = {i.settings["fault"]: i for i in select_instances(resolved.spec)}
    served = worker.measure_problem(resolved.problems[0], [instances[f] for f in (0, 1, 3, 2)])
    assert [next(served)[1].status for _ in range(3)] == ["ok", "wrong_result", "launch_error"]
    with pytest.raises(DeviceLost, match="launch_error"):
        next(served)  # the process would exit here; the last instance is never reached
    hang = worker.measure_problem(resolved.problems[0], [instances[4]])
    assert next(hang)[1].status == "timeout"
    with pytest.raises(DeviceLost, match="timeout"):
        next(hang)


def test_synthetic_recordings_are_labelled_and_never_picked_up(tmp_path):
    meta = recording_meta(SYNTHETIC_FILE)
    assert meta["synthetic"] is True and "SYNTHETIC" in meta["environment"]["gpu_name"]
    assert "not measured" in meta["note"]
    shutil.copy(SYNTHETIC_FILE, tmp_path / "synthetic.parquet")
    assert find_recording(folder=tmp_path) is None
    real = read_recording(SYNTHETIC_FILE)
    env = {**real.environment, "gpu_name": "NVIDIA H100", "fingerprint": "f" * 32}
    write_recording(real.frame, env, [], tmp_path / "h100.parquet")
    assert find_recording(folder=tmp_path) == tmp_path / "h100.parquet"
    assert find_recording("sm_100", folder=tmp_path) is None
    # a second sweep of the same GPU joins the first; another GPU's recording does not
    write_recording(real.frame, {**env, "fingerprint": "e" * 32}, [], tmp_path / "old.parquet")
    os.utime(tmp_path / "old.parquet", (1, 1))
    half = len(real.frame) // 2
    write_recording(real.frame.iloc[:half], env, [], tmp_path / "h100-first.parquet")
    write_recording(real.frame.iloc[half:], env, [], tmp_path / "h100-second.parquet")
    found = find_recordings(folder=tmp_path)
    assert found[0] == tmp_path / "h100-second.parquet"  # newest first
    assert set(found) == {tmp_path / f"h100{s}.parquet" for s in ("", "-first", "-second")}
    worker = ReplayWorker(found[1:])
    assert len(worker._rows) == len(read_recording(tmp_path / "h100.parquet").frame)
    with pytest.raises(RecordingError, match="another environment"):
        ReplayWorker([tmp_path / "h100.parquet", tmp_path / "old.parquet"])


def test_merged_recordings_keep_every_pair_once_and_the_later_measurement(tmp_path):
    real = read_recording(SYNTHETIC_FILE)
    env = {**real.environment, "gpu_name": "NVIDIA H200", "fingerprint": "f" * 32}
    frame, half = real.frame, len(real.frame) // 2
    first, second = frame.iloc[:half + 10], frame.iloc[half:].copy()  # 10 pairs in both
    second["median_us"] = second["median_us"] * 2  # measured again, slower
    write_recording(first, env, [{"id": 1, "name": "a", "operator": "conv2d_fwd",
                                  "dtype": "bf16"}], tmp_path / "a.parquet", note="sweep")
    write_recording(second, env, [{"id": 1, "name": "b", "operator": "conv2d_fwd",
                                   "dtype": "bf16"}], tmp_path / "b.parquet", note="sweep")
    out = tmp_path / "merged.parquet"
    result = CliRunner().invoke(app, ["merge-recordings", str(tmp_path / "a.parquet"),
                                      str(tmp_path / "b.parquet"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {len(frame)} pairs of 2 jobs" in result.stdout
    assert "10 pairs measured again" in result.stdout
    merged = read_recording(out)
    assert len(merged.frame) == len(frame) and merged.note == "sweep"
    assert merged.environment == env and not merged.synthetic
    assert [(j["id"], j["name"], j["recording"]) for j in merged.jobs] == [
        (1, "a", "a.parquet"), (2, "b", "b.parquet")]
    key = ["kernel_key", "problem_key"]
    assert not merged.frame.duplicated(key).any()
    both = merged.frame.merge(second[[*key, "median_us"]], on=key, suffixes=("", "_b"))
    assert len(both) == len(second)  # every pair of the later file as it measured it
    assert both["median_us"].equals(both["median_us_b"])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    # another GPU's recording: refused, naming both, and nothing written
    write_recording(first, {**env, "fingerprint": "e" * 32}, [], tmp_path / "other.parquet")
    with pytest.raises(RecordingError, match="different environments.*a.parquet.*other.parquet"):
        merge_recordings([tmp_path / "a.parquet", tmp_path / "other.parquet"],
                         tmp_path / "never.parquet")
    assert not (tmp_path / "never.parquet").exists()
    result = CliRunner().invoke(app, ["merge-recordings", str(tmp_path / "missing.parquet"),
                                      "--out", str(tmp_path / "never.parquet")])
    assert result.exit_code == 1 and "no recording file" in result.stderr


def test_default_selection_and_filters():
    default = select_instances(JobSpec.model_validate({**spec("d"), "kernels": []}))
    assert {i.family for i in default} >= {"conv_naive", "vendor"}
    assert "conv_faulty" not in {i.family for i in default}  # test families only on request
    chosen = select_instances(JobSpec.model_validate(
        {**spec("w"), "kernels": [{"family": "conv_naive", "where": {"block": [256]}},
                                  {"family": "conv_faulty", "where": {"fault": {"min": 3}}}]}))
    assert [i.name for i in chosen] == ["naive_fwd_bf16_block256", "faulty_fwd_bf16_fault3",
                                        "faulty_fwd_bf16_fault4"]
