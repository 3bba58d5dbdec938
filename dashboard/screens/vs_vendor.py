"""Our kernels vs the vendor: per shape, the fastest farm instance against the vendor library's
call (the `vendor` family: cuDNN, MIOpen or PyTorch, as the operator says) measured by the same
policy in the same environment, for every operator with vendor times."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from dashboard import analysis, charts, data, networks

COLUMNS = ["operator", "shape", "networks", "class", "gpu_name", "best_kernel", "oracle_us",
           "vendor_us", "speedup", "ours_tflops", "vendor_tflops", "ours_gbps", "vendor_gbps"]


def _times(table: pd.DataFrame) -> go.Figure:
    """Our time against the vendor's, log-log, with the line of equal time."""
    fig = go.Figure()
    for i, (operator, part) in enumerate(table.groupby("operator")):
        fig.add_trace(go.Scatter(x=part["vendor_us"], y=part["oracle_us"], mode="markers",
                                 name=operator, text=part["shape"],
                                 marker=dict(size=6, color=charts.COLORS[i % len(charts.COLORS)])))
    low = float(min(table["vendor_us"].min(), table["oracle_us"].min()))
    high = float(max(table["vendor_us"].max(), table["oracle_us"].max()))
    fig.add_trace(go.Scatter(x=[low, high], y=[low, high], mode="lines", name="equal time",
                             line=dict(dash="dash", color="grey")))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    return charts.layout(fig, "Time per shape", "vendor (µs)",
                         "ours (µs): below the line, ours is faster")


def _with_vendor(db_url: str, operator: str, dtype: str, arch: str) -> pd.DataFrame:
    """The operator's shapes with a vendor time, their speed-ups and networks."""
    table = analysis.speedups(data.per_shape(db_url, operator, dtype, arch))
    nets = networks.memberships(table, operator)
    return table.assign(operator=operator, member_of=nets, networks=networks.text(nets))


st.title("Ours vs vendor")
db_url = data.ready()
found = data.choices(db_url)
if not found.archs:
    st.info("No measurements yet: queue a sweep and run it (see the Overview).")
    st.stop()
top = st.columns(5)
arch = top[0].selectbox("Architecture", found.archs, key="vs_arch")
dtype = top[1].selectbox("Dtype", found.dtypes, key="vs_dtype")
operators = top[2].multiselect("Operator", found.operators, default=list(found.operators),
                               key="vs_operators")
chosen_networks = top[3].multiselect("Network", networks.names(operators), key="vs_networks",
                                     placeholder="any network")

parts = [_with_vendor(db_url, op, dtype, arch) for op in operators]
table = pd.concat([p for p in parts if len(p)], ignore_index=True) if any(map(len, parts)) \
    else pd.DataFrame()
if table.empty:
    st.info(f"No shape of {dtype} on {arch} has both a farm time and a vendor time. Add "
            "`{family: vendor}` to a sweep's kernels (the worker needs PyTorch: "
            "`pip install 'kernel-farm[vendor]'`) and run it.")
    st.stop()
classes = top[4].multiselect("Shape class", sorted(table["class"].unique()), key="vs_classes",
                             placeholder="any class",
                             help="The operator's coarse classes of shapes (a convolution's: "
                                  "dense, grouped, depthwise)")
keep = networks.in_networks(table["member_of"], chosen_networks)
if classes:
    keep &= table["class"].isin(classes)
table = table[keep]
if table.empty:
    st.info("No shape matches these filters.")
    st.stop()

speedup = table["speedup"]
cols = st.columns(5)
cols[0].metric("Shapes", len(table))
cols[1].metric("Geomean speed-up", f"{analysis.geomean(speedup):.2f}x")
cols[2].metric("Ours faster", f"{(speedup > 1).mean():.0%}")
cols[3].metric("Best", f"{speedup.max():.2f}x")
cols[4].metric("Worst", f"{speedup.min():.2f}x")
per_operator = table.groupby("operator")["speedup"].agg(analysis.geomean)
st.caption("Geomean per operator: " + ", ".join(
    f"{d} {v:.2f}x" for d, v in per_operator.items()) + ". Speed-up = vendor time / our "
    "best time in the same environment; above 1, ours is faster.")
left, right = st.columns(2)
left.plotly_chart(charts.speedup_histogram(speedup), key="vs_hist")
right.plotly_chart(_times(table), key="vs_times")
st.subheader("Per shape")
shown = table.sort_values(["speedup", "operator"])[COLUMNS].rename(
    columns={"oracle_us": "ours_us", "best_kernel": "our best instance"})
st.dataframe(shown, hide_index=True, key="vs_table", column_config={
    "speedup": st.column_config.NumberColumn(format="%.2fx"),
    "ours_us": st.column_config.NumberColumn(format="%.2f"),
    "vendor_us": st.column_config.NumberColumn(format="%.2f"),
    **{f"{who}_{unit}": st.column_config.NumberColumn(format="%.1f")
       for who in ("ours", "vendor") for unit in ("tflops", "gbps")}})
