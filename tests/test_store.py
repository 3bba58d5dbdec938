"""The store's queries on SQLite and PostgreSQL: jobs, measurements with history, timings."""

import pytest

from kernels.conv.problem import ConvProblem
from farm.store import NotFound, TimingFilter, open_store

SHAPE = dict(N=8, C=64, K=64, G=1, H=14, W=14, R=3, S=3, pad_h=1, pad_w=1)


def problems():
    return [ConvProblem(op="conv2d_fwd", **SHAPE),
            ConvProblem(op="conv2d_fwd", **{**SHAPE, "G": 64, "K": 64}),
            ConvProblem(op="conv2d_fwd", **SHAPE)]  # a repeat: stored once


def seed(store):
    job = store.create_job("j", "conv2d_fwd", "bf16", 3, {"spec": {}}, problems())
    env = store.environment_id("fp-h100", gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90",
                               sm_count=132, driver="580", compiler="nvrtc 13.0",
                               runtime="cuda 13.0", farm_version="0.1.0")
    replay = store.environment_id("fp-replay", gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90",
                                  sm_count=132, driver="580", compiler="nvrtc 13.0",
                                  runtime="replay", farm_version="0.1.0", replay_of="fp-h100")
    kernels = store.kernel_ids([
        {"key": f"k{i}", "family": "toy", "operator": "conv2d_fwd", "name": f"toy_{i}",
         "config": {"tile": 32 * (i + 1)}, "source_hash": "abc"} for i in range(2)])
    return job, env, replay, kernels


def row(kernel, problem, env, job, median, status="ok"):
    return {"kernel_id": kernel, "problem_id": problem, "environment_id": env, "job_id": job,
            "status": status, "median_us": median, "min_us": median * 0.98,
            "p90_us": median * 1.01, "max_us": median * 1.1, "samples": 20, "spread": 0.03,
            "policy": {"warmup": 3}, "telemetry": {}}


def test_job_lifecycle(db_url):
    store = open_store(db_url, migrate=True)
    job, *_ = seed(store)
    summary = store.job(job)
    assert (summary.status, summary.priority, summary.problems) == ("queued", 3, 2)
    assert [p.G for p in store.job_problems(job)] == [1, 64]
    assert store.count_rows("problems") == 2
    store.set_job_state(job, "running", total_pairs=4)
    assert store.job(job).started_at is not None
    assert store.cancel_job(job).status == "cancelled"
    assert store.job(job).finished_at is not None
    store.set_job_state(job, "done")
    assert store.cancel_job(job).status == "done"  # a finished job stays finished
    with pytest.raises(NotFound, match="no job with id 999"):
        store.job(999)


def test_remeasuring_replaces_the_row_and_keeps_history(db_url):
    store = open_store(db_url, migrate=True)
    job, env, replay, kernels = seed(store)
    pid = 1
    store.record_measurements([row(kernels["k0"], pid, env, job, 10.0),
                               row(kernels["k1"], pid, env, job, 12.0),
                               row(kernels["k0"], pid, replay, job, 11.0)])
    store.record_measurements([row(kernels["k0"], pid, env, job, 9.5)])
    assert store.count_rows("measurements") == 3
    assert store.count_rows("measurement_history") == 1
    frame = store.timings(TimingFilter(operator="conv2d_fwd", include_replay=False))
    assert sorted(frame["median_us"]) == [9.5, 12.0]
    assert set(frame["gpu_name"]) == {"NVIDIA H100 80GB HBM3"}
    with pytest.raises(ValueError, match="unknown measurement status"):
        store.record_measurements([row(kernels["k0"], pid, env, job, 1.0, status="fine")])


def test_a_write_replaces_in_order_and_keeps_the_fields_a_row_leaves_out(db_url):
    """A batch that gives a pair three times writes it, then replaces it twice (history in
    that order); a re-measurement replaces only the fields its row gives; timings given as
    integers are stored as floats."""
    store = open_store(db_url, migrate=True)
    job, env, replay, kernels = seed(store)
    k0 = kernels["k0"]
    store.record_measurements([{**row(k0, 1, env, job, 10), "message": "first"},
                               row(k0, 1, env, job, 9.0), row(kernels["k1"], 1, env, job, 12.0),
                               row(k0, 1, env, job, 8.0)])
    store.record_measurements([{"kernel_id": k0, "problem_id": 1, "environment_id": env,
                                "job_id": None, "status": "timeout"}])
    fields = "status, median_us, message, job_id, samples"
    assert stored(store, f"SELECT {fields} FROM measurements WHERE kernel_id = {k0}") == [
        ("timeout", 8.0, "first", None, 20)]
    history = stored(store, f"SELECT {fields} FROM measurement_history ORDER BY id")
    assert history == [("ok", 10.0, "first", job, 20), ("ok", 9.0, "first", job, 20),
                       ("ok", 8.0, "first", job, 20)]
    assert type(history[0][1]) is float
    assert store.count_rows("measurements") == 2


def stored(store, query: str) -> list[tuple]:
    """Rows as the database driver reads them."""
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.exec_driver_sql(query)]


def test_timing_filters(db_url):
    store = open_store(db_url, migrate=True)
    job, env, replay, kernels = seed(store)
    store.record_measurements([row(kernels["k0"], 1, env, job, 10.0),
                               row(kernels["k1"], 2, env, job, 20.0),
                               row(kernels["k1"], 1, env, job, 0.0, status="wrong_result")])
    assert len(store.timings(TimingFilter())) == 2
    assert len(store.timings(TimingFilter(status=None))) == 3
    assert list(store.timings(TimingFilter(shape=(("G", 64),)))["median_us"]) == [20.0]
    assert list(store.timings(TimingFilter(kernel="toy_0"))["G"]) == [1]
    assert len(store.timings(TimingFilter(device="h100"))) == 2
    assert len(store.timings(TimingFilter(device="sm_90"))) == 2
    assert len(store.timings(TimingFilter(device="mi300"))) == 0
    assert len(store.timings(TimingFilter(dtype="fp16"))) == 0
    assert len(store.timings(TimingFilter(job_id=job, limit=1))) == 1


def test_an_environment_keeps_long_version_strings(db_url):
    store = open_store(db_url, migrate=True)
    compiler = ("nvrtc 13.0 (nvidia-cuda-nvrtc 13.0.88, headers nvidia-cuda-runtime 13.0.96)"
                " and a few more words")
    env = store.environment_id("f" * 32, gpu_name="NVIDIA H100 80GB HBM3", arch="sm_90",
                               sm_count=132, driver="580.159.04", compiler=compiler,
                               runtime="cuda-bindings 13.3.1 on CUDA driver API 13.0",
                               farm_version="0.1.0+g1234567.d20261123", replay_of=None,
                               details={})
    assert store.environment("f" * 32)["compiler"] == compiler and env > 0
