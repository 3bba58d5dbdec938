"""The `farm` command end to end: upgrade, submit, status, cancel, query; errors and exit codes."""

import json
import subprocess
import sys

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from farm.cli import app
from farm.console import exits_on
from farm.store import open_store
from kernels.registry import operator_names
from tests.test_store import row, seed

runner = CliRunner()
EXAMPLE = "jobs/examples/resnet50_fwd.yaml"


def farm(*args, db):
    return runner.invoke(app, [*args], env={"FARM_DB_URL": db})


def test_upgrade_submit_status_cancel(db_url):
    assert farm("db", "upgrade", db=db_url).exit_code == 0
    result = farm("submit", EXAMPLE, db=db_url)
    assert result.exit_code == 0, result.output
    job = int(result.stdout.strip().splitlines()[-1])
    status = farm("status", str(job), db=db_url)
    assert status.exit_code == 0 and "resnet50-n32-fwd" in status.stdout
    assert "queued" in status.stdout
    assert "cancelled" in farm("cancel", str(job), db=db_url).stdout
    assert farm("status", "424242", db=db_url).exit_code == 1


def test_bad_spec_exits_2_and_writes_nothing(db_url, tmp_path):
    assert farm("db", "upgrade", db=db_url).exit_code == 0
    store = open_store(db_url)
    before = {t: store.count_rows(t) for t in ("jobs", "problems", "job_problems")}
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\noperator: conv2d_fwd\nproblems:\n  - inline:\n"
                   "    - {N: 1, C: 8, K: 8, G: 1, H: 8, W: 8, R: 3, S: 3}\n"
                   "    - {N: 1, C: 6, K: 8, G: 4, H: 8, W: 8, R: 3, S: 3}\n")
    result = farm("submit", str(bad), db=db_url)
    assert result.exit_code == 2
    assert "problems[0].inline[1]" in result.stderr and "C=6 is not divisible by G=4" in result.stderr
    assert {t: store.count_rows(t) for t in before} == before


def test_unreachable_database_is_named(tmp_path):
    url = f"postgresql+psycopg://farm:secret@/farm?host={tmp_path}&port=1"
    result = runner.invoke(app, ["status"], env={"FARM_DB_URL": url})
    assert result.exit_code == 1
    assert "cannot reach the database at postgresql+psycopg://farm:***@" in result.stderr
    assert "secret" not in result.stderr
    result = runner.invoke(app, ["status"], env={"FARM_DB_URL": "nonsense"})
    assert result.exit_code == 1 and "not a database URL" in result.stderr


def test_query_timings_formats(sqlite_url, tmp_path):
    store = open_store(sqlite_url)
    job, env, _, kernels = seed(store)
    store.record_measurements([row(kernels["k0"], 1, env, job, 10.0),
                               row(kernels["k1"], 2, env, job, 20.0)])
    result = farm("query", "timings", "--format", "json", "--shape", "G=64", db=sqlite_url)
    assert result.exit_code == 0, result.output
    assert [r["median_us"] for r in json.loads(result.stdout)] == [20.0]
    result = farm("query", "timings", "--format", "csv", "--family", "toy", db=sqlite_url)
    assert result.stdout.splitlines()[0].startswith("id,status,median_us")
    out = tmp_path / "t.parquet"
    assert farm("query", "timings", "--format", "parquet", "--output", str(out),
                db=sqlite_url).exit_code == 0
    assert len(pd.read_parquet(out)) == 2
    bad = farm("query", "timings", "--shape", "Z=1", db=sqlite_url)
    assert bad.exit_code == 2 and "FIELD=VALUE" in bad.output


def test_console_script_exit_status(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\noperator: conv2d_fwd\n")
    env = {"FARM_DB_URL": f"sqlite:///{tmp_path / 'f.db'}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "farm.cli", "submit", str(bad)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2
    assert f"{bad}: problems: Field required" in proc.stderr


def test_unknown_operators_and_targets_are_refused_in_one_line(sqlite_url):
    """Exit 2 and one line listing the known operators or targets; nothing is compiled."""
    for args in (["compile", "--op", "nonsense", "--target", "sm_90a"], ["train", "--op", "x"],
                 ["query", "timings", "--op", "nonsense"]):
        result = farm(*args, db=sqlite_url)
        assert result.exit_code == 2, (args, result.output)
        [line] = result.output.strip().splitlines()
        assert "unknown operator" in line
        assert line.endswith("known: " + ", ".join(operator_names()))
        assert "conv2d_fwd" in line and "groupnorm_bwd" in line
    result = farm("compile", "--op", "conv2d_fwd", "--target", "sm_00", db=sqlite_url)
    assert result.exit_code == 2
    [line] = result.output.strip().splitlines()
    assert line.startswith("error: unknown target 'sm_00'; valid: ")
    assert "sm_90a" in line and "gfx90a" in line and "instances" not in line


def test_expected_failures_exit_with_their_status_and_others_go_on(capsys):
    class Missing(LookupError):
        pass

    failures = (((Missing,), 1), ((ValueError,), 2))
    for raised, status in ((Missing("no such row"), 1), (ValueError("bad shape"), 2)):
        with pytest.raises(typer.Exit) as stop, exits_on(failures):
            raise raised
        assert stop.value.exit_code == status
        assert f"error: {raised}" in capsys.readouterr().err
    with pytest.raises(KeyError), exits_on(failures):  # a LookupError, but not one listed
        raise KeyError("unexpected")
    with exits_on(failures):  # nothing raised: nothing printed
        pass
    assert capsys.readouterr().err == ""
