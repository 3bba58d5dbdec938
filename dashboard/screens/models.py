"""Models: every trained selection model with its held-out metrics over time, which version is
promoted, and a download of the exported bundle."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, data

FIGURES = analysis.SUMMARY_KEYS
COLUMNS = ["operator", "arch", "dtype", "version", "promoted", "created_at", "kind", *FIGURES,
           "problems", "synthetic", "bundle_bytes"]


def _flatten(models: pd.DataFrame) -> pd.DataFrame:
    """One column per stored held-out figure (NaN where a model's metrics lack it)."""
    out = models.copy()
    raw = out["metrics"].map(lambda m: m if isinstance(m, dict) else {})
    metrics = raw.map(analysis.stored_figures)
    out["kind"] = raw.map(lambda m: m.get("kind"))
    out["synthetic"] = raw.map(lambda m: bool(m.get("synthetic")))
    for key in FIGURES:
        out[key] = pd.to_numeric(metrics.map(lambda m, k=key: m.get(k)), errors="coerce")
    out["problems"] = metrics.map(lambda m: m.get("problems", len(m.get("per_problem") or [])))
    out["group"] = out["operator"] + " · " + out["arch"] + " · " + out["dtype"]
    return out


st.title("Models")
db_url = data.ready()
models = data.models(db_url)
if models.empty:
    st.info("No selection model has been trained yet. Models appear here once the selection "
            "model work trains one on the farm's measurements (the `models` table).")
    st.caption(analysis.__doc__.split("\n\n", 1)[1])
    st.stop()
models = _flatten(models)
cols = st.columns(4)
cols[0].metric("Models", len(models))
cols[1].metric("Operator x arch x dtype", models["group"].nunique())
cols[2].metric("Promoted", int(models["promoted"].sum()))
cols[3].metric("Latest trained", f"{pd.to_datetime(models['created_at']).max():%Y-%m-%d %H:%M}")
st.dataframe(models.sort_values(["operator", "arch", "dtype", "version"])[COLUMNS],
             hide_index=True, key="models_table", column_config={
                 "promoted": st.column_config.CheckboxColumn("promoted"),
                 **{k: st.column_config.NumberColumn(format="%.3f") for k in FIGURES}})

group = st.selectbox("Operator · architecture · dtype", sorted(models["group"].unique()),
                     key="models_group")
history = models[models["group"] == group].sort_values("created_at")
left, right = st.columns(2)
left.plotly_chart(charts.model_history(history, ("mean", "median", "p10", "min"),
                                       "Efficiency vs oracle over time"), key="models_eff")
right.plotly_chart(charts.model_history(history, ("top1", "top5"), "Agreement over time"),
                   key="models_agree")
promoted = history[history["promoted"]]
st.caption("Promoted: " + (", ".join(f"v{v}" for v in promoted["version"]) or "none") +
           " (stars on the charts). Figures are the held-out ones the trainer stored.")
if history["synthetic"].any():
    st.warning("Some of these versions were trained on SYNTHETIC data: not a measured result.")

versions = {f"v{r.version}" + (" (promoted)" if r.promoted else ""): r
            for r in history.sort_values("version", ascending=False).itertuples()}
picked = versions[st.selectbox("Bundle of version", list(versions), key="models_version")]
if pd.isna(picked.artifact_id):
    st.caption("This version has no exported bundle.")
else:
    name = f"model-{picked.operator}-{picked.arch}-{picked.dtype}-v{picked.version}.bundle"
    artifact = int(picked.artifact_id)
    st.download_button(f"Download {name} ({int(picked.bundle_bytes):,} bytes)",
                       lambda: data.bundle(db_url, artifact), name,
                       "application/octet-stream", key="models_download")
