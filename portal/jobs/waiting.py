"""What a waiting job shows: why it waits (the scheduler's reason, written each round) and when it should start
(the start forecast, written every ``CORRAL_FORECAST_EVERY`` seconds). Both touch only pending jobs' reason and
forecast columns, never their state, so they need no row locks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db import connection, transaction

from portal.db import EpochSeconds
from portal.jobs.models import Job
from scheduling.core.forecast import StartOutlook
from scheduling.core.model import WaitReason
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


#: A new expected start closer than this to the stored one is not written: the page rounds to the minute anyway.
FORECAST_TOLERANCE = 60.0


def jobs_set_start_forecasts(*, forecasts: Mapping[int, StartForecast], made_at: datetime) -> int:
    """Store each pending job's start forecast where it changed, stamped ``made_at``; returns how many were written.

    A forecast older than the job's entry into the queue is never shown, so a requeued job always gets its new one.
    Otherwise only a changed outlook or a start that moved by :data:`FORECAST_TOLERANCE` or more is written: with
    50,000 pending jobs, rewriting every row every refresh cost most of the refresh (and a full table of dead row
    versions each time). How fresh the answers are overall is :func:`portal.rounds.forecast_ran_at`.
    """
    stored = Job.objects.filter(state=JobState.PENDING.value)
    if len(forecasts) <= _IN_LIST_MAX:
        stored = stored.filter(pk__in=list(forecasts))
    rows = stored.values_list(
        "pk", "start_outlook", EpochSeconds("expected_start_at"), EpochSeconds("forecast_at"), EpochSeconds("queued_at")
    )
    changed: list[tuple[int, StartForecast]] = []
    for pk, outlook, at, forecast_at, queued_at in rows:
        new = forecasts.get(pk)
        if new is None:
            continue
        requeued = forecast_at is None or (queued_at is not None and forecast_at < queued_at)
        moved = (at is None) != (new.at is None) or (
            at is not None and new.at is not None and abs(at - new.at) >= FORECAST_TOLERANCE
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
