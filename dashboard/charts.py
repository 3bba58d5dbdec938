"""Plotly figures for the dashboard, built with graph_objects from plain frames."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
MARK_STYLE = {"mean": "solid", "median": "dash", "p10": "dot", "min": "dashdot"}


def layout(fig: go.Figure, title: str, x: str, y: str, height: int = 340) -> go.Figure:
    fig.update_layout(title=title, xaxis_title=x, yaxis_title=y, height=height,
                      margin=dict(l=10, r=10, t=40, b=10), legend=dict(orientation="h", y=-0.2))
    return fig


def efficiency_histogram(series: dict[str, pd.Series],
                         marks: dict[str, dict[str, float]]) -> go.Figure:
    """Histogram of efficiency per chooser (percent of its shapes), with its mean, median,
    P10 and min marked."""
    fig = go.Figure()
    for i, (name, eff) in enumerate(series.items()):
        color = COLORS[i % len(COLORS)]
        fig.add_trace(go.Histogram(x=eff, name=name, marker_color=color, opacity=0.6,
                                   histnorm="percent", xbins=dict(start=0, end=1.0001,
                                                                  size=0.025)))
        for j, (stat, value) in enumerate(marks.get(name, {}).items()):
            if np.isfinite(value):
                fig.add_vline(x=value, line_color=color, line_dash=MARK_STYLE.get(stat, "solid"))
                fig.add_annotation(x=value, y=1 - 0.07 * (4 * i + j), yref="paper",
                                   text=f"{stat} {value:.2f}", showarrow=False, xanchor="right",
                                   font=dict(size=10, color=color), bgcolor="white")
    fig.update_layout(barmode="overlay")
    return layout(fig, "Efficiency per shape", "efficiency (oracle time / chosen time)",
                  "% of shapes")


def efficiency_cdf(series: dict[str, pd.Series]) -> go.Figure:
    """Fraction of shapes at or below each efficiency."""
    fig = go.Figure()
    for i, (name, eff) in enumerate(series.items()):
        values = np.sort(eff.dropna().to_numpy())
        fraction = np.arange(1, len(values) + 1) / max(len(values), 1)
        fig.add_trace(go.Scatter(x=values, y=fraction, mode="lines", name=name,
                                 line=dict(shape="hv", color=COLORS[i % len(COLORS)])))
    fig.update_xaxes(range=[0, 1.01])
    return layout(fig, "Cumulative distribution", "efficiency", "fraction of shapes")


def topk(curves: dict[str, pd.DataFrame], title: str = "Top-k agreement",
         y: str = "fraction of shapes") -> go.Figure:
    fig = go.Figure()
    for i, (name, curve) in enumerate(curves.items()):
        fig.add_trace(go.Scatter(x=curve["k"], y=curve["fraction"], mode="lines+markers",
                                 name=name, line=dict(color=COLORS[i % len(COLORS)])))
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, title, "k", y)


def bars(x, y, title: str, x_title: str, y_title: str, horizontal: bool = False) -> go.Figure:
    trace = go.Bar(y=x, x=y, orientation="h") if horizontal else go.Bar(x=x, y=y)
    fig = layout(go.Figure(trace), title, y_title if horizontal else x_title,
                  x_title if horizontal else y_title)
    if horizontal:
        fig.update_yaxes(autorange="reversed")
    return fig


def throughput(frame: pd.DataFrame, bucket_s: int) -> go.Figure:
    """Stacked bars of measurements per minute, ok and failed."""
    per_minute = 60.0 / bucket_s
    fig = go.Figure([go.Bar(x=frame["time"], y=frame["ok"] * per_minute, name="ok",
                            marker_color=COLORS[2]),
                     go.Bar(x=frame["time"], y=frame["failed"] * per_minute, name="failed",
                            marker_color=COLORS[3])])
    fig.update_layout(barmode="stack")
    return layout(fig, "Measurements per minute", "time (UTC)", "measurements / min", 300)


def speedup_histogram(speedup: pd.Series) -> go.Figure:
    """Histogram on a log2 scale; bars right of 1 are shapes where ours is faster."""
    logs = np.log2(speedup.dropna().to_numpy())
    if len(logs) == 0:
        return layout(go.Figure(), "Speed-up over the vendor", "speed-up", "shapes")
    low, high = np.floor(logs.min() * 4) / 4, np.ceil(logs.max() * 4) / 4 + 0.25
    counts, edges = np.histogram(logs, bins=np.arange(low, high + 1e-9, 0.25))
    centers = 2 ** ((edges[:-1] + edges[1:]) / 2)
    colors = [COLORS[2] if c >= 1 else COLORS[3] for c in centers]
    fig = go.Figure(go.Bar(x=centers, y=counts, marker_color=colors,
                           width=np.diff(2 ** edges) * 0.95, name="shapes"))
    fig.add_vline(x=1.0, line_dash="dash", annotation_text="vendor")
    fig.update_xaxes(type="log")
    return layout(fig, "Speed-up over the vendor", "vendor time / our best time (log scale)",
                  "shapes")


def scatter(frame: pd.DataFrame, x: str, y: str, color: str, log_x: bool,
            log_y: bool) -> go.Figure:
    fig = go.Figure()
    for i, (name, part) in enumerate(frame.groupby(color, sort=True)):
        fig.add_trace(go.Scatter(x=part[x], y=part[y], mode="markers", name=str(name),
                                 text=part.get("kernel"), marker=dict(
                                     size=5, opacity=0.6, color=COLORS[i % len(COLORS)])))
    fig.update_xaxes(type="log" if log_x else "linear")
    fig.update_yaxes(type="log" if log_y else "linear")
    return layout(fig, f"{y} against {x}", x, y, 420)


def heatmap(pivot: pd.DataFrame, value: str) -> go.Figure:
    fig = go.Figure(go.Heatmap(z=pivot.to_numpy(), x=list(pivot.columns), y=list(pivot.index),
                               colorscale="Viridis", colorbar=dict(title=value)))
    height = min(900, 160 + 14 * len(pivot.index))
    fig = layout(fig, f"Instance x shape: {value}", "shape", "instance", height)
    fig.update_xaxes(showticklabels=len(pivot.columns) <= 40)
    return fig


def model_history(frame: pd.DataFrame, keys: tuple[str, ...], title: str) -> go.Figure:
    """One line per metric over the versions' creation times; promoted versions starred."""
    fig = go.Figure()
    for i, key in enumerate(keys):
        if key in frame and frame[key].notna().any():
            fig.add_trace(go.Scatter(
                x=frame["created_at"], y=frame[key], mode="lines+markers", name=key,
                text=[f"v{v}" for v in frame["version"]], line=dict(color=COLORS[i]),
                marker=dict(size=[14 if p else 7 for p in frame["promoted"]],
                            symbol=["star" if p else "circle" for p in frame["promoted"]])))
    fig.update_yaxes(range=[0, 1.02])
    return layout(fig, title, "trained at", "value")
