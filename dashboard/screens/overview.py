"""Overview: the job queue, the workers, measurements per minute and failures. Refreshes on its
own while jobs are queued or running."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, data
from farm.store.models import FAILED_STATES

REFRESH_S = 5
WINDOWS = {"last hour": (1, 60), "last 6 hours": (6, 300), "last 24 hours": (24, 900),
           "last 7 days": (168, 3600)}
QUEUE_COLUMNS = ["id", "name", "operator", "dtype", "status", "priority", "progress", "done_pairs",
                 "failed_pairs", "cached_pairs", "total_pairs", "problems", "eta", "started_at",
                 "claimed_by", "error"]


def _active(totals) -> bool:
    return bool(totals.jobs.get("running", 0) or totals.jobs.get("queued", 0))


def _jobs(db: str, now: pd.Timestamp) -> None:
    st.subheader("Job queue")
    queue = analysis.with_progress(data.job_queue(db), now)
    queue["progress"] = queue["progress"] * 100
    queue["eta"] = queue["eta_s"].map(analysis.eta_text)
    order = queue["status"].map({"running": 0, "queued": 1}).fillna(2)
    queue = queue.assign(_order=order, _prio=-queue["priority"]).sort_values(
        ["_order", "_prio", "id"])
    st.dataframe(queue[QUEUE_COLUMNS], hide_index=True, key="jobs", column_config={
        "progress": st.column_config.ProgressColumn("progress", min_value=0, max_value=100,
                                                    format="%.0f%%"),
        "done_pairs": "done", "failed_pairs": "failed", "cached_pairs": "cached",
        "total_pairs": "total", "eta": "ETA", "started_at": "started"})


def _workers(db: str, now: pd.Timestamp) -> None:
    st.subheader("GPU workers")
    workers = data.workers(db)
    live = workers[workers["state"] != "stopped"] if len(workers) else workers
    if live.empty:
        st.caption("No worker is running: `farm run` starts a coordinator with one measure "
                   "process per GPU (or replay workers on a machine without one).")
        return
    seen = (now - pd.to_datetime(live["updated_at"], utc=True)).dt.total_seconds().round()
    st.dataframe(live.assign(seen_s_ago=seen)[
        ["name", "node", "gpu_name", "arch", "state", "job_id", "measuring", "pairs_done",
         "restarts", "seen_s_ago"]], hide_index=True, key="workers")


def _throughput(db: str) -> None:
    st.subheader("Measurements per minute")
    window = st.selectbox("Window", list(WINDOWS), key="window")
    hours, bucket_s = WINDOWS[window]
    frame = data.throughput(db, hours, bucket_s)
    if frame.empty:
        st.caption(f"No measurements in the {window}.")
        return
    total = int(frame["ok"].sum() + frame["failed"].sum())
    st.caption(f"{total:,} measurements in the {window}, "
               f"{int(frame['failed'].sum()):,} of them failed.")
    st.plotly_chart(charts.throughput(frame, bucket_s), key="throughput_chart")


def _failures(db: str, totals) -> None:
    st.subheader("Failures")
    failed = {s: n for s, n in sorted(totals.statuses.items()) if s in FAILED_STATES}
    if not failed:
        st.caption("No failed measurements.")
        return
    left, right = st.columns([1, 2])
    left.plotly_chart(charts.bars(list(failed), list(failed.values()), "By status", "status",
                                  "measurements"), key="failures_chart")
    right.dataframe(data.failures(db), hide_index=True, key="failures", height=340)


def _live(db: str, was_active: bool) -> None:
    totals = data.totals(db)
    if _active(totals) != was_active:
        st.rerun()  # jobs started or ended: turn the refresh on or off
    now = pd.Timestamp.now(tz="UTC")
    running, queued = totals.jobs.get("running", 0), totals.jobs.get("queued", 0)
    cols = st.columns(6)
    cols[0].metric("Running jobs", running)
    cols[1].metric("Queued jobs", queued)
    cols[2].metric("Measurements", f"{totals.measurements:,}")
    share = totals.failed / totals.measurements if totals.measurements else 0.0
    cols[3].metric("Failed", f"{totals.failed:,} ({share:.1%})",
                   help="Compile and launch errors, timeouts and wrong results; a shape that a "
                        "family's rules refuse (unsupported) is settled, not failed")
    cols[4].metric("Active workers", totals.workers_active)
    cols[5].metric("Models", totals.models)
    _jobs(db, now)
    _workers(db, now)
    _throughput(db)
    _failures(db, totals)
    note = (f"refreshes every {REFRESH_S} s while jobs run" if was_active
            else "no job is queued or running: reload to refresh")
    st.caption(f"Updated {now:%H:%M:%S} UTC; {note}.")


st.title("Overview")
db_url = data.ready()
active = _active(data.totals(db_url))
st.fragment(run_every=REFRESH_S if active else None)(_live)(db_url, active)
