"""What a waiting job shows: why it waits (the scheduler's reason, written each round) and when it should start
(the start forecast, written every ``CORRAL_FORECAST_EVERY`` seconds). Both touch only pending jobs' reason and
forecast columns, never their state, so they need no row locks."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from portal.jobs.models import Job
from scheduling.core.forecast import StartOutlook
from scheduling.core.model import WaitReason
from scheduling.core.states import JobState

#: Rows written per UPDATE statement by the forecast.
_BATCH = 500


def reason_text(code: WaitReason, detail: str) -> str:
    """What a pending job shows: the reason's label, then the core's detail in brackets (fits the column)."""
    return (f"{code.label} ({detail})" if detail else code.label)[:255]


def jobs_set_wait_reasons(*, reasons: Mapping[int, tuple[WaitReason, str]]) -> None:
    """Write each still-pending job's reason (code and detail). Reasons change rarely between rounds: only the ones
    that differ are written, grouped into one UPDATE per distinct text."""
    current = dict(Job.objects.filter(pk__in=list(reasons), state=JobState.PENDING.value).values_list("pk", "reason"))
    groups: dict[tuple[WaitReason, str], list[int]] = defaultdict(list)
    for job_id, (code, detail) in reasons.items():
        text = reason_text(code, detail)
        if job_id in current and current[job_id] != text:
            groups[(code, text)].append(job_id)
    for (code, text), ids in groups.items():
        Job.objects.filter(pk__in=ids, state=JobState.PENDING.value).update(reason_code=code.value, reason=text)


@dataclass(frozen=True, slots=True)
class StartForecast:
    """One pending job's forecast: the outlook, and when it should start (seconds since the epoch) if known."""

    outlook: StartOutlook
    at: float | None


def jobs_set_start_forecasts(*, forecasts: Mapping[int, StartForecast], made_at: datetime) -> None:
    """Store each job's start forecast, stamped ``made_at`` (a forecast older than the job's entry into the queue
    is never shown). Written in batches, atomically."""
    jobs = [
        Job(
            pk=job_id,
            start_outlook=f.outlook.value,
            expected_start_at=None if f.at is None else datetime.fromtimestamp(f.at, tz=UTC),
            forecast_at=made_at,
        )
        for job_id, f in forecasts.items()
    ]
    Job.objects.bulk_update(jobs, ["start_outlook", "expected_start_at", "forecast_at"], batch_size=_BATCH)
