"""The wheel ships the migrations: installed from it (not editable), `farm db upgrade` works
from any directory.

The wheel is built without build isolation (setuptools from the dev extra; no index needed)
from a copy of the source tree, so nothing is written into the checkout. It is installed with
--no-deps into a fresh virtualenv whose only way to the dependencies is a .pth line naming the
dev virtualenv's site-packages: a directory line only extends sys.path, the .pth files in that
directory are not run, so the dev environment's editable finder of kernel-farm stays off and
`farm` and `migrations` can only come from the wheel.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

from alembic.script import ScriptDirectory

REPO = Path(__file__).resolve().parents[1]
_SKIP = {".git", ".venv", "build", "dist", "__pycache__", ".pytest_cache", ".whl", ".farm"}


def _ignore(_dir, names):
    return [n for n in names if n in _SKIP or n.endswith((".egg-info", ".pyc", ".db"))]


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def test_wheel_installs_the_migrations_and_upgrades_a_database(tmp_path):
    src, dist, venv, work = (tmp_path / n for n in ("src", "dist", "venv", "work"))
    shutil.copytree(REPO, src, ignore=_ignore)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
          "--no-index", "-q", "-w", str(dist), str(src)])
    (wheel,) = dist.glob("kernel_farm-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    revisions = sorted(p.name for p in (REPO / "migrations" / "versions").glob("0*.py"))
    assert {"migrations/__init__.py", "migrations/env.py", "migrations/script.py.mako",
            "migrations/versions/__init__.py"} <= names
    assert {f"migrations/versions/{r}" for r in revisions} <= names
    assert not any(n.startswith("farm/store/migrations") for n in names)

    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
          "--no-index", "-q", str(wheel)])
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
                .stdout.strip())
    (site / "zz_farm_test_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["FARM_DB_URL"] = f"sqlite:///{tmp_path / 'x.db'}"
    where = _run([str(python), "-c", "import farm, migrations, farm.store.db as d; "
                  "print(farm.__file__); print(migrations.__file__); print(d.migrations_dir())"],
                 cwd=work, env=env).stdout.split()
    assert all(Path(p).is_relative_to(site) for p in where), where

    head = ScriptDirectory(str(REPO / "migrations")).get_current_head()
    for _ in range(2):  # the second run finds the database at head and changes nothing
        done = _run([str(venv / "bin" / "farm"), "db", "upgrade"], cwd=work, env=env)
        assert done.stdout.split()[-1] == head, done.stdout
        with sqlite3.connect(tmp_path / "x.db") as conn:
            assert conn.execute("SELECT version_num FROM alembic_version").fetchall() == [(head,)]
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master "
                                                  "WHERE type = 'table'")}
        assert {"measurements", "jobs", "environments", "workers"} <= tables
    assert not (work / "migrations").exists() and list(work.iterdir()) == []
