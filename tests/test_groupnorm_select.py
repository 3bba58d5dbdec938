"""Selection for groupnorm_bwd from its H100 recording: train, export, and the C export
choosing as the Python selector does (the layout, a field that takes names, passed as its
index), through the same commands as the convolutions."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from farm.cli import app
from farm.recording import RECORDINGS_DIR
from farm.select.cdriver import run_driver
from farm.select.cexport import symbol_prefix
from farm.select.export import C_FILE, read_bundle
from farm.select.selector import SelectionError, Selector
from kernels.registry import operator_spec

RECORDING = RECORDINGS_DIR / "h100-groupnorm.parquet"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gn")
    db = f"sqlite:///{folder / 'farm.db'}"
    runner = CliRunner()
    for args in (["import-recording", str(RECORDING)], ["train", "--op", "groupnorm_bwd"],
                 ["models", "export", "1", "--out", str(folder / "bundle")]):
        result = runner.invoke(app, [*args, "--db", db])
        assert result.exit_code == 0, result.output
    return folder / "bundle"


def test_the_model_holds_on_the_networks_it_never_saw(bundle):
    import json

    metrics = json.loads((bundle / "metrics.json").read_text())
    held = metrics["metrics"]["holdout"]
    assert metrics["data_window"]["holdout"]["networks"] == list(
        operator_spec("groupnorm_bwd").holdout_networks)
    assert held["problems"] >= 130 and held["failed_choices"] == 0
    assert held["mean"] > 0.95 and held["p10"] > 0.9  # measured: 0.983 and 0.952


def test_c_export_chooses_as_python_for_both_layouts(bundle, tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_SELECT_CACHE", str(tmp_path / "cache"))
    files = read_bundle(bundle)
    fast, slow = Selector(files, "c"), Selector(files, "lightgbm")
    spec = operator_spec("groupnorm_bwd")
    shapes = [spec.problem("bf16", s) for s in spec.synthetic_shapes(300, seed=23)]
    assert {p.layout for p in shapes} == {"nhwc", "nchw"}
    picks, _ = run_driver(files[C_FILE], symbol_prefix("groupnorm_bwd", "sm_90", "bf16"),
                          [p.number_values() for p in shapes], [fast.allowed(p) for p in shapes],
                          tmp_path)
    assert [fast.names[i] for i in picks] == slow.select_many(shapes) == fast.select_many(shapes)
    chosen = fast.select({"N": 8, "C": 320, "H": 64, "W": 64, "G": 32, "layout": "nchw"})
    assert "_nchw_" in chosen  # an instance of the problem's layout, by the rules
    with pytest.raises(SelectionError, match="unknown field"):
        fast.select({"N": 8, "C": 320, "H": 64, "W": 64, "G": 32, "K": 3})
