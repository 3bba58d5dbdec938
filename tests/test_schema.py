"""Migrations and models describe the same schema, on SQLite and on PostgreSQL."""

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from farm.store import db
from farm.store.models import Base


def test_upgrade_from_empty_gives_the_models_schema(db_url):
    engine = db.make_engine(db_url)
    assert db.current_revision(engine) is None
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision(engine)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}),
                                Base.metadata)
    assert diff == []
    tables = set(inspect(engine).get_table_names()) - {"alembic_version"}
    assert tables == set(Base.metadata.tables)


def test_downgrade_to_base_removes_every_table(db_url):
    engine = db.make_engine(db_url)
    db.upgrade(engine)
    from alembic import command
    command.downgrade(db.alembic_config(engine), "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}


def test_upgrading_a_database_with_measurements_keeps_them(db_url):
    """Migrations that rebuild a table (SQLite batch mode) leave referencing rows intact."""
    from farm.store import Queries, TimingFilter
    from tests.test_store import row, seed

    engine = db.make_engine(db_url)
    db.upgrade(engine, "0003")
    store = Queries(engine)
    job, env, _, kernels = seed(store)
    problem = store.job_problem_ids(job)[0][0]
    store.record_measurements([row(kernels["k0"], problem, env, job, 12.0)])
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision(engine)
    assert list(store.timings(TimingFilter(job_id=job))["median_us"]) == [12.0]
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
