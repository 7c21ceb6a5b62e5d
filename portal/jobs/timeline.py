"""A job's timeline for its page and the API: when it was submitted, how long it queued, when each attempt started
and how long it ran, and how it ended. The page prints its moments with ``portal.web.times`` ("just now", "12 s ago").

Read from the job's events, which every state change writes (``job_transition``), so a requeued job's earlier
attempts keep their times after ``Job.started_at`` has moved on. A selector: reads only, no query of its own when the
caller passes the events it already loaded.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from django.db.models import Count

from portal.jobs.models import Allocation, Job, JobEvent
from scheduling.core.states import TERMINAL, JobState

_TERMINAL = {s.value for s in TERMINAL}
_PENDING, _RUNNING = JobState.PENDING.value, JobState.RUNNING.value


@dataclass(frozen=True, slots=True)
class Attempt:
    """One start of the job: how long it queued before it (``queued_from`` to ``started_at``), and how it ran:
    ``ended_at`` and ``outcome`` (the state it left ``running`` for: pending when requeued or preempted, or a
    terminal state) are None while it runs, and ``ran_for`` counts to the timeline's ``now``. ``ended_by`` is the
    event kind that ended it (``preempted``, ``requeued``, ``failed``, ...)."""

    number: int
    queued_from: datetime
    started_at: datetime
    queued_for: float
    ran_for: float
    ended_at: datetime | None = None
    outcome: str | None = None
    ended_by: str | None = None
    gpus: int | None = None  # its size, for an elastic job (issue #19): a resize starts a new attempt


def _attempt(
    number: int,
    queued_from: datetime,
    started_at: datetime,
    *,
    until: datetime,
    ended_at: datetime | None = None,
    outcome: str | None = None,
    ended_by: str | None = None,
) -> Attempt:
    """An attempt that ran from ``started_at`` until ``until`` (its end, or now while it runs)."""
    return Attempt(
        number=number,
        queued_from=queued_from,
        started_at=started_at,
        queued_for=max(0.0, (started_at - queued_from).total_seconds()),
        ran_for=max(0.0, (until - started_at).total_seconds()),
        ended_at=ended_at,
        outcome=outcome,
        ended_by=ended_by,
    )


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the job page's timeline shows, at ``now``. ``waiting_since`` is when a pending job last entered the
    queue (None otherwise); ``finished_at`` and ``outcome`` are set once the job is over."""

    now: datetime
    submitted_at: datetime
    attempts: tuple[Attempt, ...] = ()
    waiting_since: datetime | None = None
    finished_at: datetime | None = None
    outcome: str | None = None
    state: str = _PENDING
    _queued_before: float = field(default=0.0, repr=False)

    @property
    def latest(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def queued_seconds(self) -> float:
        """Every second spent waiting, over all attempts, including a wait still going on or cut by a cancel."""
        waiting = (self.now - self.waiting_since).total_seconds() if self.waiting_since is not None else 0.0
        return sum(a.queued_for for a in self.attempts) + self._queued_before + max(0.0, waiting)

    @property
    def ran_seconds(self) -> float:
        """Every second an attempt ran (held its GPUs), over all attempts."""
        return sum(a.ran_for for a in self.attempts)

    @property
    def running(self) -> bool:
        return self.state == _RUNNING

    def as_dict(self) -> dict[str, object]:
        """The API's shape (``TimelineSerializer``): datetimes stay datetimes for the serializer to format."""
        return {
            "submitted_at": self.submitted_at,
            "waiting_since": self.waiting_since,
            "queued_seconds": round(self.queued_seconds, 3),
            "ran_seconds": round(self.ran_seconds, 3),
            "finished_at": self.finished_at,
            "outcome": self.outcome,
            "attempts": [
                {
                    "number": a.number,
                    "queued_from": a.queued_from,
                    "started_at": a.started_at,
                    "queued_seconds": round(a.queued_for, 3),
                    "ended_at": a.ended_at,
                    "ran_seconds": round(a.ran_for, 3),
                    "outcome": a.outcome,
                    "ended_by": a.ended_by,
                    "gpus": a.gpus,
                }
                for a in self.attempts
            ],
        }


def job_timeline(*, job: Job, now: datetime, events: list[JobEvent] | None = None) -> Timeline:
    """``job``'s timeline at ``now`` from its events (read in one query unless ``events``, in time order, are
    given). A job whose events are missing (made outside the services) falls back on its own columns."""
    if events is None:
        events = list(job.events.order_by("at", "pk"))
    attempts: list[Attempt] = []
    queued_from: datetime | None = job.submitted_at
    queued_before = 0.0  # waits that ended without a start: none today, kept for a cancel while pending
    current: Attempt | None = None
    finished_at: datetime | None = None
    outcome: str | None = None
    for event in events:
        to_state, from_state = event.to_state, event.from_state
        if to_state == _RUNNING and from_state != _RUNNING:
            current = _attempt(len(attempts) + 1, queued_from or event.at, event.at, until=now)
            attempts.append(current)
            queued_from = None
        elif from_state == _RUNNING and to_state and to_state != _RUNNING and current is not None:
            attempts[-1] = _attempt(
                current.number,
                current.queued_from,
                current.started_at,
                until=event.at,
                ended_at=event.at,
                outcome=to_state,
                ended_by=event.kind,
            )
            current = None
            if to_state == _PENDING:
                queued_from = event.at
        elif to_state == _PENDING and from_state in _TERMINAL:  # reopened after a hardware fault: waits again
            queued_from = event.at
            finished_at = outcome = None
        if to_state in _TERMINAL:
            finished_at, outcome = event.at, to_state
            if queued_from is not None:  # over while it waited (cancelled in the queue)
                queued_before += max(0.0, (event.at - queued_from).total_seconds())
                queued_from = None
    if not events and job.started_at is not None:  # no history recorded: the job's own columns
        attempts.append(
            _attempt(
                max(1, job.attempt),
                job.queued_at or job.submitted_at,
                job.started_at,
                until=job.finished_at or now,
                ended_at=job.finished_at,
                outcome=job.state if job.finished_at else None,
            )
        )
        queued_from = None
    if job.is_terminal and finished_at is None:
        finished_at, outcome = job.finished_at, job.state
    if job.max_gpus is not None:  # an elastic job: each attempt's size, its size over time
        sizes = attempt_sizes(job=job)
        attempts = [replace(a, gpus=sizes.get(a.number)) for a in attempts]
    return Timeline(
        now=now,
        submitted_at=job.submitted_at,
        attempts=tuple(attempts),
        waiting_since=queued_from if job.state == _PENDING else None,
        finished_at=finished_at,
        outcome=outcome,
        state=job.state,
        _queued_before=queued_before,
    )


def attempt_sizes(*, job: Job) -> dict[int, int]:
    """GPUs each attempt of ``job`` was given (one query)."""
    rows = Allocation.objects.filter(job=job).values_list("attempt").annotate(n=Count("id")).order_by()
    return {attempt: n for attempt, n in rows}
