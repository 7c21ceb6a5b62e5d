"""The one interface every scheduling policy implements.

A policy only *orders* jobs; the round in :mod:`scheduling.core.engine` turns that order into starts, preemptions
and wait reasons, with the same tenant caps and placement for every policy. That split (Blox's admission /
ordering / placement) keeps each policy a few lines and makes their comparison fair.

Policies may learn from history (Gittins, QSSF). That state changes only through :meth:`Policy.observe_finished`,
which the live loop and the simulator call when a job ends, so ``decide`` stays a pure function of the snapshot,
``now`` and what the policy has been told.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from scheduling.core.model import FinishedJob, JobView

#: A sort key: smaller runs first. Tuples of numbers so keys compare without custom ``__lt__`` calls.
Key = tuple[float, ...]

NEVER = math.inf


class Policy:
    """Orders jobs for one round.

    Attributes describe the policy to the round: ``preemptive`` lets it take GPUs back from running jobs
    (after ``min_quantum`` seconds of running, to avoid thrashing); ``head_of_line`` makes a waiting job that does
    not fit block every later one (strict FIFO); ``clairvoyant`` marks oracles that read ``JobView.duration``,
    which only the simulator knows.
    """

    name: str = ""
    clairvoyant: bool = False
    preemptive: bool = False
    head_of_line: bool = False
    guarantees: bool = False
    min_quantum: float = 0.0
    #: Bumped whenever learned state changes keys of jobs whose state did not change (a refit of a learned
    #: distribution); the simulator then recomputes every cached key.
    version: int = 0
    #: True when a running job's key can only get better while it runs (remaining time shrinks). The simulator
    #: may then compare against a stale key of a running job as a bound instead of recomputing it every event.
    improving_keys: bool = False

    def key(self, job: JobView, now: float) -> Key:
        """Priority of ``job`` at ``now``; smaller is served first. Ties keep the caller's order."""
        raise NotImplementedError

    def key_expiry(self, job: JobView, now: float) -> float:
        """The earliest time after ``now`` at which :meth:`key` may change while the job stays in its state.

        The simulator caches keys until then (and wakes up then for preemptive policies), so a key that changes
        continuously must say ``now``. Default: constant while the job's state is unchanged.
        """
        return NEVER

    def key_and_expiry(self, job: JobView, now: float) -> tuple[Key, float]:
        """``(key(job, now), key_expiry(job, now))`` in one call; policies whose two share work override it (the
        simulator asks for both at every wake-up)."""
        return self.key(job, now), self.key_expiry(job, now)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        """``jobs`` sorted by priority (stable)."""
        return sorted(jobs, key=lambda job: self.key(job, now))

    def observe_finished(self, record: FinishedJob) -> None:
        """Learn from a finished job. Policies without history ignore it."""

    def describe(self) -> str:
        """One line for reports and the what-if page."""
        return self.name

    def __repr__(self) -> str:
        return f"<policy {self.name}>"


class ClairvoyanceError(ValueError):
    """An oracle policy met a job without a known duration: oracles belong in the simulator only."""


def known_duration(job: JobView) -> float:
    if job.duration is None:
        raise ClairvoyanceError(f"job {job.id} has no duration; oracle policies run only in the simulator")
    return job.duration
