"""Active sampling without a GPU: on a model trained from SYNTHETIC measurements, the next batch
is new shapes of the wider coverage space, the nearest to the model's wrong choices first, then
where its two best candidates are closest; the coordinator's job for it."""

from __future__ import annotations

import numpy as np
import pytest

from farm.select.active import cost_gap, plan_batch, wrong_problems
from farm.select.data import geometries
from kernels.conv.synthetic import coverage_shapes
from tests.test_select import fwd  # noqa: F401 - the module's trained model fixture


def test_the_batch_is_new_shapes_near_wrong_choices_then_where_the_model_is_unsure(fwd):  # noqa: F811
    batch = plan_batch(fwd.model, fwd.data, count=24, pool_size=400, seed=1)
    assert len(batch.problems) == 24 == len(set(batch.problems))
    measured = set(geometries("conv2d_fwd", fwd.data.frame))
    fields = ("N", "C", "K", "G", "H", "W", "R", "S", "stride_h", "stride_w", "pad_h", "pad_w",
              "dil_h", "dil_w")
    assert not {tuple(getattr(p, f) for f in fields) for p in batch.problems} & measured
    wrong = wrong_problems(fwd.model, fwd.data, 0.9)
    near = [r for r in batch.reasons if r.startswith("wrong")]
    assert len(near) == min(len(wrong), 12)
    unsure = [p for p, r in zip(batch.problems, batch.reasons) if r.startswith("unsure")]
    assert unsure
    gaps = [cost_gap(fwd.selector, p) for p in unsure]
    assert gaps == sorted(gaps) and np.isfinite(gaps).all()
    # the unsure shapes have smaller gaps than the pool's typical one
    pool = [fwd.selector.problem(s) for s in coverage_shapes(100, seed=9)]
    assert max(gaps) <= np.median([cost_gap(fwd.selector, p) for p in pool])
    assert plan_batch(fwd.model, fwd.data, count=24, pool_size=400, seed=1) == batch


def test_the_coordinator_queues_the_batch_as_a_job_of_the_candidate_families(fwd):  # noqa: F811
    from farm.cluster.retrain import queue_batch

    batch = plan_batch(fwd.model, fwd.data, count=8, pool_size=200, seed=2)
    job = queue_batch(fwd.store, batch, "sm_90", 1)
    summary = fwd.store.job(job)
    assert summary.status == "queued" and "active-sampling conv2d_fwd" in summary.name
    spec = fwd.store.job_spec(job)["spec"]
    assert sorted(k["family"] for k in spec["kernels"]) == [
        "conv_direct", "conv_dw_tma", "conv_grouped_mma", "conv_grouped_taps", "conv_igemm",
        "conv_naive", "conv_pointwise", "conv_pointwise_cluster", "conv_stem", "conv_wgmma",
        "conv_wgmma_blockdiag", "conv_wgmma_im2col", "conv_wgmma_split"]
    assert spec["problems"][0]["inline"] == batch.fields()


@pytest.mark.parametrize("count", [0])
def test_an_empty_pool_or_count_gives_no_job(fwd, count):  # noqa: F811
    from farm.cluster.retrain import queue_batch

    batch = plan_batch(fwd.model, fwd.data, count=count, pool_size=50, seed=2)
    assert batch.problems == () and queue_batch(fwd.store, batch, "sm_90", 1) is None


def test_a_listed_pool_gives_only_its_new_shapes(fwd, tmp_path):  # noqa: F811
    """--active-shapes: the batch comes from a spec's problems (those of its operator and dtype),
    never a measured one; a spec that does not load is refused with its reason."""
    import yaml

    from farm.cluster.retrain import listed_shapes
    from farm.specs import SpecError

    listed = coverage_shapes(40, seed=5)
    spec = tmp_path / "pool.yaml"
    spec.write_text(yaml.safe_dump({"name": "pool", "operator": "conv2d_fwd", "dtype": "bf16",
                                    "problems": [{"inline": listed}]}))
    pool = listed_shapes(str(spec))
    assert list(pool) == [("conv2d_fwd", "bf16")] and len(pool["conv2d_fwd", "bf16"]) == 40
    measured = fwd.data.frame.drop_duplicates("problem").head(3)
    shapes = pool["conv2d_fwd", "bf16"] + [
        {f: int(r[f]) for f in pool["conv2d_fwd", "bf16"][0]} for _, r in measured.iterrows()]
    batch = plan_batch(fwd.model, fwd.data, count=12, shapes=shapes)
    fields = list(shapes[0])
    chosen = [{f: getattr(p, f) for f in fields} for p in batch.problems]
    assert len(chosen) == 12 and all(c in pool["conv2d_fwd", "bf16"] for c in chosen)
    assert listed_shapes(None) == {}
    spec.write_text("name: pool\noperator: conv2d_fwd\n")
    with pytest.raises(SpecError, match="pool.yaml"):
        listed_shapes(str(spec))


def test_a_batch_that_cannot_be_queued_is_a_note_not_a_stop(fwd, monkeypatch):  # noqa: F811
    """The model is registered; the batch's failure is a note, not an exception that would stop
    the coordinator."""
    from farm.cluster import retrain
    from farm.cluster.config import CoordinatorConfig
    from farm.specs import SpecError

    batch = plan_batch(fwd.model, fwd.data, count=4, pool_size=100, seed=2)
    monkeypatch.setattr(retrain.ray, "get", lambda ref: (fwd.model, fwd.data, batch))

    def refuse(*args):
        raise SpecError("active-sampling: kernels[4]", "no instance")
    monkeypatch.setattr(retrain, "queue_batch", refuse)
    notes = []

    class Notes:
        def note(self, message):
            notes.append(message)
    trainer = retrain.Retrainer(fwd.store, CoordinatorConfig(active_batch=4), Notes())
    trainer._finish(object(), ("conv2d_fwd", "sm_90", "bf16"), 1)
    assert len(trainer.registered) == 1 and trainer.queued_jobs() == 0
    assert "the batch could not be queued (active-sampling: kernels[4]: no instance)" in notes[-1]


def test_thinly_measured_families_get_shapes_they_take(fwd):  # noqa: F811
    """A quarter of the batch at most goes to the families measured on the fewest training
    problems, in turn, each shape one the named family takes; reference families never."""
    from farm.select.active import takes
    from farm.select.data import family_problems
    from farm.select.guard import is_reference, thin_families

    counts = family_problems(fwd.data)
    assert set(counts) == {e.family for e in fwd.data.catalogue}
    assert counts["conv_naive"] > 0 and min(counts.values()) >= 0
    assert fwd.model.metrics["family_problems"] == counts
    from farm.select.train import summary
    few = thin_families(counts, 30)
    assert few and f"{few[0][0]} {few[0][1]}" in summary(fwd.model).split("thinly measured")[1]
    every = thin_families(counts, 10 ** 6)  # every family counts as thin
    assert [n for _, n in every] == sorted(n for _, n in every)
    assert not any(is_reference(f) for f, _ in every)
    batch = plan_batch(fwd.model, fwd.data, count=24, pool_size=400, seed=1, thin=10 ** 6)
    thin = [(p, r) for p, r in zip(batch.problems, batch.reasons) if r.startswith("thin")]
    wrong = [r for r in batch.reasons if r.startswith("wrong")]
    assert len(thin) == min(6, 24 - len(wrong))
    named = [r.split()[1] for _, r in thin]
    takers = [f for f, _ in every]
    assert len(takers) > 6 and len(set(named)) == len(named)  # one each, in turn,
    assert named == [f for f in takers if f in named]  # fewest first
    for problem, reason in thin:
        family, ran = reason.split()[1], int(reason.split()[4])
        assert counts[family] == ran and takes(family, "conv2d_fwd", "bf16", problem)
    assert len(batch.problems) == 24
    # no thin family: the batch is as before the rule
    assert plan_batch(fwd.model, fwd.data, count=24, pool_size=400, seed=1, thin=0) == \
        plan_batch(fwd.model, fwd.data, count=24, pool_size=400, seed=1, thin=-1)
