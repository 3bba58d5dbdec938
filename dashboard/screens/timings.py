"""Timings explorer: filter the measurements, plot latency or throughput against a shape feature,
compare instances across shapes in a heat-map, download the selection."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, shapes
from farm.store.views import TimingSelection

ROW_LIMIT = 20_000  # rows fetched for the page
POINTS = 5_000  # points drawn in the scatter plot
HEAT_ROWS, HEAT_COLUMNS = 40, 60
ANY = "(any)"
METRICS = {"latency (median µs)": "median_us", "TFLOP/s": "tflops", "GB/s": "gbps"}
SIZES = ["flops", "min_bytes", "flops_per_byte"]  # plot features every operator has
COLOURS = ["family", "kernel", "gpu_name", "arch", "operator", "dtype", "class"]
TABLE = ["family", "kernel", "operator", "dtype", "shape", "class", "median_us", "min_us",
         "spread", "tflops", "gbps", "status", "message", "gpu_name", "arch", "job_id",
         "created_at"]


def _operators(found, operator: str | None) -> list[str]:
    """The selected operator, or every operator with problems when none is."""
    return [operator] if operator else list(found.operators)


def _shape_filters(problems, operators: list[str], operator: str | None):
    """One choice per shape field of the operators (numbers, or names for a text field such as
    a layout), its values those of their problems; returns (field, values) pairs."""
    if operator:
        st.caption(f"The shape fields of {operator}.")
    else:
        st.caption("No operator selected: the shape fields of every operator. A filter on a "
                   "field keeps only the operators that have it; pick an operator above to see "
                   "its fields alone.")
    picked_fields = []
    cols = st.columns(7)
    for i, field in enumerate(shapes.union(operators)):
        owners = [op for op in operators if field in shapes.columns(op)]
        text = any(field in shapes.text_fields(op) for op in owners)
        column = problems.loc[problems["operator"].isin(owners), field] \
            if field in problems.columns else problems.iloc[0:0, 0]
        values = sorted({str(v) if text else int(v) for v in column.dropna().unique()})
        picked = cols[i % 7].multiselect(field, values, key=f"t_shape_{field}",
                                         placeholder="any")
        if picked:
            picked_fields.append((field, tuple(picked)))
    return tuple(picked_fields)


def _filters(db_url: str, found) -> TimingSelection:
    row = st.columns(4)
    operator = row[0].selectbox("Operator", [ANY, *found.operators], key="t_operator")
    operator = None if operator == ANY else operator
    dtype = row[1].selectbox("Dtype", [ANY, *found.dtypes], key="t_dtype")
    archs = row[2].multiselect("Architecture", found.archs, key="t_archs")
    devices = row[3].multiselect("Device", found.gpu_names, key="t_devices")
    row = st.columns(4)
    families = row[0].multiselect("Family", found.families, key="t_families")
    kernels = data.kernels(db_url, operator)
    if families:
        kernels = kernels[kernels["family"].isin(families)]
    instances = row[1].multiselect("Instance", sorted(kernels["name"].unique()), key="t_kernels")
    status = row[2].selectbox("Status", ["ok", ANY, "failed only"], key="t_status")
    replay = row[3].checkbox("Include replayed rows", value=True, key="t_replay")
    problems = data.problems(db_url, operator)
    with st.expander(f"Shape fields of {operator}" if operator else "Shape fields"):
        shape = _shape_filters(problems, _operators(found, operator), operator)
    return TimingSelection(operator=operator, dtype=None if dtype == ANY else dtype,
                           archs=tuple(archs), gpu_names=tuple(devices),
                           families=tuple(families), kernels=tuple(instances),
                           status={"ok": "ok", ANY: None, "failed only": "failed"}[status],
                           shape=shape, include_replay=replay)


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
frame["flops_per_byte"] = frame["flops"] / frame["min_bytes"]
st.caption(f"The first {ROW_LIMIT:,} matching rows (more match: narrow the filters)" if more
           else f"{len(frame):,} matching rows.")

operators = _operators(found, where.operator)
features = SIZES + [f for f in shapes.union(operators) if f in frame.columns
                    and not any(f in shapes.text_fields(op) for op in operators)]
colours = COLOURS + [f for f in shapes.union(operators, shapes.text_fields) if f in frame.columns]
row = st.columns(5)
metric = METRICS[row[0].radio("Plot", list(METRICS), key="t_metric")]
feature = row[1].selectbox("Against", features, key="t_feature",
                           help="A size every operator has, or a numeric shape field of the "
                                "selected operator (of every operator when none is selected)")
color = row[2].selectbox("Colour by", colours, key="t_color")
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
    several = timed["operator"].nunique() > 1  # then a shape is named with its operator
    timed = timed.assign(problem=timed["operator"] + " " + timed["shape"] if several
                         else timed["shape"])
    problems = timed["problem"].value_counts().index[:HEAT_COLUMNS]
    kernels = timed["kernel"].value_counts().index[:HEAT_ROWS]
    cells = timed[timed["problem"].isin(problems) & timed["kernel"].isin(kernels)]
    cells = cells.assign(efficiency=cells.groupby("problem")["median_us"].transform("min")
                         / cells["median_us"])
    column = "efficiency" if value == "efficiency in shape" else "median_us"
    pivot = cells.pivot_table(index="kernel", columns="problem", values=column, aggfunc="min")
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
