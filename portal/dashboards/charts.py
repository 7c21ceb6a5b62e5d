"""The dashboard's plotly figures, as figure dicts built from a :class:`~portal.dashboards.stats.Dashboard`.

Pure (no Django): the page embeds the dicts with ``json_script`` and ``static/dashboard.js`` hands them to
``Plotly.react``. A chart with nothing to draw has no figure but a sentence saying why, which the page shows instead
of empty axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from portal.dashboards.stats import Cluster, Dashboard, GroupStats, Series

Figure = dict[str, Any]  # a plotly figure as JSON-like data
MINUTE = 60.0
HEIGHT = 360


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart slot of the page: its key (the element that draws it), title, figure or why there is none."""

    key: str
    title: str
    figure: Figure | None
    empty: str


def _layout(x: str, y: str, **extra: Any) -> Figure:
    return {
        "xaxis": {"title": {"text": x}},
        "yaxis": {"title": {"text": y}},
        "height": HEIGHT,
        "margin": {"t": 20, "r": 20},
        "legend": {"orientation": "h", "y": -0.25},
        **extra,
    }


def _times(series: Series) -> list[str]:
    return [moment.isoformat() for moment in series.x]


def utilization_chart(cluster: Cluster) -> Chart:
    """Mean GPU utilization across GPUs per rollup bucket, beside the allocated share of the GPUs present: the gap
    between the two lines is GPU time held but not used."""
    traces: list[Figure] = []
    if cluster.util_series:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": "GPU utilization (mean over GPUs)",
                "x": _times(cluster.util_series),
                "y": [round(v, 2) for v in cluster.util_series.y],
            }
        )
    if cluster.allocated_series and cluster.gpus_present:
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "line": {"shape": "hv"},
                "name": f"GPUs allocated (of {cluster.gpus_present} present)",
                "x": _times(cluster.allocated_series),
                "y": [round(100.0 * v / cluster.gpus_present, 2) for v in cluster.allocated_series.y],
            }
        )
    figure: Figure | None = None
    if traces:
        layout = _layout("time (UTC)", "% of GPUs")
        layout["yaxis"]["range"] = [0, 105]  # both are shares: a fixed scale keeps 30 % looking like 30 %
        figure = {"data": traces, "layout": layout}
    return Chart("utilization", "Cluster GPU utilization and allocation", figure, "No telemetry or allocations yet.")


def usage_chart(tenants: Sequence[GroupStats]) -> Chart:
    """Allocated and used GPU-hours per tenant, side by side."""
    rows = [t for t in tenants if t.usage.allocated > 0]
    figure: Figure | None = None
    if rows:
        names = [t.label for t in rows]
        allocated = [round(t.usage.allocated_hours, 2) for t in rows]
        used = [round(t.usage.used_hours, 2) for t in rows]
        figure = {
            "data": [
                {"type": "bar", "name": "allocated", "x": names, "y": allocated},
                {"type": "bar", "name": "used", "x": names, "y": used},
            ],
            "layout": _layout("tenant", "GPU-hours", barmode="group"),
        }
    return Chart("usage", "GPU-hours allocated and used per tenant", figure, "No GPU was allocated in this window.")


def queue_chart(tenants: Sequence[GroupStats]) -> Chart:
    """Queueing delay per tenant as box plots drawn from precomputed quantiles (minutes): box from the first to the
    third quartile, whiskers from the 5th to the 95th percentile, so the page carries five numbers per tenant, not
    one per job."""
    rows = [(t.label, t.queue) for t in tenants if t.queue is not None]
    traces: list[Figure] = [
        {
            "type": "box",
            "name": label,
            "x": [label],
            "lowerfence": [round(q.p5 / MINUTE, 2)],
            "q1": [round(q.q1 / MINUTE, 2)],
            "median": [round(q.median / MINUTE, 2)],
            "q3": [round(q.q3 / MINUTE, 2)],
            "upperfence": [round(q.p95 / MINUTE, 2)],
            "mean": [round(q.mean / MINUTE, 2)],
            "showlegend": False,
        }
        for label, q in rows
    ]
    figure = {"data": traces, "layout": _layout("tenant", "queueing delay (minutes)")} if traces else None
    return Chart("queue", "Queueing delay per tenant", figure, "No job started in this window.")


def pending_chart(cluster: Cluster) -> Chart:
    """Jobs waiting at each bucket boundary of the window, whatever its length (from the jobs' state changes)."""
    title = "Jobs waiting"
    if not any(cluster.pending_series.y):
        return Chart("pending", title, None, "No job waited in this window.")
    trace = {
        "type": "scatter",
        "mode": "lines",
        "line": {"shape": "hv"},
        "name": "jobs waiting",
        "x": _times(cluster.pending_series),
        "y": list(cluster.pending_series.y),
    }
    return Chart("pending", title, {"data": [trace], "layout": _layout("time (UTC)", "jobs waiting")}, "")


def dashboard_charts(dashboard: Dashboard) -> list[Chart]:
    """Every chart of the page, in the order shown."""
    return [
        utilization_chart(dashboard.cluster),
        usage_chart(dashboard.tenants),
        queue_chart(dashboard.tenants),
        pending_chart(dashboard.cluster),
    ]


def figures_by_key(charts: Sequence[Chart]) -> dict[str, Figure]:
    """The figures the page embeds, by chart key; charts without one are left out."""
    return {chart.key: chart.figure for chart in charts if chart.figure is not None}
