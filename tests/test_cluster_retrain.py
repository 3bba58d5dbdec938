"""Retraining inside the coordinator (local Ray, SQLite, the replay device; replayed rows count
as training data here only): a job's data makes a model due, a Ray CPU task trains it while
the next job is measured, and the coordinator registers it; 20% more data makes the next one."""

import datetime as dt

import pytest

from farm.cluster import Coordinator
from farm.cluster.pairs import select_instances
from farm.select.registry import retrain_due
from farm.specs import resolve_spec
from farm.store import open_store
from farm.store.queries import ModelQueries
from tests.cluster_support import MEDIUM, assert_complete_exactly_once, config, spec, submit
from tests.data.synthetic_recording import build

pytestmark = pytest.mark.usefixtures("ray_cluster")
TARGET = ("conv2d_fwd", "sm_90", "bf16")


def _pairs(data, tmp_path):
    resolved = resolve_spec(data, tmp_path / f"{data['name']}.yaml")
    instances = select_instances(resolved.spec)
    return [(p, i) for p in resolved.problems for i in instances]


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def test_a_model_is_trained_and_registered_while_the_next_job_runs(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    # the second job twice the first: its data make the second model due even where a busy
    # machine starts the first training late, once much of the second job is measured
    first, second = spec("first", MEDIUM), spec("second", {**MEDIUM, "H": [12, 20, 24, 28]})
    rec = str(build(_pairs(first, tmp_path) + _pairs(second, tmp_path), tmp_path / "r.parquet"))
    jobs = [submit(store, first, tmp_path), submit(store, second, tmp_path)]
    coordinator = Coordinator(store, config(rec, replay_pace_s=0.25, retrain_check_s=0.2,
                                            retrain_include_replay=True))
    outcomes = coordinator.run(until_idle=True)

    assert [(o.job_id, o.status) for o in outcomes] == [(jobs[0], "done"), (jobs[1], "done")]
    for job_id in jobs:
        assert_complete_exactly_once(store, job_id)
    models = sorted(ModelQueries(store).models(*TARGET), key=lambda m: m.version)
    assert [m.version for m in models] == [1, 2]
    pairs = store.job(jobs[0]).total_pairs
    second_job = store.job(jobs[1])
    # the first model: trained after the first job (the second job was measuring meanwhile:
    # a few of its rows may be in the data) and registered before the second job finished
    assert pairs <= models[0].data_window["measurements"] < pairs + second_job.total_pairs
    assert _aware(models[0].created_at) < _aware(second_job.finished_at)
    assert outcomes[1].measured == second_job.total_pairs  # the job went on, every pair
    # the second job tripled the data: a second model, compared on the held-out problems
    assert models[1].data_window["measurements"] == pairs + second_job.total_pairs
    done = coordinator.retrainer.registered
    assert done[0].promoted and done[0].reason == "first model of its operator/arch/dtype"
    assert "mean efficiency" in done[1].reason and "held-out rows" in done[1].reason
    assert not retrain_due(store, *TARGET, include_replay=True).due
    assert retrain_due(store, *TARGET, include_replay=True, period_s=0.0).due is False  # no new
    assert not coordinator.retrainer.running


def test_active_sampling_queues_the_models_next_shapes_and_measures_them(sqlite_url, tmp_path):
    """With active_batch, the training task also picks the shapes to measure next and the
    coordinator queues and runs them as a job of the candidate families (here, replayed: the
    recording has none of those pairs, so they come back not_recorded), once per round."""
    store = open_store(sqlite_url)
    first = spec("first", MEDIUM)
    rec = str(build(_pairs(first, tmp_path), tmp_path / "r.parquet"))
    job = submit(store, first, tmp_path)
    coordinator = Coordinator(store, config(rec, retrain_include_replay=True, active_batch=6,
                                            active_rounds=1, active_pool=300))
    outcomes = coordinator.run(until_idle=True)

    assert outcomes[0].job_id == job and outcomes[0].status == "done"
    [(target, jobs)] = coordinator.retrainer.sampled.items()
    assert target == TARGET and len(jobs) == 1 and outcomes[1].job_id == jobs[0]
    sampled = store.job(jobs[0])
    assert sampled.name.startswith("active-sampling conv2d_fwd bf16 sm_90 round 1")
    assert sampled.status == "done" and sampled.total_pairs > 0
    resolved = store.job_spec(jobs[0])["spec"]
    assert len(resolved["problems"][0]["inline"]) == 6
    assert {k["family"] for k in resolved["kernels"]} >= {"conv_naive"}
    assert len(outcomes) == 2  # one round only, and the replayed job's rows train nothing
