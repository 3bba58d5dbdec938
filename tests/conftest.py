"""Shared fixtures: a fresh database per test on SQLite and on a real PostgreSQL server."""

from __future__ import annotations

import os

import pytest

from tests.pg_server import PgServer, _bindir


@pytest.fixture(scope="session")
def pg_server():
    if _bindir() is None:
        if os.environ.get("FARM_REQUIRE_POSTGRES"):
            pytest.fail("FARM_REQUIRE_POSTGRES is set but no PostgreSQL server binaries exist")
        pytest.skip("no PostgreSQL server binaries here (CI installs them)")
    server = PgServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def pg_url(pg_server) -> str:
    return pg_server.create_database()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'farm.db'}"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """Each test that takes this runs once on SQLite and once on PostgreSQL."""
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return request.getfixturevalue(name)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """One local Ray per test module (it takes seconds to start); yields its GCS address.
    Compile tasks and measure actors share one compile cache folder for the session."""
    import ray

    before = os.environ.get("FARM_CODE_CACHE")
    os.environ["FARM_CODE_CACHE"] = before or str(tmp_path_factory.getbasetemp() / "code-cache")
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()
    if before is None:
        del os.environ["FARM_CODE_CACHE"]
