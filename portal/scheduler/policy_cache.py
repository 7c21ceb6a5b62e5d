"""The live loop's policy object, kept for the life of a worker process and taught from the database.

Learning policies (``tiresias-gittins``, ``qssf``) rank jobs by what they learned from finished jobs. A policy
built from its name each round would know nothing, so each worker process keeps one object per policy name and,
before every round, tells it about the jobs that finished since the last round (a ``(finished_at, id)``
watermark). Every worker derives the same history from the same rows, so it does not matter which one runs a
round. A new process starts from the most recent ``HISTORY_LIMIT`` finished jobs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from portal.jobs.models import Job
from portal.jobs.selectors import jobs_finished_since
from scheduling.core import Policy
from scheduling.core.model import FinishedJob
from scheduling.core.policies import resolve_policy
from scheduling.core.states import JobState

#: Finished jobs a fresh worker learns from (newest first); enough for a stable service distribution.
HISTORY_LIMIT = 20_000


@dataclass
class _Taught:
    policy: Policy
    watermark: tuple[datetime, int] | None = None


_policies: dict[str, _Taught] = {}
_lock = threading.Lock()


def _record(job: Job) -> FinishedJob:
    assert job.finished_at is not None  # learned jobs are read with finished_at__isnull=False
    return FinishedJob(
        id=job.pk,
        tenant=job.tenant.slug,
        user=job.user.get_username(),
        gpus=job.gpus,
        submit_time=job.submitted_at.timestamp(),
        finish_time=job.finished_at.timestamp(),
        executed_time=job.executed_seconds,
        name=job.name,
        succeeded=job.state == JobState.SUCCEEDED.value,
    )


def live_policy(name: str) -> Policy:
    """The policy called ``name``, having observed every job that finished up to now (oldest first)."""
    with _lock:
        taught = _policies.get(name)
        if taught is None:
            taught = _policies[name] = _Taught(resolve_policy(name))
        batch = jobs_finished_since(watermark=taught.watermark, limit=HISTORY_LIMIT)
        for job in batch:
            taught.policy.observe_finished(_record(job))
        if batch:
            last = batch[-1]
            assert last.finished_at is not None  # as in _record
            taught.watermark = (last.finished_at, last.pk)
        return taught.policy


def forget_policies() -> None:
    """Drop every kept policy (tests; or after changing ``CORRAL_POLICY`` in a running process)."""
    with _lock:
        _policies.clear()
