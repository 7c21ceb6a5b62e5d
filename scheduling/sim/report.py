"""A self-contained HTML report comparing policies on one trace, and the rules its table shares with ``corral
simulate`` and the what-if page: which policy the ratio column compares with (:func:`baseline_policy`), and times
in one unit per column and axis (:func:`scheduling.sim.units.time_scale`).

Figures are plain plotly figure dicts built by pure functions (testable without a browser); ``render_report``
inlines plotly.js once, so the page works on an air-gapped cluster. A figure's time axis is built in seconds and
turned into the unit that suits its values last (:func:`readable`), so the what-if page, which builds each policy's
traces apart and puts them together afterwards, picks one unit for all of them as the report does.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.sim.metrics import PolicyMetrics, resample
from scheduling.sim.simulator import SimResult
from scheduling.sim.units import TimeScale, time_scale

Figure = dict[str, Any]  # a plotly figure as JSON-like data
#: The times of the comparison table, as (PolicyMetrics attribute, column title); each gets its own unit.
TIME_COLUMNS = (
    ("avg_jct", "avg JCT"),
    ("median_jct", "median"),
    ("p95_jct", "p95"),
    ("p99_jct", "p99"),
    ("avg_queue", "avg queue"),
    ("makespan", "makespan"),
)


@dataclass(frozen=True, slots=True)
class Run:
    """One policy's run as the report needs it."""

    result: SimResult
    metrics: PolicyMetrics


def baseline_policy(policies: Sequence[str], *, live: str | None = None) -> str | None:
    """The policy every other one's average JCT is compared with: the live one when it was replayed, else the first
    listed (``--policy all`` lists ``fifo`` first). The what-if page passes the live ``CORRAL_POLICY``;
    ``corral simulate`` the ``live_policy`` of its ``--setup`` file, if any. None when nothing was replayed."""
    if live is not None and live in policies:
        return live
    return policies[0] if policies else None


def ratio_text(avg_jct: float, baseline_avg_jct: float | None) -> str:
    """``0.50x``: an average JCT over the baseline's (below 1.00x is better); ``-`` without a baseline."""
    return f"{avg_jct / baseline_avg_jct:.2f}x" if baseline_avg_jct else "-"


def column_scales(metrics: Sequence[PolicyMetrics]) -> dict[str, TimeScale]:
    """One unit per time column of the comparison table, from every policy's value in it."""
    return {key: time_scale(getattr(m, key) for m in metrics) for key, _ in TIME_COLUMNS}


def _layout(title: str, x: str, y: str) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}}, "height": 420}


def _timed(figure: Figure, axis: str, what: str) -> Figure:
    """Mark ``axis`` of ``figure`` as seconds of ``what``, for :func:`readable` (plotly ignores ``meta``)."""
    figure["layout"]["meta"] = {"time_axis": axis, "time_title": what}
    return figure


def readable(figure: Figure) -> Figure:
    """``figure`` with its time axis (marked by the builders, in seconds) in the unit its values call for: the
    largest value, i.e. the length of a timeline or the longest JCT, picks it (``time_scale``). Idempotent: the
    mark is removed once applied."""
    meta = figure["layout"].pop("meta", None)
    if not meta:
        return figure
    axis = meta["time_axis"]
    scale = time_scale(v for trace in figure["data"] for v in trace.get(axis) or ())
    for trace in figure["data"]:
        if trace.get(axis):
            trace[axis] = [scale.value(v) for v in trace[axis]]
    figure["layout"][f"{axis}axis"]["title"]["text"] = scale.title(meta["time_title"])
    return figure


def jct_cdf_figure(runs: Sequence[Run], points: int = 400, *, seconds: bool = False) -> Figure:
    """Empirical CDF of JCT per policy (log x, in the unit the longest JCT calls for; in seconds, marked for
    :func:`readable`, with ``seconds=True``)."""
    traces = []
    for run in runs:
        jct = np.sort([o.jct for o in run.result.outcomes])
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
    layout = _layout("JCT distribution", "job completion time", "fraction of jobs")
    layout["xaxis"]["type"] = "log"
    figure = _timed({"data": traces, "layout": layout}, "x", "job completion time")
    return figure if seconds else readable(figure)


def timeline_figure(runs: Sequence[Run], *, queue: bool, bins: int = 600, seconds: bool = False) -> Figure:
    """Queued jobs (``queue=True``) or GPU utilization (%) over time, per policy; time runs from the first
    submission, in the unit the replay's length calls for (seconds, marked, with ``seconds=True``)."""
    traces = []
    for run in runs:
        times, busy, queued = resample(run.result.timeline, bins)
        total = run.result.cluster.total_gpus
        y = queued if queue else [100 * b / total for b in busy]
        traces.append({"type": "scatter", "mode": "lines", "name": _label(run), "x": list(times), "y": y})
    when = "time since the first submission"
    if queue:
        figure = {"data": traces, "layout": _layout("Jobs waiting over time", when, "jobs waiting")}
    else:
        figure = {"data": traces, "layout": _layout("GPU utilization over time", when, "% of GPUs busy")}
    figure = _timed(figure, "x", when)
    return figure if seconds else readable(figure)


def tenant_figure(runs: Sequence[Run], *, seconds: bool = False) -> Figure:
    """Average JCT per tenant (or per user when the trace has no tenants), one bar group per policy, in the unit
    the longest calls for (seconds, marked, with ``seconds=True``)."""
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
                "y": [groups[n].avg_jct for n in names],
            }
        )
    layout = _layout(f"Average JCT per {per}", per, "average JCT")
    layout["barmode"] = "group"
    figure = _timed({"data": traces, "layout": layout}, "y", "average JCT")
    return figure if seconds else readable(figure)


def _label(run: Run) -> str:
    return f"{run.metrics.policy} (oracle)" if run.metrics.clairvoyant else run.metrics.policy


def _table(runs: Sequence[Run], *, live: str | None = None) -> str:
    metrics = [r.metrics for r in runs]
    baseline = baseline_policy([m.policy for m in metrics], live=live)
    base_jct = next((m.avg_jct for m in metrics if m.policy == baseline), None)
    scales = column_scales(metrics)
    times = [f"{title} ({scales[key].unit})" for key, title in TIME_COLUMNS]
    head = ("policy", times[0], f"vs {baseline}", *times[1:], "utilization", "preemptions", "fairness")
    rows = []
    for r in runs:
        m = r.metrics
        cells = (
            _label(r),
            scales["avg_jct"].number(m.avg_jct),
            ratio_text(m.avg_jct, base_jct),
            *(scales[key].number(getattr(m, key)) for key, _ in TIME_COLUMNS[1:]),
            f"{100 * m.utilization:.1f}%",
            str(m.preemptions),
            f"{m.fairness:.3f} ({m.fairness_over})",
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    header = "<tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in head) + "</tr>"
    return f"<table>{header}{''.join(rows)}</table>"


def render_report(runs: Sequence[Run], *, title: str, live: str | None = None) -> str:
    """The whole HTML page. ``live``: the policy the cluster runs, the ratios' baseline when it was replayed."""
    import plotly.io as pio  # heavy: only when a report is asked for

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
        f"<h1>{html.escape(title)}</h1>{_table(runs, live=live)}" + "".join(parts) + "</body></html>"
    )
