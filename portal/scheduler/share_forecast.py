"""The start forecast of pending shares (issue #17): what only the database knows for
``scheduling.core.share_forecast`` (the shared GPUs as the share round sees them, how long each share is expected to
run), called by the periodic forecast refresh beside the whole-GPU forecast.

Run times come from the same estimate as whole-GPU jobs' (``scheduling.core.forecast.remaining_run_time``: the time
limit, or the run times of similar finished jobs).
"""

from __future__ import annotations

from portal.jobs.share_selectors import ShareJobRow, pending_shares, share_job_rows
from portal.scheduler.selectors import LiveSnapshot
from portal.scheduler.shares import share_demand, shared_gpu_states
from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.forecast import StartForecast, remaining_run_time
from scheduling.core.model import JobId, JobView
from scheduling.core.share_forecast import forecast_share_starts
from scheduling.core.states import JobState


def _view(row: ShareJobRow) -> JobView:
    pk, tenant, user, name, submitted, time_limit, state, started, attained = row
    running = state == JobState.RUNNING.value
    return JobView(
        id=pk,
        tenant=tenant,
        user=user,
        gpus=1,
        submit_time=submitted,
        state=JobState(state),
        attained_service=attained,
        executed_time=attained,
        last_started=started if running else None,
        name=name,
        service_at=started if running else None,
        time_limit=float(time_limit) if time_limit is not None else None,
    )


def share_forecasts(
    *, live: LiveSnapshot, now: float, predictor: DurationPredictor, horizon: float
) -> dict[JobId, StartForecast]:
    """Each pending share's forecast (culprits of MPS faults and shares whose previous attempt is stopping left
    out: their wait is not about room). Empty, at one query, when no share waits."""
    pending = [p for p in pending_shares() if p.job_id not in live.awaiting and not p.culprit]
    if not pending:
        return {}
    states, _ = shared_gpu_states(live, now)
    if not states:
        return {}  # no shared GPU takes work now: the wait reason says so, there is nothing to forecast
    running = [tenant.job_id for state in states for tenant in state.tenants]
    views = {row[0]: _view(row) for row in share_job_rows(job_ids=[*map(int, running), *(p.job_id for p in pending)])}
    ends: dict[JobId, float] = {}
    for job_id in running:
        view = views.get(int(job_id))
        if view is None or view.state != JobState.RUNNING:
            ends[job_id] = now  # an attempt that is over: its process is stopping
        elif (left := remaining_run_time(view, now=now, predictor=predictor)) is not None:
            ends[job_id] = now + left
    runs: dict[JobId, float] = {}
    for share in pending:
        run = remaining_run_time(views[share.job_id], now=now, predictor=predictor)
        if run is not None:
            runs[share.job_id] = run
    demands = [share_demand(share) for share in pending]
    return forecast_share_starts(states, demands, ends=ends, runs=runs, now=now, horizon=horizon)
