"""Metrics of one simulated run: JCT statistics, queueing, utilization, per-tenant and per-user views, fairness.

JCT (job completion time) is finish - submit. Slowdown is JCT / duration: 1 means the job never waited. The
fairness index is Jain's index over mean slowdowns (1 = every group slowed equally), taken over tenants when the
trace names at least two, else over users, else over jobs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from scheduling.sim.simulator import JobOutcome, SimResult, Timeline


@dataclass(frozen=True, slots=True)
class GroupStats:
    jobs: int
    avg_jct: float
    avg_slowdown: float


@dataclass(frozen=True, slots=True)
class PolicyMetrics:
    policy: str
    clairvoyant: bool
    placement: str
    jobs: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    p99_jct: float
    avg_queue: float
    makespan: float
    utilization: float  # time-averaged share of GPUs busy between the first submission and the last finish
    preemptions: int
    fairness: float
    fairness_over: str
    skipped: int = 0
    per_tenant: dict[str, GroupStats] = field(default_factory=dict)
    per_user: dict[str, GroupStats] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int | bool]:
        """The stable ``--json`` record (benchmarks and the what-if page read exactly these keys)."""
        return {
            "avg_jct": self.avg_jct,
            "median_jct": self.median_jct,
            "p95_jct": self.p95_jct,
            "avg_queue": self.avg_queue,
            "makespan": self.makespan,
            "jobs": self.jobs,
            "preemptions": self.preemptions,
            "clairvoyant": self.clairvoyant,
        }


def measure(result: SimResult) -> PolicyMetrics:
    outcomes = result.outcomes
    if not outcomes:
        return PolicyMetrics(
            result.policy,
            result.clairvoyant,
            result.placement,
            0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0.0,
            0,
            1.0,
            "jobs",
            len(result.skipped),
        )
    jct = np.array([o.jct for o in outcomes])
    queued = np.array([o.queued for o in outcomes])
    start = min(o.submit for o in outcomes)
    end = max(o.finish for o in outcomes)
    per_tenant = _groups(outcomes, lambda o: o.tenant)
    per_user = _groups(outcomes, lambda o: o.user)
    fairness, over = _fairness(outcomes, per_tenant, per_user)
    p50, p95, p99 = np.percentile(jct, [50, 95, 99])
    return PolicyMetrics(
        policy=result.policy,
        clairvoyant=result.clairvoyant,
        placement=result.placement,
        jobs=len(outcomes),
        avg_jct=float(jct.mean()),
        median_jct=float(p50),
        p95_jct=float(p95),
        p99_jct=float(p99),
        avg_queue=float(queued.mean()),
        makespan=float(end - start),
        utilization=utilization(result.timeline, result.cluster.total_gpus, start, end),
        preemptions=result.preemptions,
        fairness=fairness,
        fairness_over=over,
        skipped=len(result.skipped),
        per_tenant=per_tenant,
        per_user=per_user,
    )


def slowdown(o: JobOutcome) -> float:
    return o.jct / max(o.duration, 1.0)


def jain(values: Iterable[float]) -> float:
    """Jain's fairness index: (sum x)^2 / (n sum x^2), 1 when all equal, 1/n when one group has everything."""
    x = np.asarray(list(values), dtype=float)
    if x.size == 0 or not np.any(x):
        return 1.0
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))


def utilization(timeline: Timeline, total_gpus: int, start: float, end: float) -> float:
    """Time-weighted mean busy share over ``[start, end]``."""
    if end <= start or not timeline.times or total_gpus <= 0:
        return 0.0
    t = np.asarray(timeline.times + (end,))
    busy = np.asarray(timeline.busy_gpus, dtype=float)
    widths = np.clip(np.diff(t), 0, None)
    return float((busy * widths).sum() / ((end - start) * total_gpus))


def resample(timeline: Timeline, bins: int = 600) -> tuple[list[float], list[float], list[float]]:
    """Time-weighted means of busy GPUs and queued jobs over ``bins`` equal intervals (plotting a 100k-job run
    point by point would make a report of many megabytes)."""
    if len(timeline.times) < 2:
        return list(timeline.times), [float(b) for b in timeline.busy_gpus], [float(q) for q in timeline.queued_jobs]
    t = np.asarray(timeline.times)
    edges = np.linspace(t[0], t[-1], bins + 1)
    out_busy, out_queue = [], []
    cum_t = np.concatenate([t, [t[-1]]])
    widths = np.diff(cum_t)
    busy_area = np.concatenate([[0.0], np.cumsum(np.asarray(timeline.busy_gpus) * widths)])
    queue_area = np.concatenate([[0.0], np.cumsum(np.asarray(timeline.queued_jobs) * widths)])

    def area(cum: np.ndarray, x: np.ndarray, values: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 1)
        covered: np.ndarray = cum[i] + values[i] * (x - t[i])
        return covered

    busy_v = np.asarray(timeline.busy_gpus, dtype=float)
    queue_v = np.asarray(timeline.queued_jobs, dtype=float)
    b_at = area(busy_area, edges, busy_v)
    q_at = area(queue_area, edges, queue_v)
    span = np.diff(edges)
    out_busy = (np.diff(b_at) / span).tolist()
    out_queue = (np.diff(q_at) / span).tolist()
    return edges[:-1].tolist(), out_busy, out_queue


def _groups(outcomes: Iterable[JobOutcome], key) -> dict[str, GroupStats]:  # type: ignore[no-untyped-def]
    jcts: dict[str, list[float]] = defaultdict(list)
    slows: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        k = key(o)
        jcts[k].append(o.jct)
        slows[k].append(slowdown(o))
    return {k: GroupStats(len(v), float(np.mean(v)), float(np.mean(slows[k]))) for k, v in sorted(jcts.items())}


def _fairness(
    outcomes: tuple[JobOutcome, ...], per_tenant: dict[str, GroupStats], per_user: dict[str, GroupStats]
) -> tuple[float, str]:
    if len(per_tenant) >= 2:
        return jain(g.avg_slowdown for g in per_tenant.values()), "tenants"
    if len(per_user) >= 2:
        return jain(g.avg_slowdown for g in per_user.values()), "users"
    return jain(slowdown(o) for o in outcomes), "jobs"
