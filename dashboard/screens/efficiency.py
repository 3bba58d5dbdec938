"""Efficiency vs oracle: how close a selection model's choices (or the best single instance, the
baseline every model must beat) come to the fastest measured instance, per shape."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, data

BASELINE = "best single instance"
WORST_COLUMNS = ["shape", "class", "gpu_name", "chosen", "chosen_us", "best_kernel",
                 "oracle_us", "efficiency", "rank", "instances"]
KEYS_NOTE = ("Distributions need the model's choices: its `metrics` JSON (or its `holdout` "
             "part) should carry `per_problem` = [{problem: problem key, kernel: instance "
             "name}, ...] (see dashboard/analysis.py).")


def _model_label(row) -> str:
    return f"model v{row.version}" + (" (promoted)" if row.promoted else "")


def _show(name: str, frame: pd.DataFrame | None, stored: dict, where) -> None:
    where.subheader(name)
    figures = analysis.summarize(frame) if frame is not None else {
        k: analysis.stored_figures(stored).get(k, float("nan")) for k in analysis.SUMMARY_KEYS}
    cols = where.columns(3) + where.columns(3)
    for col, key, label in zip(cols, analysis.SUMMARY_KEYS,
                               ("Mean", "Median", "P10", "Min", "Top-1", "Top-5")):
        value = figures.get(key)
        shown = "n/a" if value is None or pd.isna(value) else (
            f"{value:.1%}" if key.startswith("top") else f"{value:.3f}")
        col.metric(label, shown)
    if frame is None:
        held_out = analysis.stored_figures(stored).get("problems", "?")
        where.caption(f"Stored held-out figures ({held_out} problems). {KEYS_NOTE}")
    else:
        untimed = f"; {figures['untimed']} where the choice has no ok time (scored 0)" \
            if figures["untimed"] else ""
        where.caption(f"{figures['shapes']} shapes{untimed}.")


def _stored_table(frame: pd.DataFrame, caption: str, key: str) -> None:
    """A table of stored figures, the fractions and ratios to three places."""
    if len(frame):
        st.caption(caption)
        st.dataframe(frame, hide_index=True, key=key, column_config={
            c: st.column_config.NumberColumn(format="%.3f") for c in frame.columns[1:]
            if c not in analysis.COUNT_COLUMNS})


st.title("Efficiency vs oracle")
db_url = data.ready()
found = data.choices(db_url)
if not found.operators or not found.archs:
    st.info("No measurements yet: queue a sweep and run it (see the Overview).")
    st.stop()
top = st.columns(5)
operator = top[0].selectbox("Operator", found.operators, key="eff_operator")
arch = top[1].selectbox("Architecture", found.archs, key="eff_arch")
dtype = top[2].selectbox("Dtype", found.dtypes, key="eff_dtype")
shapes = data.per_shape(db_url, operator, dtype, arch)
if shapes.empty:
    st.info(f"No ok measurement of {operator} {dtype} on {arch} yet.")
    st.stop()
stats = data.instance_stats(db_url, operator, dtype, arch)
baseline = analysis.best_single_instance(stats, len(shapes))
models = data.models(db_url)
models = models[(models["operator"] == operator) & (models["arch"] == arch)
                 & (models["dtype"] == dtype)].sort_values("version", ascending=False)
options = {_model_label(r): r for r in models.itertuples()}
options[f"{BASELINE} ({baseline})"] = None
names = list(options)
default = next((i for i, r in enumerate(models.itertuples()) if r.promoted), 0)
first = top[3].selectbox("Model version", names, index=default, key="eff_model")
others = ["(none)"] + [n for n in names if n != first]
second = top[4].selectbox("Compare with", others, index=len(others) - 1 if
                          options[first] is not None else 0, key="eff_compare")
chosen = [first] + ([second] if second != "(none)" else [])

picks = {n: analysis.model_choices(options[n].metrics) for n in chosen if options[n] is not None}
wanted = {baseline} | {k for p in picks.values() for k in p["choice"]}
timings = data.timings_of(db_url, operator, dtype, arch, tuple(sorted(wanted)))
frames: dict[str, pd.DataFrame | None] = {}
for name in chosen:
    if options[name] is None:
        frames[name] = analysis.chosen_efficiency(shapes, timings[timings["kernel"] == baseline])
    else:
        frames[name] = (analysis.chosen_efficiency(shapes, timings, picks[name])
                        if len(picks[name]) else None)
if models.empty:
    st.caption("No selection model for this operator, architecture and dtype yet: the "
               f"baseline is shown. {KEYS_NOTE}")

for name, where in zip(chosen, st.columns(len(chosen))):
    _show(name, frames[name], options[name].metrics if options[name] is not None else {}, where)
for name in chosen:
    stored_with = options[name].metrics if options[name] is not None else {}
    _stored_table(analysis.stored_evaluations(stored_with),
                  f"{name}: efficiency on shapes it never trained on (stored with the model)",
                  f"evaluations_{name}")
    _stored_table(analysis.stored_classes(stored_with),
                  f"{name}: the judged recording's layers by class of shape",
                  f"classes_{name}")

plotted = {n: f for n, f in frames.items() if f is not None}
if plotted:
    series = {n: f["efficiency"].fillna(0.0) for n, f in plotted.items()}
    marks = {n: {k: v for k, v in analysis.summarize(f).items() if k in charts.MARK_STYLE}
             for n, f in plotted.items()}
    left, right = st.columns(2)
    left.plotly_chart(charts.efficiency_histogram(series, marks), key="eff_hist")
    right.plotly_chart(charts.efficiency_cdf(series), key="eff_cdf")
    left, right = st.columns(2)
    left.plotly_chart(charts.topk({n: analysis.topk_curve(f) for n, f in plotted.items()}),
                      key="eff_topk")
    wins = stats.sort_values("wins", ascending=False).head(15)
    right.plotly_chart(charts.bars(wins["kernel"], wins["wins"], "Fastest instance per shape",
                                   "instance", "shapes won", horizontal=True), key="eff_wins")
stored = {n: analysis.stored_topk(options[n].metrics) for n in chosen if options[n] is not None}
stored = {n: c for n, c in stored.items() if len(c)}
if stored:
    st.plotly_chart(charts.topk(stored, "Top-k efficiency (stored, held-out): the best of the "
                                "model's k best choices", "efficiency"), key="eff_topk_stored")
if plotted:
    st.subheader("Worst shapes")
    for name, where in zip(plotted, st.columns(len(plotted))):
        worst = plotted[name].assign(efficiency=plotted[name]["efficiency"].fillna(0.0))
        worst = worst.sort_values(["efficiency", "shape"])
        where.caption(name)
        where.dataframe(worst[WORST_COLUMNS], hide_index=True, key=f"worst_{name}",
                        column_config={"efficiency": st.column_config.NumberColumn(
                            format="%.3f")})
