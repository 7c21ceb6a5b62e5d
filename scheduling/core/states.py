"""Job states and the transitions allowed between them.

Kept in the pure core so the live services, the simulator and the UI agree on one table. Services check every
state change against :data:`TRANSITIONS`; an illegal one raises :class:`InvalidTransition` instead of silently
writing a state the rest of the system does not expect.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    PENDING = "pending"  # waiting in the queue; the scheduler gives it a reason
    RUNNING = "running"  # GPUs allocated; the agent has been told to start (or has started) its processes
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


#: States no ordinary transition leaves. The one exception is :data:`REOPENINGS`, below.
TERMINAL: frozenset[JobState] = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

#: Allowed ``from -> {to}`` changes. ``running -> pending`` is a requeue (preemption, lost node, hardware fault):
#: the job keeps its place in history and starts again from scratch (or from its checkpoint).
TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.RUNNING, JobState.CANCELLED, JobState.FAILED}),
    JobState.RUNNING: frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PENDING}),
    JobState.SUCCEEDED: frozenset(),
    JobState.FAILED: frozenset(),
    JobState.CANCELLED: frozenset(),
}


#: The only way out of a terminal state, kept apart from :data:`TRANSITIONS` so that :func:`check_transition` keeps
#: refusing it. A job that *failed* on a non-zero exit is put back in the queue when a fatal GPU fault (XID) on its
#: GPUs turns up within seconds of that exit, i.e. the hardware killed it; only the service that checks that
#: evidence calls :func:`check_reopen`, and only within ``CORRAL_XID_EXIT_WINDOW`` of the failure (see
#: docs/architecture.md). Succeeded and cancelled jobs are never reopened.
REOPENINGS: dict[JobState, frozenset[JobState]] = {JobState.FAILED: frozenset({JobState.PENDING})}


class InvalidTransition(Exception):
    """Raised when a job would move between two states that :data:`TRANSITIONS` does not connect."""

    def __init__(self, current: JobState, target: JobState) -> None:
        super().__init__(f"a {current} job cannot become {target}")
        self.current = current
        self.target = target


def check_transition(current: JobState | str, target: JobState | str) -> JobState:
    """Return ``target`` as a :class:`JobState` if ``current -> target`` is allowed, else raise."""
    cur, tgt = JobState(current), JobState(target)
    if tgt not in TRANSITIONS[cur]:
        raise InvalidTransition(cur, tgt)
    return tgt


def check_reopen(current: JobState | str, target: JobState | str) -> JobState:
    """Return ``target`` as a :class:`JobState` if ``current -> target`` is one of the :data:`REOPENINGS`, else
    raise. Ordinary state changes use :func:`check_transition`, which never allows leaving a terminal state."""
    cur, tgt = JobState(current), JobState(target)
    if tgt not in REOPENINGS.get(cur, frozenset()):
        raise InvalidTransition(cur, tgt)
    return tgt
