"""Migrations and models describe the same schema, on SQLite and on PostgreSQL."""

import datetime as dt

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


def _fill_revision_0005(engine) -> list:
    """Rows of every kind in a database at revision 0005 (problems one column per convolution
    field), written through the tables as they were then; returns the problems."""
    from sqlalchemy import MetaData, insert

    from kernels.conv.problem import ConvProblem

    tables = MetaData()
    tables.reflect(engine)
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    problems = [ConvProblem("conv2d_fwd", 8, 64, 64, 1, 14, 14, 3, 3, pad_h=1, pad_w=1),
                ConvProblem("conv2d_fwd", 1, 96, 96, 96, 28, 28, 5, 5, 2, 2, 2, 2),
                ConvProblem("conv2d_bwd_weight", 32, 256, 512, 32, 7, 7, 1, 1, dil_h=1)]
    columns = {f: f.lower() if len(f) == 1 else f for f in problems[0].FIELDS}
    with engine.begin() as conn:
        conn.execute(insert(tables.tables["environments"]), [dict(
            id=1, fingerprint="f" * 16, gpu_name="H100", arch="sm_90", sm_count=132, driver="1",
            compiler="c", runtime="r", farm_version="0", details={}, created_at=now)])
        conn.execute(insert(tables.tables["kernels"]), [dict(
            id=1, key="k" * 32, family="conv_naive", operator="conv2d_fwd", name="naive",
            config={"block": 128}, source_hash="s", created_at=now)])
        conn.execute(insert(tables.tables["problems"]), [dict(
            id=10 + i, key=p.key, operator=p.op, dtype=p.dtype, layout=p.layout, flops=p.flops,
            min_bytes=p.min_bytes, **{c: getattr(p, f) for f, c in columns.items()})
            for i, p in enumerate(problems)])
        conn.execute(insert(tables.tables["jobs"]), [dict(
            id=1, name="old", operator="conv2d_fwd", dtype="bf16", spec={}, status="done",
            priority=0, total_pairs=3, done_pairs=3, failed_pairs=0, cached_pairs=0,
            created_at=now, updated_at=now)])
        conn.execute(insert(tables.tables["job_problems"]), [dict(
            job_id=1, problem_id=10 + i, position=i) for i in range(len(problems))])
        conn.execute(insert(tables.tables["measurements"]), [dict(
            id=100 + i, kernel_id=1, problem_id=10 + i, environment_id=1, job_id=1, status="ok",
            median_us=10.0 + i, samples=20, policy={}, telemetry={}, created_at=now)
            for i in range(len(problems))])
    return problems


def test_upgrading_a_database_of_revision_0005_keeps_every_row_and_key(db_url):
    """Problems stored one column per field become JSON shapes in place: ids, keys and every
    referencing row stay, and the records read back are the problems that were written."""
    from sqlalchemy import text

    from farm.store import Queries, TimingFilter

    engine = db.make_engine(db_url)
    db.upgrade(engine, "0005")
    problems = _fill_revision_0005(engine)
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision(engine)
    store = Queries(engine)
    read = store.job_problem_ids(1)
    assert [i for i, _ in read] == [10, 11, 12]
    assert [p for _, p in read] == problems  # the same records, keys recomputed equal
    with engine.connect() as conn:
        keys = [k for (k,) in conn.execute(text("SELECT key FROM problems ORDER BY id"))]
        assert conn.execute(text("SELECT count(*) FROM measurements")).scalar() == 3
    assert keys == [p.key for p in problems]
    timings = store.timings(TimingFilter(job_id=1))
    assert list(timings["median_us"]) == [10.0, 11.0, 12.0]
    assert list(timings["G"]) == [1, 96, 32] and list(timings["pad_h"]) == [1, 2, 0]
    only = store.timings(TimingFilter(shape=(("G", 96), ("stride_h", 2))))
    assert list(only["median_us"]) == [11.0]
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
            assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    from alembic import command  # and back: the convolution columns return with their values
    command.downgrade(db.alembic_config(engine), "0006")
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT g, pad_h, dil_h FROM problems ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [(1, 1, 1), (96, 2, 1), (32, 0, 1)]
