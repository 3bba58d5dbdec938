"""Timings explorer: filter the measurements, plot latency or throughput against a shape feature,
compare instances across shapes in a heat-map, download the selection."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, charts, data
from farm.problems import CONV_FIELDS
from farm.store.views import TimingSelection

ROW_LIMIT = 20_000  # rows fetched for the page
POINTS = 5_000  # points drawn in the scatter plot
HEAT_ROWS, HEAT_COLUMNS = 40, 60
ANY = "(any)"
METRICS = {"latency (median µs)": "median_us", "TFLOP/s": "tflops", "GB/s": "gbps"}
FEATURES = list(CONV_FIELDS) + ["flops", "min_bytes", "C_per_group", "K_per_group"]
TABLE = ["family", "kernel", "operator", "dtype", "shape", "median_us", "min_us", "spread",
         "tflops", "gbps", "status", "message", "gpu_name", "arch", "job_id", "created_at"]


def _filters(db_url: str, found) -> TimingSelection:
    row = st.columns(4)
    operator = row[0].selectbox("Operator", [ANY, *found.operators], key="t_operator")
    dtype = row[1].selectbox("Dtype", [ANY, *found.dtypes], key="t_dtype")
    archs = row[2].multiselect("Architecture", found.archs, key="t_archs")
    devices = row[3].multiselect("Device", found.gpu_names, key="t_devices")
    row = st.columns(4)
    families = row[0].multiselect("Family", found.families, key="t_families")
    kernels = data.kernels(db_url, None if operator == ANY else operator)
    if families:
        kernels = kernels[kernels["family"].isin(families)]
    instances = row[1].multiselect("Instance", sorted(kernels["name"].unique()), key="t_kernels")
    status = row[2].selectbox("Status", ["ok", ANY, "failed only"], key="t_status")
    replay = row[3].checkbox("Include replayed rows", value=True, key="t_replay")
    problems = data.problems(db_url, None if operator == ANY else operator)
    shape = []
    with st.expander("Shape fields"):
        cols = st.columns(7)
        for i, field in enumerate(CONV_FIELDS):
            values = sorted(int(v) for v in problems[field].unique()) if len(problems) else []
            picked = cols[i % 7].multiselect(field, values, key=f"t_shape_{field}")
            if picked:
                shape.append((field, tuple(picked)))
    return TimingSelection(operator=None if operator == ANY else operator,
                           dtype=None if dtype == ANY else dtype, archs=tuple(archs),
                           gpu_names=tuple(devices), families=tuple(families),
                           kernels=tuple(instances),
                           status={"ok": "ok", ANY: None, "failed only": "failed"}[status],
                           shape=tuple(shape), include_replay=replay)


st.title("Timings explorer")
db_url = data.ready()
found = data.choices(db_url)
where = _filters(db_url, found)
frame = data.timings(db_url, where, ROW_LIMIT + 1)
if frame.empty:
    st.info("No measurement matches these filters.")
    st.stop()
more = len(frame) > ROW_LIMIT
frame = frame.head(ROW_LIMIT).copy()
frame["shape"] = analysis.shape_labels(frame)
frame["C_per_group"] = frame["C"] // frame["G"]
frame["K_per_group"] = frame["K"] // frame["G"]
st.caption(f"The first {ROW_LIMIT:,} matching rows (more match: narrow the filters)" if more
           else f"{len(frame):,} matching rows.")

row = st.columns(5)
metric = METRICS[row[0].radio("Plot", list(METRICS), key="t_metric")]
feature = row[1].selectbox("Against", FEATURES, index=FEATURES.index("flops"), key="t_feature")
color = row[2].selectbox("Colour by", ["family", "kernel", "gpu_name", "arch", "operator"],
                         key="t_color")
log_x = row[3].checkbox("log x", value=True, key="t_logx")
log_y = row[4].checkbox("log y", value=True, key="t_logy")
points = frame.dropna(subset=[metric])
if len(points) > POINTS:
    points = points.sample(POINTS, random_state=0)
st.plotly_chart(charts.scatter(points, feature, metric, color, log_x, log_y), key="t_scatter")

timed = frame.dropna(subset=["median_us"])
if len(timed):
    value = st.radio("Heat-map value", ["efficiency in shape", "median_us"], horizontal=True,
                     key="t_heat")
    shapes = timed["shape"].value_counts().index[:HEAT_COLUMNS]
    kernels = timed["kernel"].value_counts().index[:HEAT_ROWS]
    cells = timed[timed["shape"].isin(shapes) & timed["kernel"].isin(kernels)]
    cells = cells.assign(efficiency=cells.groupby("shape")["median_us"].transform("min")
                         / cells["median_us"])
    column = "efficiency" if value == "efficiency in shape" else "median_us"
    pivot = cells.pivot_table(index="kernel", columns="shape", values=column, aggfunc="min")
    st.plotly_chart(charts.heatmap(pivot, value), key="t_heatmap")
    st.caption(f"The {len(pivot.index)} instances and {len(pivot.columns)} shapes with the most "
               "rows in the selection; efficiency in shape = the best time among them / time.")

st.dataframe(frame[TABLE], hide_index=True, key="t_table")
left, right = st.columns(2)
left.download_button("Download CSV", lambda: data.download(db_url, where, "csv"),
                     "timings.csv", "text/csv", key="t_csv")
right.download_button("Download parquet", lambda: data.download(db_url, where, "parquet"),
                      "timings.parquet", "application/octet-stream", key="t_parquet")
st.caption(f"Downloads hold the whole selection (up to {data.DOWNLOAD_LIMIT:,} rows), "
           "fetched when clicked.")
