"""The dashboard's data: cached calls into farm.store.views (short time-to-live), and the
guard that shows what to do next when the database has nothing to show yet."""

from __future__ import annotations

import datetime as dt
import io

import pandas as pd
import streamlit as st

from dashboard import shapes
from farm.store import default_url, describe
from farm.store.readonly import DbState, database_state, open_views
from farm.store.views import Choices, ScopeTimings, TimingSelection, Totals, Views

LIVE_TTL = 5  # seconds: the overview, which refreshes while jobs run
TTL = 30  # seconds: results pages
DOWNLOAD_LIMIT = 1_000_000  # rows in a download of the timings explorer
NEXT_STEPS = """\
```bash
farm db upgrade                                  # create the tables (SQLite: done on first use)
farm submit jobs/examples/resnet50_fwd.yaml      # queue a sweep
farm run --until-idle                            # measure it (this machine's GPUs, or replay)
farm demo                                        # or: the standard sweep end to end, here
```"""


def url() -> str:
    return default_url()


@st.cache_resource(show_spinner=False)
def views(db_url: str) -> Views:
    return open_views(db_url)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def state(db_url: str) -> DbState:
    return database_state(db_url)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def totals(db_url: str) -> Totals:
    return views(db_url).totals()


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def job_queue(db_url: str) -> pd.DataFrame:
    return views(db_url).job_queue()


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def workers(db_url: str) -> pd.DataFrame:
    return views(db_url).workers()


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def throughput(db_url: str, hours: float, bucket_s: int) -> pd.DataFrame:
    since = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=hours)
    return views(db_url).throughput(since.replace(second=0, microsecond=0), bucket_s)


@st.cache_data(ttl=LIVE_TTL, show_spinner=False)
def failures(db_url: str) -> pd.DataFrame:
    return views(db_url).failures()


@st.cache_data(ttl=TTL, show_spinner=False)
def choices(db_url: str) -> Choices:
    return views(db_url).choices()


@st.cache_data(ttl=TTL, show_spinner=False)
def problems(db_url: str, operator: str | None = None) -> pd.DataFrame:
    return views(db_url).problems(operator)


@st.cache_data(ttl=TTL, show_spinner=False)
def kernels(db_url: str, operator: str | None = None) -> pd.DataFrame:
    return views(db_url).kernels(operator)


@st.cache_data(ttl=TTL, show_spinner=False)
def scope(db_url: str, operator: str, dtype: str, arch: str) -> ScopeTimings:
    """One scan of the scope's ok timings; the three calls below derive from it."""
    return views(db_url).scope(operator, dtype, arch)


@st.cache_data(ttl=TTL, show_spinner=False)
def per_shape(db_url: str, operator: str, dtype: str, arch: str) -> pd.DataFrame:
    """The scope's shapes (see ScopeTimings.per_shape) with their label and class."""
    return shapes.describe(scope(db_url, operator, dtype, arch).per_shape(), operator, dtype)


@st.cache_data(ttl=TTL, show_spinner=False)
def instance_stats(db_url: str, operator: str, dtype: str, arch: str) -> pd.DataFrame:
    return scope(db_url, operator, dtype, arch).instance_stats()


@st.cache_data(ttl=TTL, show_spinner=False)
def timings_of(db_url: str, operator: str, dtype: str, arch: str,
               kernels: tuple[str, ...]) -> pd.DataFrame:
    return scope(db_url, operator, dtype, arch).timings_of(kernels)


@st.cache_data(ttl=TTL, show_spinner=False)
def models(db_url: str) -> pd.DataFrame:
    return views(db_url).models()


@st.cache_data(ttl=TTL, show_spinner=False)
def timings(db_url: str, where: TimingSelection, limit: int) -> pd.DataFrame:
    """The selected timings with their shape's label and class."""
    return shapes.describe(views(db_url).timings(where, limit))


def bundle(db_url: str, artifact_id: int) -> bytes:
    """Not cached: fetched when the download is clicked."""
    return views(db_url).bundle(artifact_id)[1]


def download(db_url: str, where: TimingSelection, kind: str) -> bytes:
    """The selection as CSV or parquet bytes (not cached: built when clicked)."""
    frame = views(db_url).timings(where, DOWNLOAD_LIMIT)
    if kind == "csv":
        return frame.to_csv(index=False).encode()
    buffer = io.BytesIO()
    frame.to_parquet(buffer, index=False)
    return buffer.getvalue()


def ready() -> str:
    """The database URL when there is something to show; otherwise explain and stop."""
    db_url = url()
    found = state(db_url)
    if found.status == "unreachable":
        st.error(f"Cannot read the database: {found.detail}")
        st.markdown("Set `FARM_DB_URL` to the farm's database (or pass `--db` to "
                    "`farm dashboard`) and reload.")
        st.stop()
    if found.status == "behind":
        st.warning(f"{found.detail}. Run `farm db upgrade`, then reload.")
        st.stop()
    if found.status in ("missing", "empty") or totals(db_url).empty:
        why = found.detail if found.status != "ready" else "no jobs, measurements or models yet"
        st.info(f"Nothing to show yet: {why} ({describe(db_url)}).")
        st.markdown("**What to do next:** queue a sweep and measure it.")
        st.markdown(NEXT_STEPS)
        st.caption("This page refreshes its data every few seconds: reload it once jobs run.")
        st.stop()
    return db_url


def sidebar() -> None:
    st.sidebar.caption(f"Database: `{describe(url())}`  \nRead-only; cached for {TTL} s "
                       f"({LIVE_TTL} s on the overview).")
