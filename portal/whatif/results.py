"""What a what-if run keeps of each replay, and the rows its page shows. Pure: no Django, no database.

A replay of 100k jobs under eight policies produces millions of job outcomes; the run's row keeps, per policy, the
simulator's ``--json`` summary plus the few numbers the page adds (utilization, fairness, p99, skipped), and four
figures built by ``scheduling.sim.report``'s pure functions, resampled (``CDF_POINTS``, ``TIMELINE_BINS``) and
rounded to ``DIGITS`` significant digits, so a run stays at a few hundred KB whatever the history's length.

Records are lists, not dicts keyed by policy: PostgreSQL's jsonb does not keep key order, and the page shows
policies in the order the admin listed them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.sim.metrics import PolicyMetrics
from scheduling.sim.report import Figure, Run, jct_cdf_figure, tenant_figure, timeline_figure
from scheduling.sim.trace import TraceJob

CDF_POINTS = 200
TIMELINE_BINS = 300
DIGITS = 4

Record = dict[str, Any]  # one policy's numbers, JSON-ready


def policy_record(metrics: PolicyMetrics) -> Record:
    """The simulator's stable summary of one policy, plus what the page's table needs besides."""
    return {
        "policy": metrics.policy,
        **metrics.summary(),
        "p99_jct": metrics.p99_jct,
        "utilization": metrics.utilization,
        "fairness": metrics.fairness,
        "fairness_over": metrics.fairness_over,
        "skipped": metrics.skipped,
    }


def policy_figures(run: Run) -> list[Figure]:
    """One policy's traces of the page's four figures (JCT CDF, jobs waiting, GPU utilization, JCT per tenant).

    Built per policy so a caller can drop each replay's outcomes before simulating the next; ``merge_figures``
    puts them side by side.
    """
    figures = [
        jct_cdf_figure([run], points=CDF_POINTS),
        timeline_figure([run], queue=True, bins=TIMELINE_BINS),
        timeline_figure([run], queue=False, bins=TIMELINE_BINS),
        tenant_figure([run]),
    ]
    return [_rounded(figure) for figure in figures]


def merge_figures(per_policy: Sequence[list[Figure]], *, live_policy: str) -> list[Figure]:
    """The figures with every policy's traces together; the live policy's legend entry says "(live)"."""
    if not per_policy:
        return []
    merged: list[Figure] = []
    for i, first in enumerate(per_policy[0]):
        data = [trace for figures in per_policy for trace in figures[i]["data"]]
        for trace in data:
            if trace.get("name") == live_policy:
                trace["name"] = f"{live_policy} (live)"
        merged.append({"data": data, "layout": first["layout"]})
    return merged


def observed(trace: Sequence[TraceJob]) -> Record:
    """What really happened to these jobs on the live cluster: the history records each job's time without GPUs
    (``queue_delay``) and with them (``duration``), so JCT = queue_delay + duration."""
    waits = [j.queue_delay or 0.0 for j in trace]
    jct = np.array([w + j.duration for w, j in zip(waits, trace, strict=True)])
    if jct.size == 0:
        return {"jobs": 0}
    p50, p95 = np.percentile(jct, [50, 95])
    return {
        "jobs": int(jct.size),
        "avg_jct": float(jct.mean()),
        "median_jct": float(p50),
        "p95_jct": float(p95),
        "avg_queue": float(np.mean(waits)),
    }


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the page's table, formatted. ``live`` marks the policy the cluster runs."""

    policy: str
    live: bool
    oracle: bool
    avg_jct: str
    ratio: str
    median_jct: str
    p95_jct: str
    avg_queue: str
    utilization: str
    preemptions: str
    fairness: str


def table_rows(records: Sequence[Record], *, live_policy: str) -> list[Row]:
    """The table: each policy's times, and its average JCT as a ratio to the live policy's ("-" when the live
    policy was not replayed)."""
    live = next((r for r in records if r["policy"] == live_policy), None)
    baseline = live["avg_jct"] if live is not None and live["avg_jct"] > 0 else None
    return [
        Row(
            policy=r["policy"],
            live=r["policy"] == live_policy,
            oracle=bool(r.get("clairvoyant")),
            avg_jct=span(r["avg_jct"]),
            ratio=f"{r['avg_jct'] / baseline:.2f}x" if baseline else "-",
            median_jct=span(r["median_jct"]),
            p95_jct=span(r["p95_jct"]),
            avg_queue=span(r["avg_queue"]),
            utilization=f"{100 * r['utilization']:.0f}%",
            preemptions=str(r["preemptions"]),
            fairness=f"{r['fairness']:.3f}",
        )
        for r in records
    ]


def observed_row(record: Record | None) -> dict[str, str] | None:
    """The recorded history's times (see :func:`observed`) formatted like the table's rows; None without jobs."""
    if not record or not record.get("jobs"):
        return None
    return {key: span(record[key]) for key in ("avg_jct", "median_jct", "p95_jct", "avg_queue")}


def span(seconds: float) -> str:
    """Seconds as the page shows them: "45 s", "12.5 min", "3.2 h", "4.1 d" (a table of hours would read 0.00
    for a history of short jobs)."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


def _rounded(figure: Figure) -> Figure:
    """The figure with its numbers cut to ``DIGITS`` significant digits (a chart shows no more; JSON gets shorter)."""
    for trace in figure["data"]:
        for axis in ("x", "y"):
            values = trace.get(axis)
            if values:
                trace[axis] = [_round(v) for v in values]
    return figure


def _round(value: Any) -> Any:
    if isinstance(value, float) and math.isfinite(value) and value != 0.0:
        return round(value, DIGITS - 1 - math.floor(math.log10(abs(value))))
    return value
