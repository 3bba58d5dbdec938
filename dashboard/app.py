"""The farm's dashboard, one entry point: `farm dashboard` or `streamlit run dashboard/app.py`.
It reads FARM_DB_URL (else the embedded SQLite default) and never writes to it."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `streamlit run` puts only this folder on the path
    sys.path.insert(0, str(ROOT))

import streamlit as st

from dashboard import data

PAGES = [
    st.Page("screens/overview.py", title="Overview", icon=":material/monitoring:", default=True),
    st.Page("screens/efficiency.py", title="Efficiency vs oracle", icon=":material/target:"),
    st.Page("screens/vs_vendor.py", title="Ours vs vendor", icon=":material/compare_arrows:"),
    st.Page("screens/timings.py", title="Timings explorer", icon=":material/table_chart:"),
    st.Page("screens/models.py", title="Models", icon=":material/model_training:"),
]

st.set_page_config(page_title="Kernel farm", page_icon=":material/memory:", layout="wide")
page = st.navigation(PAGES)
data.sidebar()
page.run()
