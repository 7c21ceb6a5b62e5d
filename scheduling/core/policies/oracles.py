"""Clairvoyant oracles: they read each job's true duration, so they exist only in the simulator.

They are yardsticks, not options: SRSF (shortest remaining *service*, GPUs x remaining time) is the best simple
JCT policy when sizes are known and what Tiresias compares its non-clairvoyant schedulers against.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.model import JobState, JobView
from scheduling.core.policies.base import NEVER, Key, Policy, known_duration


def _remaining(job: JobView, now: float) -> float:
    # Inlined ``executed_at``: the simulator evaluates this for every contested running job at every event.
    duration = job.duration
    if duration is None:
        known_duration(job)  # raises with the explanation
    executed = job.executed_time
    if job.service_at is not None and job.state == JobState.RUNNING:
        executed += now - job.service_at
    remaining = duration - executed  # type: ignore[operator]
    return remaining if remaining > 0.0 else 0.0


class _Oracle(Policy):
    clairvoyant = True
    improving_keys = True

    def key_expiry(self, job: JobView, now: float) -> float:
        # Remaining time shrinks continuously while a job runs; a waiting job's does not change.
        return now if job.state == JobState.RUNNING else NEVER


class Srtf(_Oracle):
    """Shortest remaining time first, preemptive."""

    name = "srtf"
    preemptive = True

    def key(self, job: JobView, now: float) -> Key:
        return (_remaining(job, now), job.submit_time)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=lambda job: (_remaining(job, now), job.submit_time))


class Srsf(_Oracle):
    """Shortest remaining service first (GPUs x remaining seconds), preemptive."""

    name = "srsf"
    preemptive = True

    def key(self, job: JobView, now: float) -> Key:
        return (job.gpus * _remaining(job, now), job.submit_time)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=lambda job: (job.gpus * _remaining(job, now), job.submit_time))


class Sjf(_Oracle):
    """Shortest job (duration) first, non-preemptive."""

    name = "sjf"

    def key(self, job: JobView, now: float) -> Key:
        return (known_duration(job), job.submit_time)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=lambda job: (known_duration(job), job.submit_time))

    def key_expiry(self, job: JobView, now: float) -> float:
        return NEVER
