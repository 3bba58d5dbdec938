"""The dashboard through Streamlit's AppTest: every page against a database of a convolution and
a group-normalization scope whose figures are known by hand, and against SYNTHETIC scopes of
both (tests/dashboard_support.py); the empty and unusable databases, the read-only views on
SQLite and PostgreSQL, and `farm dashboard`."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from streamlit.testing.v1 import AppTest
from typer.testing import CliRunner

from dashboard import data
from farm.store.db import make_engine, upgrade
from farm.store.readonly import database_state, open_views
from farm.store.views import TimingSelection
from tests.dashboard_support import (BUNDLE, GN, GN_PROBLEMS, PROBLEMS, seed,
                                     seed_synthetic_scopes)

APP = str(Path(__file__).resolve().parents[1] / "dashboard" / "app.py")
SCREENS = ["overview", "efficiency", "vs_vendor", "timings", "models"]


@pytest.fixture
def seeded(sqlite_url, monkeypatch) -> str:
    seed(sqlite_url)
    monkeypatch.setenv("FARM_DB_URL", sqlite_url)
    return sqlite_url


def page(name: str) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=30).run()
    if name != "overview":
        at.switch_page(f"screens/{name}.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metrics(at: AppTest) -> list[tuple[str, str]]:
    return [(m.label, m.value) for m in at.metric]


def _decoded(value):
    """Plotly's typed arrays ({dtype, bdata, shape}) as lists."""
    if isinstance(value, dict) and "bdata" in value:
        array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
        if "shape" in value:
            array = array.reshape([int(n) for n in str(value["shape"]).split(",")])
        return array.tolist()
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def figures(at: AppTest) -> dict[str, dict]:
    """The plotly figures on the page by title, typed arrays decoded."""
    out = {}
    for chart in at.get("plotly_chart"):
        spec = _decoded(json.loads(chart.proto.spec))
        out[spec["layout"]["title"]["text"]] = spec
    return out


def test_overview(seeded):
    at = page("overview")
    assert at.title[0].value == "Overview"
    assert metrics(at) == [("Running jobs", "1"), ("Queued jobs", "1"), ("Measurements", "21"),
                           ("Failed", "1 (4.8%)"), ("Active workers", "1"), ("Models", "3")]
    jobs, workers, failures = (d.value for d in at.dataframe)
    assert list(jobs["name"]) == ["sweep-running", "sweep-queued", "sweep-conv2d_fwd",
                                  "sweep-groupnorm_bwd"]
    assert list(jobs["operator"]) == ["conv2d_fwd", "conv2d_fwd", "conv2d_fwd", GN]
    running = jobs.iloc[0]
    assert running["progress"] == pytest.approx(50.0)
    assert running["eta"].startswith("1 min 4")  # 50 pairs left at 0.5 pairs/s (and a bit)
    for done in (jobs.iloc[2], jobs.iloc[3]):
        assert done["progress"] == pytest.approx(100.0) and done["eta"] == ""
    assert list(workers["name"]) == ["coord/gpu0"]  # the stopped worker is not shown
    assert workers.iloc[0]["measuring"] == "kernel_a on P1"
    assert failures.to_dict("records")[0] | {"last_seen": None} == {
        "status": "wrong_result", "message": "max error 0.5 > 0.02", "count": 1,
        "last_seen": None}
    chart = figures(at)["Measurements per minute"]
    ok, failed = chart["data"]
    assert (sum(ok["y"]), sum(failed["y"])) == (19, 1)  # unsupported is neither
    assert "refreshes every 5 s while jobs run" in " ".join(c.value for c in at.caption)


def test_overview_stops_refreshing_without_active_jobs(seeded):
    engine = make_engine(seeded)
    with engine.begin() as conn:
        conn.execute(text("UPDATE jobs SET status = 'done'"))
    at = page("overview")
    assert "reload to refresh" in " ".join(c.value for c in at.caption)


def test_efficiency(seeded):
    at = page("efficiency")
    assert at.selectbox(key="eff_model").value == "model v1 (promoted)"
    assert at.selectbox(key="eff_compare").value == "best single instance (kernel_a)"
    shown = metrics(at)
    model, baseline = dict(shown[:6]), dict(shown[6:])
    assert model == {"Mean": "0.667", "Median": "1.000", "P10": "0.200", "Min": "0.000",
                     "Top-1": "66.7%", "Top-5": "66.7%"}
    assert baseline == {"Mean": "0.667", "Median": "0.500", "P10": "0.500", "Min": "0.500",
                        "Top-1": "33.3%", "Top-5": "100.0%"}
    assert "1 where the choice has no ok time (scored 0)" in at.caption[0].value
    charts = figures(at)
    hist = charts["Efficiency per shape"]["data"]
    assert sorted(hist[0]["x"]) == [0.0, 1.0, 1.0] and sorted(hist[1]["x"]) == [0.5, 0.5, 1.0]
    topk = charts["Top-k agreement"]["data"]
    assert topk[1]["y"][:2] == [pytest.approx(1 / 3), 1.0]
    wins = charts["Fastest instance per shape"]["data"][0]
    assert dict(zip(wins["y"], wins["x"])) == {"kernel_a": 1, "kernel_b": 1, "kernel_c": 1}
    worst_model, worst_base = (d.value for d in at.dataframe)
    assert list(worst_model["efficiency"]) == [0.0, 1.0, 1.0]
    assert worst_model.iloc[0]["chosen"] == "kernel_c" and worst_model.iloc[0]["rank"] != 1
    assert list(worst_base["efficiency"]) == [0.5, 0.5, 1.0]
    assert list(worst_base["oracle_us"]) == [4.0, 15.0, 10.0]
    assert worst_base[["shape", "class"]].values.tolist() == [
        ["N32 C144 K144 G144 56x56 3x3 p1x1", "depthwise"],
        ["N8 C64 K64 G8 14x14 3x3 p1x1", "grouped"], ["N32 C64 K64 G1 56x56 3x3 p1x1", "dense"]]

    at.selectbox(key="eff_model").set_value("model v2").run()
    assert dict(metrics(at)[:6])["Mean"] == "0.950"
    evaluations = at.dataframe[0].value  # before the worst-shapes table
    assert evaluations["evaluation"].tolist() == [
        "networks never trained on (pooled leave-one-out)",
        "held-out shapes of training-coverage-fwd",
        "layers of h200-networks.parquet on NVIDIA H200, their geometries held out of training"]
    assert evaluations["problems"].tolist() == [166, 322, 186]
    assert evaluations["p10"].tolist() == [0.945, 0.894, 0.885]
    assert evaluations["top-2 efficiency"].tolist() == [0.992, 0.987, 0.970]
    assert evaluations["top-4 efficiency"].tolist()[:2] == [0.998, 0.996]
    judged = evaluations.iloc[2]
    assert (judged["under 0.70"], judged["over vendor (geomean)"]) == (4, 1.015)
    assert pd.isna(judged["top-4 efficiency"]) and evaluations["under 0.70"][:2].isna().all()
    classes = at.dataframe[1].value
    assert classes[["class", "problems", "mean", "under 0.70", "over vendor (geomean)"]
                   ].values.tolist() == [["dense", 140, 0.956, 4, 1.015],
                                         ["depthwise", 46, 0.956, 0, 1.4]]
    assert "v2: the judged recording's layers by class of shape" in " ".join(
        c.value for c in at.caption)
    assert "Stored held-out figures (40 problems)" in at.caption[0].value
    stored = figures(at)["Top-k efficiency (stored, held-out): the best of the model's k best "
                         "choices"]["data"][0]
    assert (stored["x"], stored["y"]) == ([1, 2, 4, 8], [0.95, 0.97, 0.99, 1.0])


def gn_class(problem) -> str:
    from kernels.registry import operator_spec

    return operator_spec(GN).shape_class(problem)


def test_efficiency_of_groupnorm(seeded):
    at = page("efficiency")
    at.selectbox(key="eff_operator").set_value(GN).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="eff_model").value == "model v1 (promoted)"
    assert at.selectbox(key="eff_compare").value == "best single instance (kernel_x)"
    shown = metrics(at)
    model, baseline = dict(shown[:6]), dict(shown[6:])
    assert model == {"Mean": "0.600", "Median": "0.800", "P10": "0.160", "Min": "0.000",
                     "Top-1": "33.3%", "Top-5": "66.7%"}
    assert baseline == {"Mean": "0.933", "Median": "1.000", "P10": "0.840", "Min": "0.800",
                        "Top-1": "66.7%", "Top-5": "100.0%"}
    wins = figures(at)["Fastest instance per shape"]["data"][0]
    assert dict(zip(wins["y"], wins["x"])) == {"kernel_x": 2, "kernel_y": 1}
    worst_model, worst_base = (d.value for d in at.dataframe)
    q1, q2, q3 = GN_PROBLEMS
    assert worst_model[["shape", "class", "chosen", "efficiency"]].values.tolist() == [
        ["N4 C96 7x7 G96 nhwc", gn_class(q3), "kernel_y", 0.0],
        ["N8 C64 56x56 G32 nhwc", gn_class(q1), "kernel_y", 0.8],
        ["N2 C320 64x64 G32 nchw", gn_class(q2), "kernel_y", 1.0]]
    assert list(worst_base["oracle_us"]) == [40.0, 6.0, 20.0]


def test_vs_vendor(seeded):
    at = page("vs_vendor")
    assert dict(metrics(at)) == {"Shapes": "6", "Geomean speed-up": "1.04x",
                                 "Ours faster": "50%", "Best": "2.00x", "Worst": "0.50x"}
    table = at.dataframe[0].value
    assert list(table["operator"]) == [GN, "conv2d_fwd", GN, "conv2d_fwd", GN, "conv2d_fwd"]
    assert list(table["speedup"]) == pytest.approx([0.5, 2 / 3, 1.0, 1.25, 1.5, 2.0])
    assert "groupnorm_bwd 0.91x" in " ".join(c.value for c in at.caption)
    at.multiselect(key="vs_operators").set_value(["conv2d_fwd"]).run()
    assert dict(metrics(at)) == {"Shapes": "3", "Geomean speed-up": "1.19x",
                                 "Ours faster": "67%", "Best": "2.00x", "Worst": "0.67x"}
    table = at.dataframe[0].value
    assert list(table["speedup"]) == pytest.approx([2 / 3, 1.25, 2.0])
    assert list(table["ours_us"]) == [15.0, 10.0, 4.0]
    assert list(table["vendor_us"]) == [10.0, 12.5, 8.0]
    assert list(table["our best instance"]) == ["kernel_b", "kernel_a", "kernel_c"]
    assert list(table["class"]) == ["grouped", "dense", "depthwise"]
    assert "resnet50" in table.iloc[1]["networks"] and table.iloc[0]["networks"] == ""
    bars = figures(at)["Speed-up over the vendor"]["data"][0]
    assert sum(bars["y"]) == 3
    assert at.multiselect(key="vs_classes").options == ["dense", "depthwise", "grouped"]
    at.multiselect(key="vs_networks").set_value(["mobilenet_v2"]).run()
    assert at.dataframe[0].value["shape"].tolist() == ["N32 C144 K144 G144 56x56 3x3 p1x1"]
    at.multiselect(key="vs_networks").set_value([]).run()
    at.multiselect(key="vs_classes").set_value(["dense"]).run()
    assert dict(metrics(at))["Geomean speed-up"] == "1.25x"


def test_vs_vendor_of_groupnorm(seeded):
    at = page("vs_vendor")
    at.multiselect(key="vs_operators").set_value([GN]).run()
    assert dict(metrics(at)) == {"Shapes": "3", "Geomean speed-up": "0.91x",
                                 "Ours faster": "33%", "Best": "1.50x", "Worst": "0.50x"}
    table = at.dataframe[0].value
    q1, q2, q3 = GN_PROBLEMS
    assert table[["shape", "networks", "class", "our best instance"]].values.tolist() == [
        ["N2 C320 64x64 G32 nchw", "sd15_unet", gn_class(q2), "kernel_y"],
        ["N4 C96 7x7 G96 nhwc", "", gn_class(q3), "kernel_x"],
        ["N8 C64 56x56 G32 nhwc", "resnet50_gn", gn_class(q1), "kernel_x"]]
    classes = sorted({gn_class(q) for q in GN_PROBLEMS})
    assert at.multiselect(key="vs_classes").options == classes and len(classes) == 2
    at.multiselect(key="vs_classes").set_value([gn_class(q3)]).run()
    assert at.dataframe[0].value["shape"].tolist() == ["N4 C96 7x7 G96 nhwc"]
    at.multiselect(key="vs_classes").set_value([]).run()
    assert list(table["ours_gbps"]) == pytest.approx(
        [p.min_bytes / t / 1e3 for p, t in zip(
            [GN_PROBLEMS[1], GN_PROBLEMS[2], GN_PROBLEMS[0]], (40.0, 6.0, 20.0))])
    options = at.multiselect(key="vs_networks").options
    assert "sd15_unet" in options and "resnet50" not in options  # this operator's networks
    at.multiselect(key="vs_networks").set_value(["resnet50_gn"]).run()
    assert at.dataframe[0].value["shape"].tolist() == ["N8 C64 56x56 G32 nhwc"]


def captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption]


def test_timings(seeded):
    at = page("timings")
    assert "19 matching rows." in captions(at)
    table = at.dataframe[0].value
    assert len(table) == 19 and set(table["status"]) == {"ok"}
    assert set(table.loc[table["operator"] == GN, "shape"]) == {p.label() for p in GN_PROBLEMS}
    assert set(table.loc[table["operator"] == GN, "class"]) == {gn_class(p) for p in GN_PROBLEMS}
    scatter = figures(at)["median_us against flops"]["data"]
    assert {t["name"] for t in scatter} == {"conv_direct", "conv_igemm", "vendor", "gn_onepass",
                                            "gn_twopass"}
    heat = figures(at)["Instance x shape: efficiency in shape"]["data"][0]
    assert len(heat["y"]) == 7 and len(heat["x"]) == 6 and max(map(max, heat["z"])) == 1.0
    assert any(x.startswith(f"{GN} N2 C320") for x in heat["x"])  # named with the operator
    assert "No operator selected: the shape fields of every operator" in " ".join(captions(at))
    features = at.selectbox(key="t_feature").options
    assert features[:3] == ["flops", "min_bytes", "flops_per_byte"]
    assert {"K", "stride_h", "G", "H"} <= set(features) and "layout" not in features
    assert at.multiselect(key="t_shape_G").options == ["1", "8", "32", "96", "144"]
    assert at.multiselect(key="t_shape_layout").options == ["nchw", "nhwc"]
    at.multiselect(key="t_shape_G").set_value([32]).run()
    assert "6 matching rows." in captions(at)  # the groupnorm shapes with 32 groups
    at.multiselect(key="t_shape_G").set_value([]).run()
    at.multiselect(key="t_families").set_value(["conv_direct"]).run()
    assert list(at.dataframe[0].value["median_us"]) == [40.0, 4.0]
    at.multiselect(key="t_families").set_value([]).run()
    at.selectbox(key="t_status").set_value("failed only").run()
    failed = at.dataframe[0].value
    assert failed[["kernel", "message"]].values.tolist() == [["kernel_c", "max error 0.5 > 0.02"]]
    assert [b.label for b in at.get("download_button")] == ["Download CSV", "Download parquet"]


def test_timings_of_one_operator(seeded):
    at = page("timings")
    at.selectbox(key="t_operator").set_value(GN).run()
    assert not at.exception, [e.value for e in at.exception]
    assert "8 matching rows." in captions(at) and "The shape fields of groupnorm_bwd." in \
        captions(at)
    assert at.selectbox(key="t_feature").options == ["flops", "min_bytes", "flops_per_byte",
                                                     "N", "C", "H", "W", "G"]
    assert "layout" in at.selectbox(key="t_color").options
    assert {m.key for m in at.multiselect} >= {f"t_shape_{f}" for f in
                                               ("N", "C", "H", "W", "G", "layout")}
    assert "t_shape_K" not in {m.key for m in at.multiselect}
    at.selectbox(key="t_feature").set_value("C").run()
    assert "median_us against C" in figures(at)
    at.multiselect(key="t_shape_layout").set_value(["nchw"]).run()
    table = at.dataframe[0].value
    assert set(table["shape"]) == {"N2 C320 64x64 G32 nchw"} and len(table) == 3
    at.selectbox(key="t_operator").set_value("conv2d_fwd").run()
    assert at.selectbox(key="t_feature").options[3:7] == ["N", "C", "K", "G"]
    assert "11 matching rows." in captions(at)


def test_timings_download_and_shape_filter(seeded):
    where = TimingSelection(shape=(("G", (1, 144)),))
    csv = pd.read_csv(io.BytesIO(data.download(seeded, where, "csv")))
    parquet = pd.read_parquet(io.BytesIO(data.download(seeded, where, "parquet")))
    assert len(csv) == len(parquet) == 8  # the ok rows of P1 and P3
    assert set(csv["G"]) == {1, 144}
    where = TimingSelection(operator=GN, shape=(("layout", ("nchw",)), ("N", (2, 8))))
    csv = pd.read_csv(io.BytesIO(data.download(seeded, where, "csv")))
    assert len(csv) == 3 and set(csv["C"]) == {320}


def test_models(seeded):
    at = page("models")
    assert dict(metrics(at))["Models"] == "3" and dict(metrics(at))["Promoted"] == "2"
    table = at.dataframe[0].value
    assert table[["operator", "version", "promoted", "kind", "mean", "problems"]
                 ].values.tolist() == [
        ["conv2d_fwd", 1, True, "ranker", pytest.approx(2 / 3), 3],
        ["conv2d_fwd", 2, False, "regressor", 0.95, 40], [GN, 1, True, "ranker", 0.6, 3]]
    eff = figures(at)["Efficiency vs oracle over time"]["data"]
    assert [t["name"] for t in eff] == ["mean", "median", "p10", "min"]
    assert eff[0]["y"] == [pytest.approx(2 / 3), 0.95]
    assert eff[0]["marker"]["symbol"] == ["star", "circle"]
    button = at.get("download_button")[0]
    assert button.label == f"Download model-conv2d_fwd-sm_90-bf16-v2.bundle ({len(BUNDLE)} bytes)"
    assert data.bundle(seeded, 1) == BUNDLE
    at.selectbox(key="models_group").set_value(f"{GN} · sm_90 · bf16").run()
    assert figures(at)["Efficiency vs oracle over time"]["data"][0]["y"] == [0.6]
    assert "This version has no exported bundle." in captions(at)


@pytest.mark.parametrize("screen", SCREENS)
def test_an_empty_database_says_what_to_do(screen, tmp_path, monkeypatch):
    monkeypatch.setenv("FARM_DB_URL", f"sqlite:///{tmp_path / 'none.db'}")
    at = page(screen)
    assert "Nothing to show yet: there is no database file" in at.info[0].value
    assert "farm submit jobs/examples/resnet50_fwd.yaml" in at.markdown[-1].value
    assert not (tmp_path / "none.db").exists()  # the dashboard never creates it
    url = f"sqlite:///{tmp_path / 'migrated.db'}"
    upgrade(make_engine(url))
    monkeypatch.setenv("FARM_DB_URL", url)
    at = page(screen)
    assert "no jobs, measurements or models yet" in at.info[0].value


def test_unusable_databases(tmp_path, monkeypatch):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(make_engine(url), "0001")
    monkeypatch.setenv("FARM_DB_URL", url)
    assert "Run `farm db upgrade`" in page("overview").warning[0].value
    monkeypatch.setenv("FARM_DB_URL", "postgresql://nobody@127.0.0.1:1/farm")
    assert "Cannot read the database" in page("models").error[0].value


def test_views_on_both_databases_and_never_write(db_url):
    seed(db_url)
    assert database_state(db_url).status == "ready"
    views = open_views(db_url)
    scope = views.scope("conv2d_fwd", "bf16", "sm_90")
    shapes = scope.per_shape()
    assert shapes[["best_kernel", "oracle_us", "vendor_us", "instances"]].values.tolist() == [
        ["kernel_a", 10.0, 12.5, 3], ["kernel_b", 15.0, 10.0, 2], ["kernel_c", 4.0, 8.0, 3]]
    assert list(shapes["problem_key"]) == [p.key for p in PROBLEMS]
    stats = scope.instance_stats().set_index("kernel")
    assert stats.loc["kernel_a", "efficiency_sum"] == pytest.approx(2.0)
    assert stats["wins"].to_dict() == {"kernel_a": 1, "kernel_b": 1, "kernel_c": 1}
    ranked = scope.timings_of(("kernel_a", "key-c"))
    assert sorted(ranked[["kernel", "rank"]].itertuples(index=False, name=None)) == [
        ("kernel_a", 1), ("kernel_a", 2), ("kernel_a", 2), ("kernel_c", 1), ("kernel_c", 3)]
    now = pd.Timestamp.now(tz="UTC")
    flow = views.throughput(now - pd.Timedelta(hours=1), 60)
    assert (flow["ok"].sum(), flow["failed"].sum()) == (19, 1)
    assert views.totals().statuses == {"ok": 19, "wrong_result": 1, "unsupported": 1}
    assert len(views.timings(TimingSelection(status="failed"), 10)) == 1
    shapes = views.scope(GN, "bf16", "sm_90").per_shape()
    assert shapes[["best_kernel", "oracle_us", "vendor_us", "instances", "layout"]
                  ].values.tolist() == [["kernel_x", 20.0, 30.0, 2, "nhwc"],
                                        ["kernel_y", 40.0, 20.0, 2, "nchw"],
                                        ["kernel_x", 6.0, 6.0, 1, "nhwc"]]
    assert list(views.problems(GN)["C"]) == [64, 320, 96]
    with pytest.raises(DBAPIError, match="(?i)read.?only"), views.engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs"))
    views.engine.dispose()


def test_farm_dashboard_serves_on_localhost(monkeypatch):
    from farm.cli import app

    from farm import serve

    calls = []
    monkeypatch.setattr(serve, "run_owned", lambda cmd, env: calls.append((cmd, env)) or 0)
    result = CliRunner().invoke(app, ["dashboard", "--db", "sqlite:////tmp/x.db"])
    assert result.exit_code == 0, result.output
    cmd, env = calls[0]
    assert cmd[cmd.index("--server.address") + 1] == "127.0.0.1"
    assert cmd[cmd.index("--server.port") + 1] == "8501"
    assert cmd[4].endswith("dashboard/app.py") and env["FARM_DB_URL"] == "sqlite:////tmp/x.db"
    CliRunner().invoke(app, ["dashboard", "--address", "0.0.0.0", "--port", "9000"])
    assert calls[1][0][calls[1][0].index("--server.address") + 1] == "0.0.0.0"


@pytest.mark.parametrize("screen,says", [
    ("overview", None), ("efficiency", "No measurements yet"), ("vs_vendor", "No measurements yet"),
    ("timings", "No measurement matches"), ("models", "No selection model has been trained")])
@pytest.mark.parametrize("problem", [PROBLEMS[0], GN_PROBLEMS[1]], ids=["conv", "groupnorm"])
def test_a_queued_job_and_nothing_measured(screen, says, problem, sqlite_url, monkeypatch):
    from farm.store import open_store

    open_store(sqlite_url).create_job("first", problem.op, "bf16", 0, {}, [problem])
    monkeypatch.setenv("FARM_DB_URL", sqlite_url)
    at = page(screen)
    if says:
        assert says in at.info[0].value
    else:
        assert dict(metrics(at))["Queued jobs"] == "1"
        assert at.dataframe[0].value["name"].tolist() == ["first"]
        assert "No measurements in the last hour." in [c.value for c in at.caption]


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('synthetic') / 'farm.db'}"
    seed_synthetic_scopes(url, ("conv2d_fwd", GN))
    return url


@pytest.mark.parametrize("operator", ["conv2d_fwd", GN])
def test_every_page_shows_each_operator_of_a_synthetic_farm(operator, synthetic, monkeypatch):
    """SYNTHETIC measurements of every candidate instance on shapes of the operator's network
    tables and generated ones: each page, scoped to the operator, reads its shapes through the
    operator's record (labels, classes, networks, fields)."""
    from farm.select.synthetic import synthetic_problems
    from kernels.registry import operator_spec

    monkeypatch.setenv("FARM_DB_URL", synthetic)
    problems = synthetic_problems(operator, "bf16", 4, 4)
    labels = {p.label() for p in problems}
    spec = operator_spec(operator)
    classes = {spec.shape_class(p) for p in problems}
    at = page("overview")
    assert dict(metrics(at))["Running jobs"] == "0"

    at = page("efficiency")
    at.selectbox(key="eff_operator").set_value(operator).run()
    assert not at.exception, [e.value for e in at.exception]
    worst = at.dataframe[0].value
    assert set(worst["shape"]) == labels and set(worst["class"]) == classes
    assert metrics(at)[0][0] == "Mean" and metrics(at)[0][1] != "n/a"

    at = page("vs_vendor")
    at.multiselect(key="vs_operators").set_value([operator]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert dict(metrics(at))["Shapes"] == str(len(problems))
    table = at.dataframe[0].value
    assert set(table["shape"]) == labels
    assert (table["networks"] != "").sum() >= 4  # the shapes drawn from the network tables
    assert set(at.multiselect(key="vs_classes").options) == classes

    at = page("timings")
    at.selectbox(key="t_operator").set_value(operator).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert set(table["shape"]) <= labels and set(table["operator"]) == {operator}
    numeric = [f for f in spec.shape_columns if f not in spec.problem_type.TEXT_FIELDS]
    assert at.selectbox(key="t_feature").options[3:] == numeric
    field = numeric[1]
    value = getattr(problems[0], field)
    at.multiselect(key=f"t_shape_{field}").set_value([value]).run()
    assert not at.exception, [e.value for e in at.exception]
    assert set(at.dataframe[0].value["shape"]) <= {p.label() for p in problems
                                                   if getattr(p, field) == value}

    at = page("models")
    assert "No selection model has been trained" in at.info[0].value


def test_scope_ranks_ties_and_leaves_the_vendor_out():
    from farm.store.scope import ScopeTimings

    timings = pd.DataFrame({"problem_id": [1, 1, 1, 1, 2], "environment_id": [7] * 5,
                            "kernel_id": [10, 11, 12, 13, 10],
                            "median_us": [5.0, 5.0, 9.0, 2.0, 3.0]})
    kernels = pd.DataFrame({"id": [10, 11, 12, 13], "name": ["b", "a", "c", "cudnn"],
                            "key": ["kb", "ka", "kc", "kv"],
                            "family": ["igemm", "igemm", "direct", "vendor"]})
    problems = pd.DataFrame({"problem_id": [1, 2], "problem_key": ["p1", "p2"]})
    environments = pd.DataFrame({"environment_id": [7], "gpu_name": ["gpu"], "replay_of": [None]})
    scope = ScopeTimings(timings, kernels, problems, environments)
    shapes = scope.per_shape()
    assert shapes[["problem_key", "best_kernel", "oracle_us", "instances"]].values.tolist() == [
        ["p1", "a", 5.0, 3], ["p2", "b", 3.0, 1]]
    assert shapes["vendor_us"].tolist()[0] == 2.0 and pd.isna(shapes["vendor_us"].tolist()[1])
    stats = scope.instance_stats().set_index("kernel")
    assert stats["wins"].to_dict() == {"a": 1, "b": 2, "c": 0}
    assert stats.loc["c", "efficiency_sum"] == pytest.approx(5 / 9)
    ranked = scope.timings_of(("c", "kb"))
    assert sorted(ranked[["problem_key", "kernel", "rank"]].itertuples(index=False, name=None)) \
        == [("p1", "b", 1), ("p1", "c", 3), ("p2", "b", 1)]
