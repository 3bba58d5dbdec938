"""A model judged on a recording's layers it never trained on (farm.select.judge), through
`farm train --judge-recording` and bench/select_unseen.py, on SYNTHETIC measurements: the
judging recording is an export of a few network shapes that the training database also holds.
The efficiencies are of invented data and assert only sanity."""

import json
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from dashboard.analysis import stored_classes, stored_evaluations
from farm.cli import app
from farm.recording import export_recording, read_recording, write_recording
from farm.select.data import batch_free
from farm.select.synthetic import GPU_NAME, seed_synthetic, synthetic_problems
from farm.store import open_store
from farm.store.queries import ModelQueries

OP, ARCH, DTYPE = "conv2d_fwd", "sm_90", "bf16"
JUDGED = 12  # network shapes of the judging recording, the first of the training ones


def recorded(folder, name, problems):
    """A recording of SYNTHETIC measurements of these problems (a database's export)."""
    store = open_store(f"sqlite:///{folder / f'{name}.db'}")
    seed_synthetic(store, problems)
    [job] = [j.id for j in store.jobs()]
    path = export_recording(store, [job], folder / f"{name}.parquet")
    store.engine.dispose()
    return path


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("judge")
    url = f"sqlite:///{folder / 'farm.db'}"
    seed_synthetic(open_store(url), synthetic_problems(OP, DTYPE, 60, 60))
    judged = synthetic_problems(OP, DTYPE, JUDGED, 0)
    return SimpleNamespace(url=url, folder=folder, judged=judged,
                           judge=recorded(folder, "judge", judged),
                           env={"FARM_DB_URL": url})


def train(farm, *options):
    return CliRunner().invoke(app, ["train", "--op", OP, "--no-resources", *options],
                              env=farm.env)


def test_cli_train_judges_the_model_on_the_recordings_layers_and_stores_it(farm):
    result = train(farm, "--judge-recording", str(farm.judge))
    assert result.exit_code == 0, result.output
    assert (f"judged on the layers of judge.parquet ({GPU_NAME}), their geometries held out: "
            f"{JUDGED} problems: mean") in result.stdout
    [model] = ModelQueries(open_store(farm.url)).models(OP, ARCH, DTYPE)
    key = batch_free(OP)
    shapes = {key(p.geometry()) for p in farm.judged}
    assert model.data_window["holdout"] == {"kind": "shapes", "shapes": len(shapes)}
    measured = [p for p in synthetic_problems(OP, DTYPE, 60, 60) if key(p.geometry()) in shapes]
    assert model.metrics["holdout"]["problems"] == len(measured) >= JUDGED
    judged = model.metrics["evaluations"]["judged_recording"]
    assert (judged["recording"], judged["gpu"]) == ("judge.parquet", GPU_NAME)
    pooled = judged["pooled"]
    assert (pooled["problems"], pooled["scored"], pooled["first_not_measured"],
            pooled["oracle_family_untrained"]) == (JUDGED, JUDGED, 0, 0)
    assert 0 < pooled["min"] <= pooled["p10"] <= pooled["mean"] <= pooled["top_k"]["2"] \
        <= pooled["top_k"]["4"] <= 1
    assert pooled["under_0_70"] == 0 or pooled["min"] < 0.70
    assert 0.5 < pooled["over_vendor_geomean"] < 2
    classes = judged["classes"]
    assert sum(c["problems"] for c in classes.values()) == JUDGED
    assert sum(c["under_0_70"] for c in classes.values()) == pooled["under_0_70"]
    assert min(c["min"] for c in classes.values()) == pooled["min"]
    shown = stored_evaluations(model.metrics)
    assert shown["evaluation"].tolist() == [
        f"layers of judge.parquet on {GPU_NAME}, their geometries held out of training"]
    assert shown.iloc[0]["top-2 efficiency"] == pooled["top_k"]["2"]
    assert shown.iloc[0]["top-4 efficiency"] == pooled["top_k"]["4"]
    assert stored_classes(model.metrics)["class"].tolist() == list(classes)
    # bench/select_unseen.py: the same recipe on the training database's export, the same
    # figures in its own JSON (top-2 as "top2")
    from bench import select_unseen

    trained = recorded(farm.folder, "train", synthetic_problems(OP, DTYPE, 60, 60))
    argv = ["select_unseen", "--train", str(trained), "--judge", str(farm.judge), "--ops", OP,
            "--out", str(farm.folder), "--cascade", "1", "1000", "--cascade", "1", "1"]
    patch = pytest.MonkeyPatch()
    patch.setattr(sys, "argv", argv)
    try:
        select_unseen.main()
    finally:
        patch.undo()
    figures = json.loads((farm.folder / "select_unseen.json").read_text())["figures"]
    found = figures["operators"][OP]
    assert figures["judge_gpu"] == GPU_NAME and found["held_out_of_training"] == len(measured)
    assert found["all"]["problems"] == JUDGED
    assert found["all"]["top2"] == pytest.approx(pooled["top_k"]["2"])
    assert found["all"]["top4"] == pytest.approx(pooled["top_k"]["4"])
    assert found["all"]["mean"] == pytest.approx(pooled["mean"])
    assert set(found["classes"]) == set(classes)
    # a cascade that keeps every candidate chooses as the model; one that keeps one at most
    # as many times
    every, one = found["cascades"]["1/1000"], found["cascades"]["1/1"]
    assert every["same_choices"] == JUDGED and every["all"]["mean"] == pytest.approx(
        found["all"]["mean"])
    assert one["same_choices"] <= JUDGED and one["all"]["problems"] == JUDGED


def test_select_unseen_takes_train_config_settings():
    """--set FIELD=VALUE: TrainConfig's defaults with each field given its value's type; a name
    that is not a field, or no value, is refused by name."""
    from bench.select_unseen import train_config

    config = train_config(["num_leaves=63", "learning_rate=0.1", "kinds=ranker,",
                           "learn_close=false", "candidates=union"])
    assert (config.num_leaves, config.learning_rate, config.kinds, config.learn_close,
            config.candidates, config.rounds) == (63, 0.1, ("ranker",), False, "union", None)
    for bad in ("leaves=63", "num_leaves="):
        with pytest.raises(SystemExit, match=bad):
            train_config([bad])


def relabelled(farm, name, environment=None, **columns):
    """The judging recording with some columns or its environment changed."""
    recording = read_recording(farm.judge)
    return write_recording(recording.frame.assign(**columns),
                           {**recording.environment, **(environment or {})}, [],
                           farm.folder / name)


@pytest.mark.parametrize("case, says", [
    ("missing", "judging recording: no recording file"),
    ("unreadable", "not a parquet file"),
    ("operator", f"has no ok time of {OP} {DTYPE} to judge by (it holds conv2d_bwd_data bf16)"),
    ("dtype", f"has no ok time of {OP} {DTYPE} to judge by (it holds {OP} fp16)"),
    ("gpu", "gpu.parquet was measured on NVIDIA A100-SXM4-80GB (sm_80), not on sm_90"),
    ("failed", f"has no ok time of {OP} {DTYPE} to judge by (it holds {OP} bf16)"),
])
def test_cli_train_refuses_a_recording_that_cannot_judge_before_training(farm, case, says):
    path = {"missing": lambda: farm.folder / "none.parquet",
            "unreadable": lambda: farm.folder / "text.parquet",
            "operator": lambda: relabelled(farm, "op.parquet", operator="conv2d_bwd_data"),
            "dtype": lambda: relabelled(farm, "dtype.parquet", dtype="fp16"),
            "gpu": lambda: relabelled(farm, "gpu.parquet", {
                "gpu_name": "NVIDIA A100-SXM4-80GB", "arch": "sm_80"}),
            "failed": lambda: relabelled(farm, "failed.parquet", status="timeout")}[case]()
    if case == "unreadable":
        path.write_text("not a recording")
    before = len(ModelQueries(open_store(farm.url)).models(OP, ARCH, DTYPE))
    result = train(farm, "--judge-recording", str(path))
    assert result.exit_code == 1 and says in " ".join(result.output.split()), result.output
    assert "Traceback" not in result.output
    assert len(ModelQueries(open_store(farm.url)).models(OP, ARCH, DTYPE)) == before


def test_cli_train_judges_with_no_other_holdout(farm):
    result = train(farm, "--judge-recording", str(farm.judge), "--holdout-where", "R >= 5")
    assert result.exit_code == 2 and "not with --holdout-spec or --holdout-where" in " ".join(
        result.output.split())
