"""What a what-if run keeps of each replay, and the rows its page shows. Pure: no Django, no database.

A replay of 100k jobs under eight policies produces millions of job outcomes; the run's row keeps, per policy, the
simulator's ``--json`` summary plus the few numbers the page adds (utilization, fairness, p99, skipped), and four
figures built by ``scheduling.sim.report``'s pure functions, resampled (``CDF_POINTS``, ``TIMELINE_BINS``) and
rounded to ``DIGITS`` significant digits, so a run stays at a few hundred KB whatever the history's length.

Times are printed and charted by the rules ``corral simulate`` uses (#18): each time column of the table in the one
unit its values call for (``scheduling.sim.units.time_scale``; the recorded history's row shares the columns, so it
counts), each figure's time axis in the unit of its longest value once every policy's traces are together, and the
ratio column against ``scheduling.sim.report.baseline_policy`` (the live policy, else the first listed).

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
from scheduling.sim.report import (
    Figure,
    Run,
    baseline_policy,
    jct_cdf_figure,
    ratio_text,
    readable,
    tenant_figure,
    timeline_figure,
)
from scheduling.sim.trace import TraceJob
from scheduling.sim.units import TimeScale, time_scale

CDF_POINTS = 200
TIMELINE_BINS = 300
DIGITS = 4

Record = dict[str, Any]  # one policy's numbers, JSON-ready
#: The table's time columns (the recorded history's row has these too).
TIME_KEYS = ("avg_jct", "median_jct", "p95_jct", "avg_queue")


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
    puts them side by side. Their times stay in seconds until then, so that all policies share one unit.
    """
    return [
        jct_cdf_figure([run], points=CDF_POINTS, seconds=True),
        timeline_figure([run], queue=True, bins=TIMELINE_BINS, seconds=True),
        timeline_figure([run], queue=False, bins=TIMELINE_BINS, seconds=True),
        tenant_figure([run], seconds=True),
    ]


def merge_figures(per_policy: Sequence[list[Figure]], *, live_policy: str) -> list[Figure]:
    """The figures with every policy's traces together, each time axis in the unit its longest value calls for
    (the length of the longest replay for the timelines), rounded; the live policy's legend entry says "(live)"."""
    if not per_policy:
        return []
    merged: list[Figure] = []
    for i, first in enumerate(per_policy[0]):
        data = [trace for figures in per_policy for trace in figures[i]["data"]]
        for trace in data:
            if trace.get("name") == live_policy:
                trace["name"] = f"{live_policy} (live)"
        merged.append(_rounded(readable({"data": data, "layout": first["layout"]})))
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


def time_scales(records: Sequence[Record], observed: Record | None = None) -> dict[str, TimeScale]:
    """One unit per time column, from every value the column shows: each policy's, and the recorded history's when
    there is one."""
    shown = [*records, *([observed] if observed and observed.get("jobs") else [])]
    return {key: time_scale(float(r[key]) for r in shown) for key in TIME_KEYS}


def table_rows(records: Sequence[Record], *, live_policy: str, observed: Record | None = None) -> list[Row]:
    """The table: each policy's times, one unit per column (``observed``, the row :func:`observed_row` prints below,
    counts in choosing it), and its average JCT as a ratio to the baseline's (:func:`baseline`)."""
    scales = time_scales(records, observed)
    name = baseline(records, live_policy=live_policy)
    base = next((r["avg_jct"] for r in records if r["policy"] == name), None)
    return [
        Row(
            policy=r["policy"],
            live=r["policy"] == live_policy,
            oracle=bool(r.get("clairvoyant")),
            avg_jct=scales["avg_jct"].text(r["avg_jct"]),
            ratio=ratio_text(r["avg_jct"], base),
            median_jct=scales["median_jct"].text(r["median_jct"]),
            p95_jct=scales["p95_jct"].text(r["p95_jct"]),
            avg_queue=scales["avg_queue"].text(r["avg_queue"]),
            utilization=f"{100 * r['utilization']:.0f}%",
            preemptions=str(r["preemptions"]),
            fairness=f"{r['fairness']:.3f}",
        )
        for r in records
    ]


def baseline(records: Sequence[Record], *, live_policy: str) -> str | None:
    """The policy the ratio column compares with: the live one when it was replayed, else the first listed, as
    ``corral simulate`` does (``baseline_policy``)."""
    return baseline_policy([r["policy"] for r in records], live=live_policy)


def observed_row(record: Record | None, *, records: Sequence[Record] = ()) -> dict[str, str] | None:
    """The recorded history's times (see :func:`observed`) formatted like the table's rows, in the units of the
    columns they sit in (``records``: the policies' rows above); None without jobs."""
    if not record or not record.get("jobs"):
        return None
    scales = time_scales(records, record)
    return {key: scales[key].text(record[key]) for key in TIME_KEYS}


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


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One line of the sharing table (issue #17), formatted: a mode (the whole-GPU baseline or a share placer)."""

    mode: str
    allocation: str
    utilization: str
    utilization_allocated: str
    fragmented_gpus: str
    offline_jct: str
    offline_queue: str
    online_slowdown: str
    evictions: str


def share_rows(modes: Sequence[Record]) -> list[ShareRow]:
    """The sharing replay's table, as ``corral simulate --sharing on`` prints it, with the allocation and
    fragmentation beside; each time column in the one unit its values call for."""
    jct = time_scale(float(m["offline_jct_mean"]) for m in modes)
    queue = time_scale(float(m["offline_queue_mean"]) for m in modes)
    return [
        ShareRow(
            mode=str(m["mode"]),
            allocation=f"{100 * m['allocation']:.0f}%",
            utilization=f"{100 * m['utilization']:.0f}%",
            utilization_allocated=f"{100 * m['utilization_allocated']:.0f}%",
            fragmented_gpus=f"{m['fragmented_gpus']:.1f}",
            offline_jct=jct.text(m["offline_jct_mean"]),
            offline_queue=queue.text(m["offline_queue_mean"]),
            online_slowdown=f"{100 * m['online_slowdown_mean']:.1f}% (max {100 * m['online_slowdown_max']:.1f}%)",
            evictions=str(m["evictions"]),
        )
        for m in modes
    ]
