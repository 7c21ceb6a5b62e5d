"""Reads of jobs for views, the API and the scheduling adapter. Visibility always goes through
``Job.objects.visible_to``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, Exists, F, OuterRef, Prefetch, Q, QuerySet

from portal.jobs.models import Allocation, Job, JobLogChunk, JobTask, executed_seconds
from portal.jobs.waiting import start_in_words
from portal.nodes.models import NodeState
from portal.rounds import forecast_ran_at
from scheduling.core.durations import format_duration
from scheduling.core.forecast import StartOutlook
from scheduling.core.states import JobState
from scheduling.sim.trace import TraceJob

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


def job_list(*, user: User | AnonymousUser) -> QuerySet[Job]:
    """Jobs ``user`` may see, with what list pages show, in one query."""
    return Job.objects.visible_to(user).select_related("tenant", "user")


def job_get(*, user: User | AnonymousUser, job_id: int) -> Job | None:
    """One job if ``user`` may see it, else None (callers answer 404: a job of another tenant does not exist)."""
    return job_list(user=user).filter(pk=job_id).first()


@dataclass(frozen=True, slots=True)
class TimeLimit:
    """A job's time limit as pages show it: ``limit`` ("2h"), and while it runs, ``left`` ("1h 12m 5s")."""

    limit: str
    left: str | None


def job_time_limit(*, job: Job, now: datetime) -> TimeLimit | None:
    """The job's time limit for display, with the time its current attempt has left while it runs; None when the
    job has no limit."""
    if job.time_limit is None:
        return None
    left = None
    if job.state == JobState.RUNNING.value and job.started_at is not None:
        left = format_duration(max(0.0, job.time_limit - (now - job.started_at).total_seconds()))
    return TimeLimit(limit=format_duration(job.time_limit), left=left)


@dataclass(frozen=True, slots=True)
class StartEstimate:
    """When a pending job should start, as pages, the API and the CLI say it. ``outlook`` is a
    :class:`~scheduling.core.forecast.StartOutlook` value, or ``""`` before the first forecast; ``at`` is set when
    the forecast gave a time."""

    outlook: str
    at: datetime | None
    text: str
    brief: str = ""  # for lists: "Starts in about 2h 10m." when a time is known, else nothing
    # Where 8 in 10 such estimates came true in trace replays (``scheduling.core.start_range``); None without a time
    # or a calibration, and when the job should start at the next round.
    earliest: datetime | None = None
    latest: datetime | None = None


#: Forecast periods after which an estimate says how old it is (the beat or the workers may be down).
STALE_FORECASTS = 4
#: What every estimate assumes, shown next to it: the forecast knows nothing of jobs not yet submitted.
START_ESTIMATE_BASIS = (
    "An estimate: it assumes no other jobs are submitted and that running jobs end at their time limit or when "
    "similar past jobs did. The likely range, or how much later it can be, is measured: in replays of real traces "
    "8 in 10 such estimates came true within the range."
)


def job_start_estimate(*, job: Job, now: datetime) -> StartEstimate | None:
    """The latest start forecast of a pending job in words; None when the job is not pending."""
    if job.state != JobState.PENDING.value:
        return None
    forecast = job.start_forecast
    if forecast is None:
        every = format_duration(settings.CORRAL_FORECAST_EVERY)
        return StartEstimate("", None, f"Working out when it should start (every {every}).")
    outlook, at = forecast
    if outlook == StartOutlook.ESTIMATED and at is not None:
        text, brief, likely = start_in_words(at, now)
        # Unchanged forecasts are not rewritten: the latest refresh that confirmed them says how fresh they are.
        made = max((t for t in (job.forecast_at, forecast_ran_at()) if t is not None), default=None)
        age = (now - made).total_seconds() if made is not None else 0.0
        if age > STALE_FORECASTS * settings.CORRAL_FORECAST_EVERY:  # no forecast ran since: say how old this one is
            text += f" Forecast made {format_duration(round(age / 60) * 60)} ago."
        if likely is None:
            return StartEstimate(outlook, at, text, brief)
        return StartEstimate(outlook, at, text, brief, *likely)
    texts: dict[str, str] = {
        StartOutlook.UNKNOWN_END: (
            "No start time yet: the GPUs it waits for are held by jobs that have no time limit and no similar "
            "past jobs to estimate from."
        ),
        StartOutlook.BEYOND_HORIZON: (
            f"Not within the next {format_duration(settings.CORRAL_FORECAST_HORIZON)} at the current pace."
        ),
        StartOutlook.BEYOND_REACH: (
            "Too far back in the queue to say: the forecast stops after a set number of job ends and priority "
            "changes (CORRAL_FORECAST_WORK), and this job had not started by then."
        ),
        StartOutlook.NO_CAPACITY: (
            "Not on the nodes up now: even with every job gone they could not hold it in a shape it can use."
        ),
    }
    return StartEstimate(outlook, None, texts.get(outlook, ""))


def cordon_rule() -> str:
    """What a soft-cordoned GPU still takes, for pages and help texts (``CORRAL_CORDON_MAX_TIME_LIMIT``)."""
    longest = settings.CORRAL_CORDON_MAX_TIME_LIMIT
    if longest <= 0:
        return "takes no new jobs"
    return f"takes only jobs with a time limit ≤ {format_duration(longest)}"


def job_log_read(*, job: Job, offset: int = 0, limit: int = 1_000_000, end: int | None = None) -> tuple[str, int]:
    """Output of ``job`` from character ``offset``: returns (text, next offset). At most about ``limit``
    characters per call so a follower of a chatty job gets it in pieces; never past character ``end`` when given
    (a reader of earlier output stops where the text it already shows begins).

    Offsets count everything the job printed, stored or not: ``job_log_append`` may have dropped the middle of a
    long log. Where the text crosses dropped output it holds one marker line saying how much is missing, and a
    reader whose offset lies in the dropped range goes on at the first character kept after it. The next offset
    is never behind what was returned nor inside a gap, so followers neither re-read nor wait for output that
    no longer exists.
    """
    offset = max(0, offset)
    stop = job.log_size if end is None else max(offset, min(end, job.log_size))
    chunks = JobLogChunk.objects.filter(job=job, offset__gte=_chunk_start(job, offset), offset__lt=stop)
    parts: list[str] = []
    size = 0
    position = offset  # how far the reader has got
    last_char = "\n" if offset == 0 else None  # the character before ``position``, when known: the marker's own line
    for chunk in chunks.order_by("offset").iterator():
        chunk_end = min(chunk.offset + len(chunk.data), stop)
        if chunk_end <= position:  # the chunk before ``offset``, which _chunk_start may find
            last_char = chunk.data[-1:] if chunk_end == position else None
            continue
        if chunk.offset > position:
            parts.append(_log_gap_marker(chunk.offset - position, last_char))
        data = chunk.data[max(0, position - chunk.offset) : stop - chunk.offset]
        parts.append(data)
        size += len(data)
        position, last_char = chunk_end, data[-1:]
        if size >= limit:
            break
    else:
        if position < stop:  # the end itself is gone (job_log_append keeps it; a hand-pruned log may not)
            parts.append(_log_gap_marker(stop - position, last_char))
            position = stop
    return "".join(parts), position if position > offset else min(offset, job.log_size)


def _log_gap_marker(dropped: int, last_char: str | None) -> str:
    """The line shown where ``dropped`` characters of output are no longer stored, on a line of its own."""
    cap = settings.CORRAL_JOB_LOG_MAX_CHARS
    kept = f"the {cap:,} characters" if cap > 0 else "what"
    line = (
        f"[... {dropped:,} characters of output dropped: this job printed more than {kept} Corral keeps per job;"
        " its start and its latest output are kept ...]\n"
    )
    return line if last_char == "\n" else "\n" + line


def _chunk_start(job: Job, offset: int) -> int:
    """Offset of the last chunk that starts at or before character ``offset``: the one holding it, or the one
    before the gap it lies in when that output was dropped."""
    start = (
        JobLogChunk.objects.filter(job=job, offset__lte=offset).order_by("-offset").values_list("offset", flat=True)
    ).first()
    return start if start is not None else 0


#: A finished job's state in the words of the shared trace schema's ``status`` column.
TRACE_STATUS = {
    JobState.SUCCEEDED.value: "completed",
    JobState.FAILED.value: "failed",
    JobState.CANCELLED.value: "killed",
}


def job_history_jobs(*, since: datetime | None = None, until: datetime | None = None) -> QuerySet[Job]:
    """The jobs :func:`job_history_trace` exports: finished, submitted in ``[since, until)``, and ran at some point
    (the what-if form asks it whether a window holds any)."""
    jobs = Job.objects.filter(state__in=TRACE_STATUS, finished_at__isnull=False).filter(
        Q(started_at__isnull=False) | Q(attained_service__gt=0)
    )
    if since is not None:
        jobs = jobs.filter(submitted_at__gte=since)
    if until is not None:
        jobs = jobs.filter(submitted_at__lt=until)
    return jobs


def job_history_trace(*, since: datetime | None = None, until: datetime | None = None) -> Iterator[TraceJob]:
    """The jobs of :func:`job_history_rows`, without their share columns (the whole-GPU replay reads no more)."""
    return (job for job, _, _ in job_history_rows(since=since, until=until))


#: One exported job: its trace row, its share of one GPU (None: whole GPUs) and its workload class (issue #17).
HistoryRow = tuple[TraceJob, float | None, str]


def job_history_rows(*, since: datetime | None = None, until: datetime | None = None) -> Iterator[HistoryRow]:
    """Finished jobs submitted in ``[since, until)`` as a trace in the shared schema, oldest submission first.

    An admin replays this with ``corral simulate`` to compare policies on the cluster's own history. ``duration``
    is the time the job held its GPUs over all attempts, so a preempted or retried job counts what it really ran;
    ``queue_delay`` is the rest of its time from submission to the end. Jobs that never ran (cancelled or failed
    while pending) are left out: a replay has nothing to schedule for them. Submit times count from the first job
    exported. Rows are read in chunks, so an export of years of history streams in constant memory. Each job comes
    with its share of one GPU (``gpu_fraction``; None for whole GPUs) and its workload class, which the export writes
    as ``gpu_milli`` and ``workload_class`` and the what-if sharing replay reads (issue #17).
    """
    rows = job_history_jobs(since=since, until=until).order_by("submitted_at", "pk").values_list(
        "pk", "user__username", "tenant__slug", "name", "gpus", "state", "submitted_at", "started_at",
        "finished_at", "attained_service", "gpu_fraction", "workload_class",
    )  # fmt: skip
    origin: datetime | None = None
    for row in rows.iterator(2000):
        pk, username, tenant, name, gpus, state, submitted, started, finished, attained, fraction, klass = row
        assert finished is not None  # filtered on finished_at__isnull=False
        origin = origin or submitted
        duration = executed_seconds(gpus, attained, started, finished)
        job = TraceJob(
            job_id=str(pk),
            submit_time=(submitted - origin).total_seconds(),
            duration=duration,
            gpus=gpus,
            user=username,
            tenant=tenant,
            status=TRACE_STATUS[state],
            name=name,
            queue_delay=max(0.0, (finished - submitted).total_seconds() - duration),
        )
        yield job, fraction, klass


def jobs_with_placement(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """Prefetch what the job serializer shows about placement, so a page of jobs costs a fixed number of queries."""
    return queryset.prefetch_related(Prefetch("tasks", queryset=JobTask.objects.select_related("node")))


# -- what the live scheduler reads ---------------------------------------------------------------------------------
#: Cancelled jobs are left out of what policies learn: their service was cut short by a person, not by their work.
LEARNED_STATES = (JobState.SUCCEEDED.value, JobState.FAILED.value)


def attempt_size(job: Job) -> int:
    """GPUs the job's current attempt holds (or held): its minimum, unless it is elastic (issue #19, one query)."""
    if job.max_gpus is None:
        return job.gpus
    return Allocation.objects.filter(job=job, attempt=job.attempt).count() or job.gpus


def stopping_allocations() -> QuerySet[Allocation]:
    """Allocations still held by an attempt that is over: the job is no longer running, or runs a later attempt.

    The one definition of a *stopping* (or, on a node that is down, *fenced*) GPU. Such a GPU is not free (its row
    is active), and it still counts against its tenant's cap and guarantee, until the agent that ran the task reports
    the process group gone, the node re-registers with a clean slate, or an admin releases it
    (``portal.jobs.ledger``)."""
    return Allocation.objects.filter(released_at__isnull=True).exclude(
        job__state=JobState.RUNNING.value, attempt=F("job__attempt")
    )


@dataclass(frozen=True, slots=True)
class StoppingHold:
    """GPUs of one user's attempts that are over, on nodes in one state (``fenced``: the node is down)."""

    tenant: str
    user: str
    fenced: bool
    gpus: int


def stopping_holds() -> list[StoppingHold]:
    """GPUs held by attempts that are over, per tenant, user and whether their node is down: what the scheduler
    counts against caps besides the running jobs, and what pending jobs are told is being freed. One query."""
    rows = (
        stopping_allocations()
        .filter(compute_percent__isnull=True)  # shares count by their fraction (portal.jobs.share_selectors)
        .values("job__tenant__slug", "job__user__username", "node__state")
        .annotate(n=Count("pk"))
        .values_list("job__tenant__slug", "job__user__username", "node__state", "n")
    )
    return [StoppingHold(tenant, user, state == NodeState.DOWN, n) for tenant, user, state, n in rows]


def fenced_allocations() -> QuerySet[Allocation]:
    """Allocations of *lost* tasks still held: their node went down or their agent restarted, and nobody has yet
    confirmed that their processes are gone. A node with such rows shows as *fenced*."""
    lost = JobTask.objects.filter(
        job_id=OuterRef("job_id"), attempt=OuterRef("attempt"), node_id=OuterRef("node_id"), state="lost"
    )
    return Allocation.objects.filter(released_at__isnull=True).filter(Exists(lost))


def job_stopping_gpus(*, job: Job) -> list[str]:
    """The GPUs ``job``'s attempts that are over still hold, as "node GPU index" labels in node and index order:
    what its page shows while the job is *stopping* (empty once every process is confirmed gone). One query."""
    rows = (
        stopping_allocations()
        .filter(job=job)
        .order_by("node__name", "gpu__index")
        .values_list("node__name", "gpu__index")
    )
    return [f"{node} GPU {index}" for node, index in rows]


def jobs_awaiting_previous_attempt(*, job_ids: list[int] | None = None) -> set[int]:
    """Jobs not running whose earlier attempt still holds GPUs on a node that is not down: a rank of it may still
    be alive, so the job must not start again yet (it would run twice). A rank on a node that is down is fenced
    instead: that node gets no work until its agent re-registers having killed what it ran. One query."""
    rows = stopping_allocations().exclude(node__state=NodeState.DOWN).exclude(job__state=JobState.RUNNING.value)
    if job_ids is not None:
        rows = rows.filter(job_id__in=job_ids)
    return set(rows.values_list("job_id", flat=True).distinct())


def jobs_finished_since(*, watermark: tuple[datetime, int] | None, limit: int) -> list[Job]:
    """Finished jobs a policy learns from (succeeded or failed), oldest first: those after ``watermark`` (a
    ``(finished_at, id)`` pair), or the most recent ``limit`` when there is none yet. One query."""
    finished = Job.objects.filter(state__in=LEARNED_STATES, finished_at__isnull=False).select_related("tenant", "user")
    if watermark is None:
        return list(finished.order_by("-finished_at", "-pk")[:limit])[::-1]
    at, pk = watermark
    later = finished.filter(finished_at__gt=at) | finished.filter(finished_at=at, pk__gt=pk)
    return list(later.order_by("finished_at", "pk"))


def pending_start_overdue(*, now: datetime) -> bool:
    """Whether a pending job's expected start has passed (its forecast is late: the jobs ahead ran long). One query
    over the pending rows."""
    return Job.objects.filter(state=JobState.PENDING.value, expected_start_at__lt=now).exists()
