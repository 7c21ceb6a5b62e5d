"""Reads behind the dashboard page: job completion and queueing times, GPU-hours, and the cluster's series.

A fixed number of queries whatever the window holds (about a dozen), each an aggregate or one narrow row per job:
per-job durations are needed for medians and percentiles, which SQLite cannot compute, so those are the only rows
read one by one; allocations and telemetry are summed in the database (:mod:`portal.dashboards.usage`).

Who sees what comes from the one place that says it: ``Job.objects.visible_to`` for jobs (and with them tenants'
and users' rows), ``Tenant.objects.visible_to`` for the tenant filter. Cluster-wide utilization, allocation and the
queue are shown to every signed-in user, as the node list and the job list already show them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db.models import BooleanField, Count, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.db.models.functions import TruncHour, TruncMinute

from portal.dashboards.stats import (
    Cluster,
    Dashboard,
    GroupStats,
    Series,
    Spread,
    Usage,
    Window,
    floor_time,
    step_series,
)
from portal.dashboards.usage import usage_by_owner
from portal.db import EpochSeconds
from portal.jobs.models import TERMINAL_STATES, Allocation, Job, JobEvent
from portal.nodes.models import Gpu
from portal.telemetry.models import Rollup, RollupPeriod
from portal.tenants.models import Tenant
from scheduling.core.states import JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

#: The windows a dashboard offers, shortest first: key -> (length, label, rollup period read for it).
WINDOWS: dict[str, tuple[timedelta, str, int]] = {
    "1h": (timedelta(hours=1), "last hour", RollupPeriod.MINUTE.value),
    "6h": (timedelta(hours=6), "last 6 hours", RollupPeriod.MINUTE.value),
    "24h": (timedelta(hours=24), "last 24 hours", RollupPeriod.MINUTE.value),
    "7d": (timedelta(days=7), "last 7 days", RollupPeriod.HOUR.value),
    "30d": (timedelta(days=30), "last 30 days", RollupPeriod.HOUR.value),
}
#: The longest window chosen when none is asked for: past a week, hourly points and a month's figures are a choice.
LONGEST_DEFAULT = "7d"
#: The window chosen for a reader who can see no job yet: a day of the cluster's utilization.
NO_JOBS_DEFAULT = "24h"


def window_of(key: str, *, now: datetime) -> Window:
    """The window ``key`` (one of :data:`WINDOWS`) ending at ``now``."""
    length, label, period = WINDOWS[key]
    return Window(key=key, label=label, start=now - length, end=now, period=period)


def default_window(*, user: User | AnonymousUser, tenant: Tenant | None = None, now: datetime) -> str:
    """The window shown when none is asked for: the shortest of :data:`WINDOWS` that holds every job the reader can
    see (of ``tenant`` only, when given), so a cluster that has run for twenty minutes opens on the last hour
    rather than on a sliver of a week (#18); at most :data:`LONGEST_DEFAULT`, and :data:`NO_JOBS_DEFAULT` without
    any job. One query, on the submission-time index."""
    jobs = Job.objects.visible_to(user)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    first = jobs.order_by("submitted_at").values_list("submitted_at", flat=True).first()
    if first is None:
        return NO_JOBS_DEFAULT
    span = now - first
    for key, (length, _, _) in WINDOWS.items():
        if span <= length or key == LONGEST_DEFAULT:
            return key
    return LONGEST_DEFAULT  # not reached: LONGEST_DEFAULT is one of WINDOWS


def dashboard_tenants(*, user: User | AnonymousUser) -> list[Tenant]:
    """The tenants ``user`` may filter the dashboard by."""
    return list(Tenant.objects.visible_to(user))


@dataclass
class _Group:
    """Per tenant or user, what is gathered before it is summarised."""

    finished: int = 0
    jct: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)

    def stats(self, label: str) -> GroupStats:
        return GroupStats(
            label=label, finished=self.finished, jct=Spread.of(self.jct), queue=Spread.of(self.queue), usage=self.usage
        )


@dataclass
class _Gather:
    """The three levels the page shows, filled in one pass over each query's rows."""

    total: _Group = field(default_factory=_Group)
    tenants: defaultdict[int, _Group] = field(default_factory=lambda: defaultdict(_Group))
    users: defaultdict[int, _Group] = field(default_factory=lambda: defaultdict(_Group))

    def groups(self, tenant_id: int, user_id: int) -> tuple[_Group, _Group, _Group]:
        return self.total, self.tenants[tenant_id], self.users[user_id]


def dashboard_get(*, user: User | AnonymousUser, window: Window, tenant: Tenant | None = None) -> Dashboard:
    """The dashboard of ``user`` for ``window``: their visible jobs (of ``tenant`` only, when given; the caller has
    checked it is one of :func:`dashboard_tenants`), and the cluster-wide figures."""
    jobs = Job.objects.visible_to(user)
    if tenant is not None:
        jobs = jobs.filter(tenant=tenant)
    gather = _Gather()
    _add_completion_times(gather, jobs, window)
    _add_queueing_delays(gather, jobs, window)
    for (tenant_id, user_id), usage in usage_by_owner(jobs=jobs, window=window).items():
        for group in gather.groups(tenant_id, user_id):
            group.usage += usage
    tenant_names = dict(Tenant.objects.filter(pk__in=list(gather.tenants)).values_list("pk", "slug"))
    user_names = dict(get_user_model().objects.filter(pk__in=list(gather.users)).values_list("pk", "username"))
    if tenant is not None:
        scope = tenant.slug
    else:
        scope = "all tenants" if user.is_staff else "your tenants"
    return Dashboard(
        window=window,
        scope=scope,
        total=gather.total.stats(scope),
        tenants=_rows(gather.tenants, tenant_names),
        users=_rows(gather.users, user_names),
        cluster=cluster_get(window=window),
    )


def _rows(groups: dict[int, _Group], names: dict[int, str]) -> list[GroupStats]:
    return sorted((g.stats(names.get(pk, f"#{pk}")) for pk, g in groups.items()), key=lambda s: s.label)


def _add_completion_times(gather: _Gather, jobs: QuerySet[Job], window: Window) -> None:
    """Jobs that finished (succeeded, failed or cancelled) in the window, and the JCT (finish - submit) of those
    that ran. "Ran" is the history export's rule (``job_history_jobs``): started, or GPU-seconds from an earlier
    attempt, so a job cancelled while waiting counts as finished but has no JCT to pull the figures down."""
    ran = ExpressionWrapper(Q(started_at__isnull=False) | Q(attained_service__gt=0), output_field=BooleanField())
    rows = (
        jobs.filter(state__in=TERMINAL_STATES, finished_at__gte=window.start, finished_at__lt=window.end)
        .annotate(ran=ran, jct=EpochSeconds(F("finished_at")) - EpochSeconds(F("submitted_at")))
        .values_list("pk", "tenant_id", "user_id", "jct", "ran")
        .order_by()
    )
    # The pk is selected only so that a member's DISTINCT (see ``visible_to``) never folds two jobs into one row.
    for _pk, tenant_id, user_id, jct, did_run in rows.iterator(chunk_size=10_000):
        for group in gather.groups(tenant_id, user_id):
            group.finished += 1
            if did_run:
                group.jct.append(max(0.0, jct))


def _add_queueing_delays(gather: _Gather, jobs: QuerySet[Job], window: Window) -> None:
    """Jobs whose *first* start fell in the window, and how long each waited for it (first start - submit).

    ``Job.started_at`` is the latest attempt's start, so a requeued job would look as if it had just waited. The
    first start is read from the job's earliest :class:`Allocation` rather than its first ``started`` event: the
    scheduler writes both in one transaction (``portal.scheduler.apply``), but allocations are also what the
    GPU-hours are read from (one source for "when did it hold GPUs"), they are never rewritten, and the event table
    holds every state change of every job, unindexed by kind.
    """
    rows = (
        Allocation.objects.filter(job__in=jobs.values("pk"), job__submitted_at__lt=window.end)
        .values("job_id", "job__tenant_id", "job__user_id", "job__submitted_at")
        .annotate(first=Min("created_at"))
        .filter(first__gte=window.start, first__lt=window.end)
        .annotate(delay=EpochSeconds(Min("created_at")) - EpochSeconds(F("job__submitted_at")))
        .values_list("job__tenant_id", "job__user_id", "delay")
        .order_by()
    )
    for tenant_id, user_id, delay in rows.iterator(chunk_size=10_000):
        for group in gather.groups(tenant_id, user_id):
            group.queue.append(max(0.0, delay))


def cluster_get(*, window: Window) -> Cluster:
    """Cluster-wide utilization, allocation and jobs waiting over ``window``, in seven queries."""
    period = window.period
    grid_start = floor_time(window.start, period)
    trunc = TruncMinute if period == RollupPeriod.MINUTE else TruncHour
    per_bucket = (
        Rollup.objects.filter(period=period, bucket__gte=grid_start, bucket__lt=window.end, gpu_util__isnull=False)
        .values("bucket")
        .annotate(total=Sum("gpu_util"), n=Count("gpu_util"))
        .order_by("bucket")
    )
    buckets = [(r["bucket"], r["total"], r["n"]) for r in per_bucket]
    readings = sum(n for _, _, n in buckets)
    util = sum(total for _, total, _ in buckets) / readings if readings else None
    return Cluster(
        gpus_present=Gpu.objects.filter(present=True).count(),
        util=util,
        util_series=Series(tuple(b for b, _, _ in buckets), tuple(t / n for _, t, n in buckets)),
        allocated_series=_allocated_series(window, grid_start, trunc),
        pending_series=_pending_series(window, grid_start, trunc),
    )


def _allocated_series(window: Window, grid_start: datetime, trunc: type[TruncMinute] | type[TruncHour]) -> Series:
    """GPUs allocated at each bucket boundary: the count at the start, then allocations created minus released per
    bucket, grouped by the database (three aggregate queries, no allocation row read)."""
    initial = Allocation.objects.filter(created_at__lt=grid_start).exclude(released_at__lte=grid_start).count()
    deltas: defaultdict[datetime, int] = defaultdict(int)
    for column, sign in (("created_at", 1), ("released_at", -1)):
        in_window = {f"{column}__gte": grid_start, f"{column}__lt": window.end}
        counts = Allocation.objects.filter(**in_window).values(b=trunc(column)).annotate(n=Count("pk")).order_by()
        for row in counts:
            deltas[row["b"]] += sign * row["n"]
    if initial == 0 and not deltas:
        return Series()
    return step_series(start=grid_start, end=window.end, period=window.period, initial=initial, deltas=deltas)


def _pending_series(window: Window, grid_start: datetime, trunc: type[TruncMinute] | type[TruncHour]) -> Series:
    """Jobs waiting at each bucket boundary, for any window: every state change writes a :class:`JobEvent` and
    events are kept, so the queue's history is the jobs that entered ``pending`` minus those that left it, grouped
    per bucket by the database (two queries, no event row read). Scheduling rounds, the earlier source, are pruned
    after a day, which left the chart empty for longer windows (#18).

    The level at ``grid_start`` is counted back from the jobs waiting now, so the events before the window are never
    read. A job that came and went between two boundaries does not show, as with the allocation line.
    """
    pending = JobState.PENDING.value
    entered, left = Q(to_state=pending), Q(from_state=pending)
    changes = (
        JobEvent.objects.filter(entered | left, at__gte=grid_start)
        .values(b=trunc("at"))
        .annotate(n_in=Count("pk", filter=entered), n_out=Count("pk", filter=left))
        .order_by()
    )
    deltas: defaultdict[datetime, int] = defaultdict(int)
    since_start = 0  # every change from grid_start to now, including those after window.end
    for row in changes:
        change = row["n_in"] - row["n_out"]
        since_start += change
        if row["b"] < window.end:
            deltas[row["b"]] += change
    waiting_now = Job.objects.filter(state=pending).count()
    initial = max(0, waiting_now - since_start)
    if initial == 0 and not deltas:
        return Series()
    return step_series(start=grid_start, end=window.end, period=window.period, initial=initial, deltas=deltas)
