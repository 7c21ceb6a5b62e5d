"""What a waiting job shows: why it waits (the scheduler's reason, written each round) and when it should start
(the start forecast, written every ``CORRAL_FORECAST_EVERY`` seconds, and its likely range in words). Both writes
touch only pending jobs' reason and forecast columns, never their state, so they need no row locks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, transaction

from portal.db import EpochSeconds
from portal.jobs.models import Job
from scheduling.core.durations import format_duration
from scheduling.core.forecast import StartOutlook
from scheduling.core.model import WaitReason
from scheduling.core.start_range import keeps_shown, start_range
from scheduling.core.states import JobState

#: Rows written per UPDATE statement by the forecast.
_BATCH = 500
#: Above this many jobs, reads filter on state rather than on a list of ids.
_IN_LIST_MAX = 2000


def reason_text(code: WaitReason, detail: str) -> str:
    """What a pending job shows: the reason's label, then the core's detail in brackets (fits the column)."""
    return (f"{code.label} ({detail})" if detail else code.label)[:255]


#: Jobs whose reason keeps its code but changes its detail ("needs 4 GPUs; 3 free" → "2 free") rewritten per round.
DETAIL_REWRITES_PER_ROUND = 2000


def jobs_set_wait_reasons(*, reasons: Mapping[int, tuple[WaitReason, str]]) -> None:
    """Write each still-pending job's reason (code and detail), only where it changed, one UPDATE per distinct text.

    A changed *code* is always written. A detail alone (its free-GPU count, the GPUs being freed) can change for
    every waiting job at once, every round; rewriting 50,000 rows each time cost seconds per round. So at most
    :data:`DETAIL_REWRITES_PER_ROUND` such rows are written per round, in the order given (the core's walk: the
    head of the queue first); the rest catch up over the next rounds.
    """
    pending = Job.objects.filter(state=JobState.PENDING.value)
    if len(reasons) <= _IN_LIST_MAX:  # a long IN list costs more to bind than reading every pending row's reason
        pending = pending.filter(pk__in=list(reasons))
    rows = pending.values_list("pk", "reason_code", "reason")
    current = {pk: (stored_code, stored) for pk, stored_code, stored in rows}
    groups: dict[tuple[WaitReason, str], list[int]] = defaultdict(list)
    detail_budget = DETAIL_REWRITES_PER_ROUND
    for job_id, (code, detail) in reasons.items():
        text = reason_text(code, detail)
        stored_code, stored = current.get(job_id, (None, None))
        if stored is None or stored == text:
            continue
        if stored_code == code.value:
            if detail_budget <= 0:
                continue
            detail_budget -= 1
        groups[(code, text)].append(job_id)
    for (code, text), ids in groups.items():
        _write_reason(ids, code, text)


def _write_reason(ids: list[int], code: WaitReason, text: str) -> None:
    """Set one reason on these pending jobs; on PostgreSQL the ids go as one array parameter, not an IN list."""
    if connection.vendor == "postgresql" and len(ids) > _IN_LIST_MAX:
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE jobs_job SET reason_code = %s, reason = %s WHERE id = ANY(%s::bigint[]) AND state = %s",
                [code.value, text, ids, JobState.PENDING.value],
            )
        return
    Job.objects.filter(pk__in=ids, state=JobState.PENDING.value).update(reason_code=code.value, reason=text)


@dataclass(frozen=True, slots=True)
class StartForecast:
    """One pending job's forecast: the outlook, and when it should start (seconds since the epoch) if known."""

    outlook: StartOutlook
    at: float | None


def jobs_set_start_forecasts(*, forecasts: Mapping[int, StartForecast], made_at: datetime) -> int:
    """Store each pending job's start forecast where it changed, stamped ``made_at``; returns how many were written.

    A forecast older than the job's entry into the queue is never shown, so a requeued job always gets its new one.
    Otherwise only a changed outlook, or a start that moved enough to be worth showing, is written. *Enough* is
    :func:`scheduling.core.start_range.keeps_shown`: by half the time still to wait, at least a minute. In trace
    replays (``bench/start_estimates.py``, docs/benchmarks.md) writing every change of a minute moved a waiting
    job's estimate 20 to 175 times per wait (#18: "it read 00:02, 00:03, 00:04, 00:07, 00:08") and was no more
    right than this. Writing less also keeps a refresh cheap: with 50,000 pending jobs, rewriting every row every
    refresh cost most of the refresh. How fresh the answers are overall is :func:`portal.rounds.forecast_ran_at`.
    """
    stored = Job.objects.filter(state=JobState.PENDING.value)
    if len(forecasts) <= _IN_LIST_MAX:
        stored = stored.filter(pk__in=list(forecasts))
    rows = stored.values_list(
        "pk", "start_outlook", EpochSeconds("expected_start_at"), EpochSeconds("forecast_at"), EpochSeconds("queued_at")
    )
    now = made_at.timestamp()
    changed: list[tuple[int, StartForecast]] = []
    for pk, outlook, at, forecast_at, queued_at in rows:
        new = forecasts.get(pk)
        if new is None:
            continue
        requeued = forecast_at is None or (queued_at is not None and forecast_at < queued_at)
        moved = (at is None) != (new.at is None) or (
            at is not None and new.at is not None and not keeps_shown(at, new.at, now=now)
        )
        if requeued or outlook != new.outlook.value or moved:
            changed.append((pk, new))
    with transaction.atomic():
        for start in range(0, len(changed), _BATCH * 10):
            _write_forecasts(changed[start : start + _BATCH * 10], made_at)
    return len(changed)


def _write_forecasts(batch: list[tuple[int, StartForecast]], made_at: datetime) -> None:
    """One UPDATE for the batch on PostgreSQL (arrays joined to the table); Django's ``bulk_update`` elsewhere,
    whose CASE expressions cost seconds of Python per thousand rows but keep SQLite simple."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE jobs_job AS j SET start_outlook = v.outlook, expected_start_at = v.at, forecast_at = %s "
                "FROM unnest(%s::bigint[], %s::text[], %s::timestamptz[]) AS v(id, outlook, at) "
                "WHERE j.id = v.id AND j.state = %s",
                [
                    made_at,
                    [pk for pk, _ in batch],
                    [f.outlook.value for _, f in batch],
                    [None if f.at is None else datetime.fromtimestamp(f.at, tz=UTC) for _, f in batch],
                    JobState.PENDING.value,
                ],
            )
        return
    jobs = [
        Job(
            pk=pk,
            start_outlook=f.outlook.value,
            expected_start_at=None if f.at is None else datetime.fromtimestamp(f.at, tz=UTC),
            forecast_at=made_at,
        )
        for pk, f in batch
    ]
    Job.objects.bulk_update(jobs, ["start_outlook", "expected_start_at", "forecast_at"], batch_size=_BATCH)


#: Seconds past its expected start after which a waiting job's estimate reads as overdue (a minute: what it rounds to).
OVERDUE_AFTER = 60.0


def start_in_words(at: datetime, now: datetime) -> tuple[str, str, tuple[datetime, datetime] | None]:
    """An expected start in words as the job page says it, as the job list does, and its likely range (None when
    the job should start at the next round, is past its expected start, or no calibration is stored:
    ``scheduling.core.start_range``). A lopsided range (``StartRange.overrun``) is said as "about then, later if
    the jobs ahead overrun", with the measured latest start on the page."""
    wait = (at - now).total_seconds()
    around = at.astimezone(UTC)
    if wait < -OVERDUE_AFTER:
        # The forecast is refreshed only when the queue changes (or every few minutes), so a start it expected can
        # pass while the job still waits: a job ahead is running past its expected end. Say so, not "next round".
        return (
            f"Was expected to start around {around:%Y-%m-%d %H:%M} UTC: the jobs ahead of it are running longer "
            "than expected.",
            f"Expected around {around:%H:%M} UTC; running late.",
            None,
        )
    if wait <= 2 * settings.CORRAL_SCHEDULE_EVERY:
        return "Should start at the next scheduling round.", "Starts at the next round.", None
    # Rounded as people say it: to the minute within a day, to the hour beyond.
    rounded = _rounded(wait)
    said = f"Should start in about {rounded} (around {around:%Y-%m-%d %H:%M} UTC)"
    likely = start_range(at.timestamp(), now=now.timestamp())
    if likely is None:
        return f"{said}.", f"Starts in about {rounded}.", None
    earliest = datetime.fromtimestamp(likely.earliest, tz=UTC)
    latest = datetime.fromtimestamp(likely.latest, tz=UTC)
    when = "%H:%M" if earliest.date() == latest.date() == around.date() else "%Y-%m-%d %H:%M"
    low, high = (_rounded(t - now.timestamp()) for t in (likely.earliest, likely.latest))
    if likely.overrun:  # "likely 2m-9h 20m" would mix the two kinds of wait measured (scheduling.core.start_range)
        return (
            f"{said}, later if the jobs ahead of it run past their expected end: in replays of real traces, 9 in 10 "
            f"such jobs had started by {latest:{when}} UTC (in {high}).",
            f"Starts in about {rounded}, later if the jobs ahead overrun.",
            (earliest, latest),
        )
    return (
        f"{said}, likely between {earliest:{when}} and {latest:{when}} UTC.",
        f"Starts in about {rounded} (likely {low}–{high}).",
        (earliest, latest),
    )


def _rounded(seconds: float) -> str:
    """A wait as people say it: to the minute within a day, to the hour beyond; at least a minute."""
    return format_duration(max(60, round(seconds / 60) * 60 if seconds < 86_400 else round(seconds / 3600) * 3600))
