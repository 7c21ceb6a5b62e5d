"""Reads of telemetry by job: each GPU's utilization and memory over a job's run (the job page's sparklines), whether
a running job leaves its GPUs idle (the job page's warning, the dashboard's list), and the GPU-hours held idle.

A selector module of the telemetry app, and its room on purpose: the readings are telemetry's (rollups per GPU), the
intervals are the GPU ledger's (``Allocation``, which this app already reads), and both the jobs app's pages and the
dashboard read them, so the one rule (``telemetry.idle``, with the numbers from ``CORRAL_IDLE_GPU_*``) is applied
here once for all of them. The jobs app may read telemetry's selectors (never its services); the dashboard may read
every app. Reads only, each in a fixed number of queries.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import DateTimeField, F, FloatField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from portal.db import EpochSeconds
from portal.jobs.models import Allocation, Job
from portal.telemetry.models import Rollup, RollupPeriod
from scheduling.core.states import JobState
from telemetry.idle import GpuTime, IdleRule, IdleVerdict, judge

#: A run up to this long is drawn from 1-minute rollups; a longer one from 1-hour rollups (a month: 720 points).
MINUTE_SERIES_UP_TO = timedelta(hours=6)
#: The sparklines' size in SVG user units (the page scales them).
SPARK_WIDTH, SPARK_HEIGHT = 160.0, 32.0


def idle_rule() -> IdleRule:
    """The idle rule with the site's numbers, read at call time: ``CORRAL_IDLE_GPU_UTIL`` (percent),
    ``CORRAL_IDLE_GPU_WINDOW`` (seconds) and ``CORRAL_IDLE_GPU_MIN_COVERAGE`` (0-1)."""
    return IdleRule(
        threshold=float(getattr(settings, "CORRAL_IDLE_GPU_UTIL", 10.0)),
        window=float(getattr(settings, "CORRAL_IDLE_GPU_WINDOW", 1800)),
        min_coverage=float(getattr(settings, "CORRAL_IDLE_GPU_MIN_COVERAGE", 0.75)),
    )


# -- sparklines ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GpuSeries:
    """One GPU of a job's latest attempt, bucket by bucket over the time the job held it: mean ``gpu_util``
    (percent) and mean memory used (MiB), None where a bucket had no reading."""

    node: str
    index: int
    memory_mb: float
    period: int
    times: tuple[datetime, ...]
    util: tuple[float | None, ...]
    mem_used_mb: tuple[float | None, ...]

    @property
    def label(self) -> str:
        return f"{self.node} GPU {self.index}"

    @property
    def mean_util(self) -> float | None:
        values = [v for v in self.util if v is not None]
        return sum(values) / len(values) if values else None

    @property
    def last_util(self) -> float | None:
        return next((v for v in reversed(self.util) if v is not None), None)

    @property
    def peak_mem_mb(self) -> float | None:
        values = [v for v in self.mem_used_mb if v is not None]
        return max(values) if values else None

    @property
    def util_points(self) -> str:
        return sparkline_points(self.util, top=100.0)

    @property
    def mem_points(self) -> str:
        top = self.memory_mb or max((v for v in self.mem_used_mb if v is not None), default=0.0)
        return sparkline_points(self.mem_used_mb, top=top)


def sparkline_points(values: tuple[float | None, ...], *, top: float) -> str:
    """An SVG polyline's ``points`` for ``values`` scaled to 0..``top`` (clipped), left to right over the
    sparkline's width; missing readings are skipped (the line joins its neighbours). Empty without a reading."""
    if not values or top <= 0:
        return ""
    step = SPARK_WIDTH / max(1, len(values) - 1)
    points = []
    for i, value in enumerate(values):
        if value is None:
            continue
        y = SPARK_HEIGHT * (1.0 - min(1.0, max(0.0, value / top)))
        points.append(f"{i * step:.1f},{y:.1f}")
    if len(points) == 1:  # one reading: a short flat line, so it shows
        x_text, y_text = points[0].split(",")
        points.append(f"{float(x_text) + 2:.1f},{y_text}")
    return " ".join(points)


def job_gpu_series(*, job: Job, now: datetime) -> list[GpuSeries]:
    """Each GPU of ``job``'s latest attempt with its readings over the time it held it (till ``now`` while held):
    1-minute rollups for a run up to :data:`MINUTE_SERIES_UP_TO`, 1-hour rollups for a longer one. Empty for a job
    that never started. Two queries."""
    if job.attempt == 0:
        return []
    allocations = list(
        Allocation.objects.filter(job=job, attempt=job.attempt)
        .select_related("gpu", "node")
        .order_by("node__name", "gpu__index")
    )
    if not allocations:
        return []
    start = min(a.created_at for a in allocations)
    end = max(a.released_at or now for a in allocations)
    period = RollupPeriod.MINUTE if end - start <= MINUTE_SERIES_UP_TO else RollupPeriod.HOUR
    span = timedelta(seconds=int(period))
    rows = (
        Rollup.objects.filter(
            period=period, gpu_id__in=[a.gpu_id for a in allocations], bucket__gt=start - span, bucket__lt=end
        )
        .values_list("gpu_id", "bucket", "gpu_util", "mem_used_mb", "mem_total_mb")
        .order_by("gpu_id", "bucket")
    )
    by_gpu: defaultdict[int, list[tuple[datetime, float | None, float | None, float | None]]] = defaultdict(list)
    for gpu_id, bucket, util, mem_used, mem_total in rows:
        by_gpu[gpu_id].append((bucket, util, mem_used, mem_total))
    series = []
    for a in allocations:
        held_until = a.released_at or now
        points = [p for p in by_gpu[a.gpu_id] if a.created_at - span < p[0] < held_until]
        total = next((p[3] for p in reversed(points) if p[3]), None) or float(a.gpu.memory_mb)
        series.append(
            GpuSeries(
                node=a.node.name,
                index=a.gpu.index,
                memory_mb=total,
                period=int(period),
                times=tuple(p[0] for p in points),
                util=tuple(p[1] for p in points),
                mem_used_mb=tuple(p[2] for p in points),
            )
        )
    return series


# -- idle GPUs -----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class IdleJob:
    """A running job found idle now, with who runs it."""

    job_id: int
    name: str
    tenant: str
    user: str
    verdict: IdleVerdict


def _window_times(holds: list[tuple[int, int, datetime]], *, start: datetime, end: datetime) -> dict[int, GpuTime]:
    """Per job, the GPU-seconds of ``[start, end)`` its GPUs' 1-minute readings cover, and their weighted use.
    ``holds`` are (job id, GPU id, held since) of GPUs held now, so each GPU has one holder. One query."""
    holder = {gpu_id: (job_id, since) for job_id, gpu_id, since in holds}
    if not holder:
        return {}
    minute = timedelta(seconds=int(RollupPeriod.MINUTE))
    rows = Rollup.objects.filter(
        period=RollupPeriod.MINUTE,
        gpu_id__in=list(holder),
        gpu_util__isnull=False,
        bucket__gt=start - minute,
        bucket__lt=end,
    ).values_list("gpu_id", "bucket", "gpu_util")
    times: defaultdict[int, GpuTime] = defaultdict(GpuTime)
    for gpu_id, bucket, util in rows:
        if util is None:  # excluded by the query; the column is nullable
            continue
        job_id, since = holder[gpu_id]
        overlap = (min(bucket + minute, end) - max(bucket, start, since)).total_seconds()
        if overlap > 0:
            times[job_id] += GpuTime(covered=overlap, used=overlap * util / 100.0)
    return dict(times)


def _active_holds(jobs: QuerySet[Job]) -> list[tuple[int, int, datetime]]:
    return list(
        Allocation.objects.filter(
            released_at__isnull=True, job__in=jobs.filter(state=JobState.RUNNING.value).values("pk")
        ).values_list("job_id", "gpu_id", "created_at")
    )


def job_idle(*, job: Job, now: datetime) -> IdleVerdict | None:
    """Whether running ``job`` leaves the GPUs it holds idle over the rule's window ending ``now`` (see
    :func:`telemetry.idle.judge`); None for a job that is not running, is busy, or is not measured enough. Two
    queries."""
    if job.state != JobState.RUNNING.value:
        return None
    rule = idle_rule()
    holds = _active_holds(Job.objects.filter(pk=job.pk))
    times = _window_times(holds, start=now - timedelta(seconds=rule.window), end=now)
    return judge(rule, gpus=len(holds), time=times.get(job.pk, GpuTime()))


def idle_jobs(*, jobs: QuerySet[Job], now: datetime) -> list[IdleJob]:
    """The running jobs among ``jobs`` that are idle now, least used first. Three queries whatever their number."""
    rule = idle_rule()
    holds = _active_holds(jobs)
    times = _window_times(holds, start=now - timedelta(seconds=rule.window), end=now)
    held: defaultdict[int, int] = defaultdict(int)
    for job_id, _, _ in holds:
        held[job_id] += 1
    verdicts = {
        job_id: verdict
        for job_id, count in held.items()
        if (verdict := judge(rule, gpus=count, time=times.get(job_id, GpuTime()))) is not None
    }
    rows = Job.objects.filter(pk__in=list(verdicts)).values_list("pk", "name", "tenant__slug", "user__username")
    found = [
        IdleJob(job_id=pk, name=name, tenant=tenant, user=user, verdict=verdicts[pk]) for pk, name, tenant, user in rows
    ]
    return sorted(found, key=lambda j: (j.verdict.util, -j.verdict.gpus, j.job_id))


@dataclass(frozen=True, slots=True)
class WastedRow:
    """GPU-seconds a job held idle in a window (every reading below the rule's threshold counts its overlap)."""

    job_id: int
    name: str
    tenant: str
    user: str
    state: str
    seconds: float

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600.0


def wasted_gpu_time(*, jobs: QuerySet[Job], start: datetime, end: datetime, period: int) -> list[WastedRow]:
    """Per job of ``jobs`` with any, the GPU-seconds in ``[start, end)`` that it held a GPU whose reading (a rollup
    of ``period`` seconds: minutes for a day, hours for longer) was below the idle threshold; most first. Time
    without a reading is not counted: unmeasured is not idle. One aggregate query and one for the jobs' names."""
    rule = idle_rule()
    span = timedelta(seconds=period)
    w_start, w_end = Value(start.timestamp()), Value(end.timestamp())
    allocations = Allocation.objects.filter(
        Q(created_at__lt=end) & (Q(released_at__isnull=True) | Q(released_at__gt=start)),
        job__in=jobs.values("pk"),
    ).annotate(
        a_start=Greatest(EpochSeconds(F("created_at")), w_start),
        a_end=Least(Coalesce(EpochSeconds(F("released_at")), w_end), w_end),
    )
    b_start = EpochSeconds(F("bucket"))
    overlap = Least(b_start + Value(float(period)), OuterRef("a_end")) - Greatest(b_start, OuterRef("a_start"))
    idle_readings = Rollup.objects.filter(
        period=period,
        gpu_id=OuterRef("gpu_id"),
        gpu_util__lt=rule.threshold,  # reading_is_idle, in SQL
        bucket__gt=OuterRef("created_at") - span,
        bucket__lt=Coalesce(OuterRef("released_at"), Value(end, output_field=DateTimeField())),
    ).filter(bucket__gt=start - span, bucket__lt=end)
    idle = Subquery(
        idle_readings.values("gpu_id").annotate(total=Sum(overlap, output_field=FloatField())).values("total"),
        output_field=FloatField(),
    )
    per_job = dict(
        allocations.annotate(idle=idle)
        .values("job_id")
        .annotate(seconds=Sum("idle", output_field=FloatField()))
        .filter(seconds__gt=0)
        .values_list("job_id", "seconds")
        .order_by()
    )
    rows = Job.objects.filter(pk__in=list(per_job)).values_list("pk", "name", "tenant__slug", "user__username", "state")
    found = [WastedRow(pk, name, tenant, user, state, per_job[pk]) for pk, name, tenant, user, state in rows]
    return sorted(found, key=lambda r: (-r.seconds, r.job_id))
