"""What a scheduling round reads of jobs, as plain rows rather than model instances: the changing columns of every
active job each round, the fixed ones once per job (``portal.scheduler.job_views`` keeps them), the GPUs running
jobs hold, and what elastic jobs (issue #19) add. Each read is one query."""

from __future__ import annotations

from dataclasses import dataclass

from portal.db import EpochSeconds
from portal.jobs.models import Allocation, Job
from scheduling.core.states import JobState

#: What changes about a pending or running job while it is in the system, as plain numbers (times in seconds since
#: the epoch): ``(pk, state, attempt, started, queued, attained_service, resize_to)``. The scheduler re-reads only
#: this every round and keeps the rest (:class:`JobFixedRow`). A plain tuple: 50,000 of them are built and compared
#: per round.
ActiveJobRow = tuple[int, str, int, float | None, float | None, float, int | None]


@dataclass(frozen=True, slots=True)
class JobFixedRow:
    """What never changes about a job once submitted (no service writes these columns; the admin shows them
    read-only)."""

    pk: int
    tenant: str
    user: str
    gpus: int
    submitted: float
    name: str
    time_limit: int | None
    max_gpus: int | None = None  # elastic jobs (issue #19): ``gpus`` is the minimum


_ACTIVE = (JobState.PENDING.value, JobState.RUNNING.value)
#: Above this many ids a read filters on state instead of a long ``IN`` list (binding tens of thousands of
#: parameters costs more than reading the rows it skips).
_IN_LIST_MAX = 2000


def elastic_scaling() -> dict[int, dict[str, float]]:
    """The measured scaling curves of the active elastic jobs that gave one (issue #19). One query."""
    rows = Job.objects.filter(state__in=_ACTIVE, max_gpus__isnull=False, scaling__isnull=False)
    return {pk: scaling for pk, scaling in rows.values_list("pk", "scaling") if scaling}


def jobs_stopping_with_notice() -> set[int]:
    """Running jobs told to checkpoint before a stop (``elastic_services``): their size is settled until then."""
    return set(Job.objects.filter(state=JobState.RUNNING.value, stop_due_at__isnull=False).values_list("pk", flat=True))


def active_job_rows() -> list[ActiveJobRow]:
    """Every pending and running job's changing columns. One query, no model instances and no datetime objects:
    at 50,000 pending jobs this is a tenth of what loading them as models costs."""
    # Shares of a GPU (issue #17) are placed apart, on shared GPUs (portal.scheduler.shares): never in ``decide``.
    rows = Job.objects.filter(state__in=_ACTIVE, gpu_fraction__isnull=True).values_list(
        "pk",
        "state",
        "attempt",
        EpochSeconds("started_at"),
        EpochSeconds("queued_at"),
        "attained_service",
        "resize_to",
    )
    return list(rows)


def job_fixed_rows(*, job_ids: list[int]) -> list[JobFixedRow]:
    """The unchanging columns of these jobs (any state), with tenant slug and username. One query."""
    jobs = Job.objects.all()
    jobs = jobs.filter(pk__in=job_ids) if len(job_ids) <= _IN_LIST_MAX else jobs.filter(state__in=_ACTIVE)
    rows = jobs.values_list(
        "pk",
        "tenant__slug",
        "user__username",
        "gpus",
        EpochSeconds("submitted_at"),
        "name",
        "time_limit",
        "max_gpus",
    )
    return [JobFixedRow(*row) for row in rows]


def jobs_held_gpus(*, job_ids: list[int]) -> list[tuple[int, str, int]]:
    """The GPUs these jobs hold now, as (job id, node name, GPU id) rows. One query."""
    held = Allocation.objects.filter(released_at__isnull=True)
    if len(job_ids) <= _IN_LIST_MAX:
        held = held.filter(job_id__in=job_ids)
    rows = held.values_list("job_id", "node__name", "gpu_id")
    wanted = set(job_ids)
    return [row for row in rows if row[0] in wanted]


# -- the fence: GPUs of attempts that are over, held until their processes are confirmed gone ------------------------
