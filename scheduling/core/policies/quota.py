"""The tenant layer: guaranteed shares first, idle quota borrowable, borrowed GPUs reclaimed.

Wraps any policy. Each tenant's jobs that fit inside its ``guaranteed_gpus`` are ranked before every job that
would borrow (each group in the wrapped policy's order), so a tenant that wants its share back gets it: running
borrowers are the first to be preempted. Under a non-preemptive policy only borrowers can be preempted; jobs
running inside their tenant's guarantee are never touched. Per-user and per-tenant caps apply as everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.model import FinishedJob, JobView
from scheduling.core.policies.base import Key, Policy


class Quota(Policy):
    guarantees = True

    def __init__(self, base: Policy) -> None:
        self.base = base
        self.name = f"{base.name}+quota"
        self.clairvoyant = base.clairvoyant
        self.preemptive = base.preemptive
        self.min_quantum = base.min_quantum

    # Policy.version is a plain attribute that learning policies bump; the wrapper has no state of its own and only
    # mirrors the wrapped policy's, so it narrows it to read-only on purpose (nothing assigns a wrapper's version).
    @property
    def version(self) -> int:  # type: ignore[override]
        return self.base.version

    def key(self, job: JobView, now: float) -> Key:
        return self.base.key(job, now)

    def key_expiry(self, job: JobView, now: float) -> float:
        return self.base.key_expiry(job, now)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        return self.base.order(jobs, now)

    def observe_finished(self, record: FinishedJob) -> None:
        self.base.observe_finished(record)

    def describe(self) -> str:
        return f"{self.base.describe()} with tenant guarantees"
