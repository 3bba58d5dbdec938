"""An operator shipped from another package: tests/data/farm_plugin_example (rowsum_fwd, with
the families rowsum_thread and rowsum_lanes and its own kernel source), installed into a folder
on PYTHONPATH, is found through its entry points by every `farm` command: listed, compiled,
swept (a replay of a recording of its pairs on a local Ray) and queried by its shape fields.
Without the package on the path the farm does not know it. Each command runs in a process of
its own, so this test session's registry never sees the plugin."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PLUGIN = REPO / "tests" / "data" / "farm_plugin_example"
OP = "rowsum_fwd"
FAMILIES = ("rowsum_thread", "rowsum_lanes")
BF16_INSTANCES = 2 * 4 + 2 * 3 * 4  # rowsum_thread: threads x vec; rowsum_lanes: x lanes
SPEC = {"name": "rowsum-plugin", "operator": OP, "dtype": "bf16",
        "problems": [{"generate": {"rows": [64, 4096], "cols": [250, 256, 4096]}}]}
# The pairs of SPEC that the families' rules allow (cols=250: no vec=4 or vec=8 loads) and the
# vendor's, as a GPU would have measured them: a SYNTHETIC recording.
RECORD = """
import sys
from pathlib import Path
from farm.cluster.pairs import select_instances
from farm.specs import load_spec
from kernels.registry import get_family
from tests.data.synthetic_recording import build

resolved = load_spec(Path(sys.argv[1]))
instances = select_instances(resolved.spec)
pairs = [(p, i) for p in resolved.problems for i in instances
         if not get_family(i.family).compiled or get_family(i.family).applicable(i, p) is None]
build(pairs, Path(sys.argv[2]))
print(len(resolved.problems) * len(instances))
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The plugin installed into work/site (built from a copy: pip builds in the source
    folder) and a compile cache of this module's own."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "source"
    shutil.copytree(PLUGIN, source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                           "--no-build-isolation", "--no-index", "-q", "--target",
                           str(work / "site"), str(source)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return work


def run(work: Path, *args: str, plugin: bool = True, ok: bool = True,
        timeout: int = 240) -> subprocess.CompletedProcess:
    """`farm ARGS` (or `python ARGS` where args[0] is "-c") in a fresh process, with the
    plugin's folder first on PYTHONPATH when `plugin`; never joins a running Ray."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "FARM_RAY_ADDRESS", "FARM_DB_URL")}
    env["FARM_CODE_CACHE"] = str(work / "code")
    if plugin:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(work / "site"), env.get("PYTHONPATH")) if p)
    command = list(args) if args[0] == "-c" else ["-m", "farm.cli", *args]
    done = subprocess.run([sys.executable, *command], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=timeout)
    if ok:
        assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n" \
                                     f"{done.stderr}"
    return done


def test_the_plugin_is_one_package_of_its_own_files():
    files = sorted(p.relative_to(PLUGIN).as_posix() for p in PLUGIN.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert files == ["farm_plugin_example/__init__.py", "farm_plugin_example/families.py",
                     "farm_plugin_example/operator.py", "farm_plugin_example/problem.py",
                     "farm_plugin_example/rowsum.cu", "pyproject.toml"]


def test_farm_operators_lists_the_plugin_only_where_it_is_installed(work):
    listed = run(work, "operators").stdout
    row = next(line for line in listed.splitlines() if OP in line)
    assert "rows cols" in row and all(f in row for f in FAMILIES), row
    assert "groupnorm_bwd" in listed  # the farm's own operators stay
    without = run(work, "operators", plugin=False).stdout
    assert "groupnorm_bwd" in without and OP not in without
    refused = run(work, "compile", "--op", OP, "--target", "sm_90", plugin=False, ok=False)
    assert refused.returncode == 2 and f"unknown operator {OP!r}" in refused.stderr


def test_farm_compile_compiles_every_instance_of_the_plugin(work):
    try:
        from cuda.bindings import nvrtc  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"NVRTC is not importable here (cuda.bindings.nvrtc, the `cuda` extra): {exc}")
    result = run(work, "compile", "--op", OP, "--target", "sm_90", "--dtype", "bf16")
    summary = (rf"{OP} for sm_90: {BF16_INSTANCES} instances\b.*, {BF16_INSTANCES} compiled\b"
               r".*, 0 failed")
    assert re.search(summary, result.stdout), result.stdout + result.stderr


def test_a_replayed_sweep_of_the_plugin_records_every_pair(work, tmp_path):
    spec, rec, db = tmp_path / "rowsum.yaml", tmp_path / "rowsum.parquet", tmp_path / "farm.db"
    spec.write_text(yaml.safe_dump(SPEC))
    url = f"sqlite:///{db}"
    total = int(run(work, "-c", RECORD, str(spec), str(rec)).stdout)
    assert total == 6 * (BF16_INSTANCES + 1)  # 6 shapes x (the families' instances + vendor)

    assert run(work, "submit", str(spec), "--db", url).stdout.strip() == "1"
    result = run(work, "run", "--until-idle", "--quiet", "--no-retrain", "--replay", str(rec),
                 "--db", url)
    assert f"job 1 rowsum-plugin: done, {total} ok or unsupported, 0 failed, 0 cached of " \
           f"{total}" in result.stdout, result.stdout + result.stderr

    rows = json.loads(run(work, "query", "timings", "--op", OP, "--status", "any", "--db", url,
                          "--format", "json").stdout)
    assert len(rows) == total
    assert {r["family"] for r in rows} == {*FAMILIES, "vendor"}
    assert {r["gpu_name"] for r in rows} == {"replay of SYNTHETIC test GPU (not measured)"}
    for r in rows:
        vec = int(r["kernel"].rpartition("_vec")[2]) if r["family"] != "vendor" else 1
        if r["cols"] % vec:  # a shape the family's rules refuse never reaches a GPU
            assert r["status"] == "unsupported" and "not a multiple of vec" in r["message"], r
        else:
            assert r["status"] == "ok" and r["median_us"] > 0, r
    unsupported = sum(r["status"] == "unsupported" for r in rows)
    assert unsupported == 2 * (2 * 2 + 2 * 3 * 2)  # cols=250 shapes x instances with vec 4, 8

    wide = json.loads(run(work, "query", "timings", "--op", OP, "--shape", "cols=4096",
                          "--db", url, "--format", "json").stdout)
    assert len(wide) == 2 * (BF16_INSTANCES + 1)  # rows 64 and 4096, every instance ok
    assert {(r["rows"], r["cols"]) for r in wide} == {(64, 4096), (4096, 4096)}
    assert {r["status"] for r in wide} == {"ok"}
