"""`farm import-recording` writes in bulk what the row-by-row import wrote: the same rows of every
table (timestamps aside), on SQLite and PostgreSQL; importing again replaces the rows and keeps
the earlier ones in measurement_history; a job whose rows cannot be written leaves nothing."""

from __future__ import annotations

import dataclasses
import math
import re

import pandas as pd
import pytest
from sqlalchemy import select

from farm.recording import (RECORDINGS_DIR, TIMING_FIELDS, _loads, cell, import_recording,
                            read_recording, write_recording)
from farm.store import FAILED_STATES, ImportedJob, Queries, open_store
from farm.store.models import Kernel, Measurement

TIMESTAMPS = {"created_at", "updated_at", "started_at", "finished_at", "archived_at"}
TABLES = ("environments", "kernels", "problems", "jobs", "job_problems", "measurements",
          "measurement_history")


class RowByRow(Queries):
    """The store writing an imported job as before the bulk path: the job queued, each
    recording row converted on its own and added as an ORM object, then the job done."""

    def __init__(self, engine, frame: pd.DataFrame) -> None:
        super().__init__(engine)
        self.frame = frame

    def import_job(self, job: ImportedJob) -> int:
        job_id = self.create_job(job.name, job.operator, job.dtype, 0, job.spec, job.problems)
        problems = {p.key: i for i, p in self.job_problem_ids(job_id)}
        with self.session() as session:
            kernels = dict(session.execute(select(Kernel.key, Kernel.id)).all())
        part = self.frame[(self.frame["operator"] == job.operator)
                          & (self.frame["dtype"] == job.dtype)]
        env = job.columns["environment_id"][0]
        rows = [{"kernel_id": kernels[r["kernel_key"]], "problem_id": problems[r["problem_key"]],
                 "environment_id": env, "job_id": job_id, "status": r["status"],
                 "message": cell(r["message"]), "policy": _loads(r["policy"]),
                 "telemetry": _loads(r["telemetry"]),
                 **{f: cell(r[f]) for f in TIMING_FIELDS if f != "samples"},
                 "samples": int(cell(r["samples"]) or 0)} for r in part.to_dict("records")]
        with self.session.begin() as session:
            session.add_all(Measurement(**row) for row in rows)
        failed = sum(r["status"] in FAILED_STATES for r in rows)
        self.set_job_state(job_id, "done", total_pairs=len(rows),
                           done_pairs=len(rows) - failed, failed_pairs=failed)
        return job_id


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def urls(request, tmp_path) -> tuple[str, str]:
    """Two fresh databases of one kind: the bulk import's and the row-by-row reference's."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'bulk.db'}", f"sqlite:///{tmp_path / 'reference.db'}"
    server = request.getfixturevalue("pg_server")
    return server.create_database(), server.create_database()


@pytest.fixture(scope="module")
def recording_file(tmp_path_factory):
    """Every 400th row of the shipped H100 recording (three operators), with the cells an
    import must read with care: missing messages, timings and samples, empty JSON, unicode."""
    source = read_recording(RECORDINGS_DIR / "h100-standard.parquet")
    frame = source.frame.iloc[::400].reset_index(drop=True)
    frame.loc[0, "message"] = None
    frame.loc[1, "message"] = "naïve ✓: 16-byte loads"
    frame.loc[2, "policy"] = ""
    frame.loc[3, "telemetry"] = None
    frame.loc[4, "median_us"] = math.nan
    frame["samples"] = frame["samples"].astype("float64")
    frame.loc[5, "samples"] = math.nan
    out = tmp_path_factory.mktemp("recording") / "slice.parquet"
    return write_recording(frame, source.environment, list(source.jobs), out)


def table_rows(store: Queries, table: str, keep_times: bool = False) -> list[dict]:
    """A table's rows as the driver reads them (JSON and times as text on SQLite), column ->
    (type, value); a timestamp's value is only its format unless `keep_times`."""
    with store.engine.connect() as conn:
        result = conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY 1, 2")
        names = list(result.keys())
        return [{n: (type(v).__name__, v if keep_times or n not in TIMESTAMPS else _format(v))
                 for n, v in zip(names, row)} for row in result]


def _format(value: object) -> object:
    """A stored time's format: its text with every digit 0 (None stays None)."""
    return re.sub(r"[0-9]", "0", value) if isinstance(value, str) else value is None


def test_the_bulk_import_writes_what_the_row_by_row_import_wrote(urls, recording_file):
    bulk = open_store(urls[0], migrate=True)
    written = import_recording(bulk, recording_file)
    recording = read_recording(recording_file)
    reference = RowByRow(open_store(urls[1], migrate=True).engine, recording.frame)
    assert import_recording(reference, recording) == written
    assert len(written) == 3 and sum(written.values()) == len(recording.frame)
    for table in TABLES:
        assert table_rows(bulk, table) == table_rows(reference, table), table
    assert bulk.count_rows("measurements") == len(recording.frame)


def test_importing_again_replaces_the_rows_and_archives_the_earlier_ones(db_url, recording_file):
    store = open_store(db_url, migrate=True)
    import_recording(store, recording_file)
    first = table_rows(store, "measurements", keep_times=True)
    first_jobs = {j.id for j in store.jobs()}
    import_recording(store, recording_file)
    again = table_rows(store, "measurements", keep_times=True)
    history = table_rows(store, "measurement_history", keep_times=True)
    assert len(again) == len(history) == len(first)
    jobs = store.jobs()
    assert len(jobs) == 2 * len(first_jobs) and {j.status for j in jobs} == {"done"}
    new_jobs = {j.id for j in jobs} - first_jobs
    history.sort(key=lambda row: row["measurement_id"])
    for old, new, archived in zip(first, again, history):
        assert new["id"] == old["id"] and new["job_id"][1] in new_jobs
        assert _without(new, "job_id", "created_at") == _without(old, "job_id", "created_at")
        assert archived["measurement_id"] == old["id"]
        assert {k: archived[k] for k in old if k != "id"} == _without(old, "id")


def _without(row: dict, *names: str) -> dict:
    return {k: v for k, v in row.items() if k not in names}


def test_a_job_whose_rows_cannot_be_written_leaves_nothing(sqlite_url, recording_file):
    recording = read_recording(recording_file)
    frame = recording.frame.copy()
    last = frame.groupby(["operator", "dtype"], sort=False).ngroup() == 2
    frame.loc[frame.index[last][-1], "status"] = "fine"  # not a measurement state
    store = open_store(sqlite_url)
    with pytest.raises(ValueError, match="unknown measurement status 'fine'"):
        import_recording(store, dataclasses.replace(recording, frame=frame))
    jobs = store.jobs()
    assert len(jobs) == 2 and {j.status for j in jobs} == {"done"}
    assert store.count_rows("measurements") == (~last).sum() == sum(j.total_pairs for j in jobs)
