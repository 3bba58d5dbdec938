"""The coordinator on this machine's real GPUs (one measure actor per GPU): the planted faults
of conv_faulty (illegal address, endless loop, wrong and unwritten output) each become a row,
the actor process is restarted after each fatal one, and the job completes with every pair
recorded exactly once. Skipped where there is no GPU."""

import pytest

import kernels.testing.faulty  # noqa: F401 - registers conv_faulty
from farm.cluster import Coordinator, CoordinatorConfig
from farm.gpu import list_devices
from farm.store import TimingFilter, open_store
from tests.cluster_support import SMALL, assert_complete_exactly_once, spec, submit

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not list_devices(), reason="no GPU on this machine")]


def test_real_gpu_faults_leave_a_complete_job(sqlite_url, tmp_path, ray_cluster):
    store = open_store(sqlite_url)
    data = spec("gpu-faults", {**SMALL, "C": [32], "R": [3]},
                kernels=("conv_naive", "conv_faulty", "vendor"), timing={"timeout_s": 2.0})
    job_id = submit(store, data, tmp_path)
    config = CoordinatorConfig(hang_slack_s=60, heartbeat_s=0.5, flush_s=0.2)
    [outcome] = Coordinator(store, config).run(until_idle=True)
    assert outcome.status == "done", outcome
    assert_complete_exactly_once(store, job_id)
    frame = store.timings(TimingFilter(job_id=job_id, status=None))
    assert frame["replay_of"].isna().all() and frame["gpu_name"].nunique() == 1
    by_kernel = frame.groupby("kernel")["status"].agg(set).to_dict()
    assert by_kernel["faulty_fwd_bf16_fault0"] == {"ok"}
    assert by_kernel["faulty_fwd_bf16_fault1"] == by_kernel["faulty_fwd_bf16_fault2"] == {
        "wrong_result"}
    assert by_kernel["faulty_fwd_bf16_fault3"] == {"launch_error"}
    assert by_kernel["faulty_fwd_bf16_fault4"] == {"timeout"}
    assert by_kernel["naive_fwd_bf16_block128"] == {"ok"}
    messages = frame.set_index("kernel")["message"]
    assert messages["faulty_fwd_bf16_fault3"].str.contains("attempts: launch_error, "
                                                           "launch_error").all()
    assert sum(w.restarts for w in store.workers(include_stopped=True)) >= 2 * 2 * 2
