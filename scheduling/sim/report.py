"""A self-contained HTML report comparing policies on one trace.

Figures are plain plotly figure dicts built by pure functions (testable without a browser); ``render_report``
inlines plotly.js once, so the page works on an air-gapped cluster.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.sim.metrics import PolicyMetrics, resample
from scheduling.sim.simulator import SimResult

Figure = dict[str, Any]  # a plotly figure as JSON-like data


@dataclass(frozen=True, slots=True)
class Run:
    """One policy's run as the report needs it."""

    result: SimResult
    metrics: PolicyMetrics


def _layout(title: str, x: str, y: str) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}, "height": 420}


def jct_cdf_figure(runs: Sequence[Run], points: int = 400) -> Figure:
    """Empirical CDF of JCT per policy (hours, log x)."""
    traces = []
    for run in runs:
        jct = np.sort([o.jct / 3600 for o in run.result.outcomes])
        if jct.size == 0:
            continue
        idx = np.unique(np.linspace(0, jct.size - 1, min(points, jct.size)).astype(int))
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "name": _label(run),
                "x": jct[idx].tolist(),
                "y": ((idx + 1) / jct.size).tolist(),
            }
        )
    layout = _layout("JCT distribution", "job completion time (hours)", "fraction of jobs")
    layout["xaxis"]["type"] = "log"
    return {"data": traces, "layout": layout}


def timeline_figure(runs: Sequence[Run], *, queue: bool, bins: int = 600) -> Figure:
    """Queued jobs (``queue=True``) or GPU utilization (%) over time, per policy."""
    traces = []
    for run in runs:
        times, busy, queued = resample(run.result.timeline, bins)
        total = run.result.cluster.total_gpus
        y = queued if queue else [100 * b / total for b in busy]
        traces.append(
            {"type": "scatter", "mode": "lines", "name": _label(run), "x": [t / 86400 for t in times], "y": y}
        )
    if queue:
        return {"data": traces, "layout": _layout("Jobs waiting over time", "days", "jobs waiting")}
    return {"data": traces, "layout": _layout("GPU utilization over time", "days", "% of GPUs busy")}


def tenant_figure(runs: Sequence[Run]) -> Figure:
    """Average JCT per tenant (or per user when the trace has no tenants), one bar group per policy."""
    per = "tenant" if any(len(r.metrics.per_tenant) > 1 for r in runs) else "user"
    traces = []
    for run in runs:
        groups = run.metrics.per_tenant if per == "tenant" else run.metrics.per_user
        names = list(groups)[:30]
        traces.append(
            {
                "type": "bar",
                "name": _label(run),
                "x": [n or "(none)" for n in names],
                "y": [groups[n].avg_jct / 3600 for n in names],
            }
        )
    layout = _layout(f"Average JCT per {per}", per, "average JCT (hours)")
    layout["barmode"] = "group"
    return {"data": traces, "layout": layout}


def _label(run: Run) -> str:
    return f"{run.metrics.policy} (oracle)" if run.metrics.clairvoyant else run.metrics.policy


def _table(runs: Sequence[Run], baseline: float | None) -> str:
    head = (
        "policy",
        "avg JCT (h)",
        "vs srsf",
        "median (h)",
        "p95 (h)",
        "p99 (h)",
        "avg queue (h)",
        "makespan (d)",
        "utilization",
        "preemptions",
        "fairness",
    )
    rows = []
    for r in runs:
        m = r.metrics
        ratio = f"{m.avg_jct / baseline:.3f}x" if baseline else "-"
        cells = (
            _label(r),
            f"{m.avg_jct / 3600:.2f}",
            ratio,
            f"{m.median_jct / 3600:.2f}",
            f"{m.p95_jct / 3600:.2f}",
            f"{m.p99_jct / 3600:.2f}",
            f"{m.avg_queue / 3600:.2f}",
            f"{m.makespan / 86400:.2f}",
            f"{100 * m.utilization:.1f}%",
            str(m.preemptions),
            f"{m.fairness:.3f} ({m.fairness_over})",
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def render_report(runs: Sequence[Run], *, title: str) -> str:
    """The whole HTML page."""
    import plotly.io as pio  # heavy: only when a report is asked for

    baseline = next((r.metrics.avg_jct for r in runs if r.metrics.policy == "srsf"), None)
    figures = [
        jct_cdf_figure(runs),
        timeline_figure(runs, queue=True),
        timeline_figure(runs, queue=False),
        tenant_figure(runs),
    ]
    parts = [
        pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, validate=False) for i, fig in enumerate(figures)
    ]
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>"
        "body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
        "</style></head><body>"
        f"<h1>{html.escape(title)}</h1>{_table(runs, baseline)}" + "".join(parts) + "</body></html>"
    )
