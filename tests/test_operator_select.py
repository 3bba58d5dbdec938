"""Selection for the operators beyond the convolutions, each from its H100 recording
(groupnorm_bwd, dwsep_fwd): train, export, the model's figures on the networks it never saw,
and the C export choosing as the Python selector does (names such as the layout or the
activation passed as their index), through the same commands as the convolutions."""

from __future__ import annotations

import numpy as np
import pytest
from typer.testing import CliRunner

from farm.cli import app
from farm.recording import RECORDINGS_DIR
from farm.select.cdriver import run_driver
from farm.select.cexport import symbol_prefix
from farm.select.export import C_FILE, read_bundle
from farm.select.selector import SelectionError, Selector
from kernels.registry import operator_spec

# operator: (recording, held-out problems at least, mean and P10 efficiency above: each
# measured on the day's recording, given with the figure in a comment)
OPERATORS = {
    "groupnorm_bwd": ("h100-groupnorm.parquet", 130, 0.95, 0.9),  # 141: 0.983, 0.952
    "dwsep_fwd": ("h100-dwsep.parquet", 45, 0.93, 0.8),  # 48: 0.962, 0.891
}


@pytest.fixture(scope="module", params=sorted(OPERATORS))
def trained(request, tmp_path_factory):
    """(operator, its exported bundle)."""
    op = request.param
    folder = tmp_path_factory.mktemp(op)
    db = f"sqlite:///{folder / 'farm.db'}"
    runner = CliRunner()
    for args in (["import-recording", str(RECORDINGS_DIR / OPERATORS[op][0])],
                 ["train", "--op", op], ["models", "export", "1", "--out", str(folder / "bundle")]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, result.output
    return op, folder / "bundle"


def test_the_model_holds_on_the_networks_it_never_saw(trained):
    import json

    op, bundle = trained
    _, problems, mean, p10 = OPERATORS[op]
    metrics = json.loads((bundle / "metrics.json").read_text())
    held = metrics["metrics"]["holdout"]
    assert metrics["data_window"]["holdout"]["networks"] == list(
        operator_spec(op).holdout_networks)
    assert held["problems"] >= problems and held["failed_choices"] == 0
    assert held["mean"] > mean and held["p10"] > p10


def test_farm_train_uses_the_operators_training_settings(trained):
    import dataclasses
    import json

    from farm.select.train import TrainConfig

    op, bundle = trained
    metrics = json.loads((bundle / "metrics.json").read_text())
    default = TrainConfig().for_operator(op)
    assert metrics["train_config"] == json.loads(json.dumps(dataclasses.asdict(default)))
    assert {k: getattr(default, k) for k in operator_spec(op).training} == dict(
        operator_spec(op).training)
    assert metrics["metrics"]["trees"] <= default.rounds


def test_c_export_chooses_as_python(trained, tmp_path, monkeypatch):
    op, bundle = trained
    monkeypatch.setenv("FARM_SELECT_CACHE", str(tmp_path / "cache"))
    files = read_bundle(bundle)
    fast, slow = Selector(files, "c"), Selector(files, "lightgbm")
    spec = operator_spec(op)
    shapes = [spec.problem("bf16", s) for s in spec.synthetic_shapes(300, seed=23)]
    picks, _ = run_driver(files[C_FILE], symbol_prefix(op, "sm_90", "bf16"),
                          [p.number_values() for p in shapes], [fast.allowed(p) for p in shapes],
                          tmp_path)
    assert [fast.names[i] for i in picks] == slow.select_many(shapes) == fast.select_many(shapes)
    # the C export costs only the candidates the rules allow (an exact mask, by rule keys)
    allowed = fast._masks(shapes[0])
    assert allowed.exact and fast._costs_of_c is not None and fast._rank_c is not None
    costs = fast._choice_costs(shapes[0], allowed)
    assert 0 < np.isfinite(costs).sum() == sum(fast.allowed(shapes[0])) < len(fast.names)
    for name in spec.problem_type.TEXT_FIELDS:  # names cross the C export as their index
        assert len({getattr(p, name) for p in shapes}) > 1, f"the shapes vary {name}"
    if op != "groupnorm_bwd":
        return
    assert {p.layout for p in shapes} == {"nhwc", "nchw"}
    chosen = fast.select({"N": 8, "C": 320, "H": 64, "W": 64, "G": 32, "layout": "nchw"})
    assert "_nchw_" in chosen  # an instance of the problem's layout, by the rules
    with pytest.raises(SelectionError, match="unknown field"):
        fast.select({"N": 8, "C": 320, "H": 64, "W": 64, "G": 32, "K": 3})
