"""How a finished job ended, in words: the one rule behind the job list's "Where / why" cell and the job page's
"Why it ended" line (Ref: #18).

The reason is not a column of its own: it is already recorded, once, in the job's history. Every service that ends a
job writes a ``failed`` or ``cancelled`` event with the reason in words ("time limit of 20s exceeded", "rank 1: exit
code 3", "node n1 stopped sending heartbeats; gave up after 3 hardware retries"), and a cancel of a running job
first writes ``cancel_requested`` naming who asked (the job ends later, when its processes have exited, by the
agent's report). Reading the reason back from those events keeps one source of truth, also for jobs that finished
before this rule existed.

A cancelled job reads "cancelled by alice", never the exit code its processes died with (a cancel stops them with
SIGTERM, so that code is -15). A process a signal ended outside a cancel reads "killed by SIGKILL".
"""

from __future__ import annotations

import signal
from collections.abc import Iterable

from django.db.models import Prefetch, QuerySet

from portal.jobs.models import EventKind, Job, JobEvent
from scheduling.core.states import JobState

#: The event kinds the rule reads: a list page prefetches only these.
FINISH_EVENT_KINDS = (EventKind.FAILED.value, EventKind.CANCELLED.value, EventKind.CANCEL_REQUESTED.value)


def exit_words(exit_code: int | None) -> str:
    """``3`` as "exit code 3"; a negative code (a process ended by a signal, as the agent reports it) as "killed by
    SIGKILL"; None (no process ever ran) as "the process could not start"."""
    if exit_code is None:
        return "the process could not start"
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        return f"killed by {name}"
    return f"exit code {exit_code}"


def finish_reason(*, state: str, exit_code: int | None, events: Iterable[JobEvent]) -> str:
    """Why a job in ``state`` ended, from its history ``events`` (oldest first; other kinds are ignored). Empty for
    a job that has not finished. A succeeded job reads "exit code 0"."""
    if state == JobState.SUCCEEDED.value:
        return exit_words(0 if exit_code is None else exit_code)
    finish = [e for e in events if e.kind in FINISH_EVENT_KINDS]
    if state == JobState.CANCELLED.value:
        asked = [e for e in finish if e.kind == EventKind.CANCEL_REQUESTED.value]
        ended = [e for e in finish if e.kind == EventKind.CANCELLED.value]
        if asked:  # a running job: the person who asked, not the agent that reported the processes gone
            return f"cancelled by {asked[-1].actor}"
        if ended:  # a pending job (or an array's pending tasks), cancelled at once by the person named
            why = f" ({ended[-1].reason})" if ended[-1].reason else ""
            return f"cancelled by {ended[-1].actor}{why}"
        return "cancelled"
    if state == JobState.FAILED.value:
        failed = [e for e in finish if e.kind == EventKind.FAILED.value and e.reason]
        if failed:
            return failed[-1].reason
        return exit_words(exit_code) if exit_code is not None else ""
    return ""


def with_finish_events(queryset: QuerySet[Job]) -> QuerySet[Job]:
    """``queryset`` with the events :func:`finish_reason` reads prefetched as ``finish_events``: one query for a
    page of jobs, never one per row."""
    events = JobEvent.objects.filter(kind__in=FINISH_EVENT_KINDS).order_by("at", "id")
    return queryset.prefetch_related(Prefetch("events", queryset=events, to_attr="finish_events"))


def job_finish_reason(job: Job) -> str:
    """:func:`finish_reason` for one job, from its prefetched ``finish_events`` when a list loaded them (else one
    query, only for a finished job)."""
    events: Iterable[JobEvent] | None = getattr(job, "finish_events", None)
    if events is None:
        events = job.events.filter(kind__in=FINISH_EVENT_KINDS) if job.is_terminal else ()
    return finish_reason(state=job.state, exit_code=job.exit_code, events=events)
