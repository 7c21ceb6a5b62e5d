"""Reads of job arrays for pages, the API, the scheduling adapter and the agent's start orders. Visibility goes
through ``JobArray.objects.visible_to`` (arrays) and ``Job.objects.visible_to`` (their tasks), as everywhere."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Count, Min, Q, QuerySet

from portal.jobs.models import Job, JobArray
from scheduling.core.states import JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

#: The order counts are shown in: what is happening now first, then what is over.
COUNT_ORDER = (
    JobState.RUNNING.value,
    JobState.PENDING.value,
    JobState.SUCCEEDED.value,
    JobState.FAILED.value,
    JobState.CANCELLED.value,
)


@dataclass(frozen=True, slots=True)
class ArrayCounts:
    """How many tasks of one array are in each state."""

    by_state: dict[str, int]

    @property
    def active(self) -> int:
        return self.by_state[JobState.PENDING.value] + self.by_state[JobState.RUNNING.value]

    def text(self) -> str:
        """ "12 running · 38 pending · 950 succeeded": the states that have tasks, what happens now first."""
        return " · ".join(f"{self.by_state[s]:,} {s}" for s in COUNT_ORDER if self.by_state[s]) or "no tasks"


def _empty() -> dict[str, int]:
    return dict.fromkeys(COUNT_ORDER, 0)


def array_list(*, user: User | AnonymousUser) -> QuerySet[JobArray]:
    """Arrays ``user`` may see, newest first, with what list pages show, in one query."""
    return JobArray.objects.visible_to(user).select_related("tenant", "user")


def array_get(*, user: User | AnonymousUser, array_id: int) -> JobArray | None:
    """One array if ``user`` may see it, else None (callers answer 404: another tenant's array does not exist)."""
    return array_list(user=user).filter(pk=array_id).first()


def array_state_counts(*, array_ids: list[int]) -> dict[int, ArrayCounts]:
    """Tasks per state of each array, for a page of arrays: one aggregate query over the (array, state) index,
    whatever the page holds. Every asked-for id gets an entry."""
    counts: dict[int, dict[str, int]] = {pk: _empty() for pk in array_ids}
    if array_ids:
        rows = (
            Job.objects.filter(array_id__in=array_ids)
            .order_by()
            .values("array_id", "state")
            .annotate(n=Count("pk"))
            .values_list("array_id", "state", "n")
        )
        for array_id, state, n in rows:
            if array_id is not None:
                counts[array_id][state] = n
    return {pk: ArrayCounts(by_state) for pk, by_state in counts.items()}


def array_tasks(*, array: JobArray) -> QuerySet[Job]:
    """The tasks of ``array`` in index order (the array is already known visible, and its tasks share its tenant)."""
    return Job.objects.filter(array=array).select_related("tenant", "user").order_by("array_index")


def jobs_grouped_by_array(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """``jobs`` (filtered, visible) with each array's tasks folded into one row: jobs outside arrays as they are,
    and for every array with a task among ``jobs`` that task of lowest id (its first), which list pages show as the
    array's row. So an array is listed when any of its tasks matches the filters, once, at its submission time.
    One query for the page (a grouped subquery inside), in the list's order."""
    firsts = jobs.filter(array__isnull=False).order_by().values("array_id").annotate(first=Min("pk")).values("first")
    return jobs.filter(Q(array__isnull=True) | Q(pk__in=firsts))


def array_task_env(job: Job) -> dict[str, str]:
    """The variables an array task's processes get (none for a job outside an array): Corral's own names, never
    ``SLURM_*`` ones, which tools such as PyTorch Lightning take as a sign that they run under Slurm. ``job.array``
    is read from ``job`` (one query unless it was selected with it)."""
    array = job.array
    if array is None or job.array_index is None:
        return {}
    return {
        "CORRAL_ARRAY_JOB_ID": str(array.pk),
        "CORRAL_ARRAY_TASK_ID": str(job.array_index),
        "CORRAL_ARRAY_TASK_COUNT": str(array.task_count),
        "CORRAL_ARRAY_TASK_MIN": str(array.index_min),
        "CORRAL_ARRAY_TASK_MAX": str(array.index_max),
    }


def array_tasks_held_back() -> dict[int, str]:
    """Pending tasks that an array's ``%N`` limit keeps out of this round, each with the detail its wait reason
    shows ("array 12 runs at most 50 tasks at once").

    For every array with a limit: room = limit - its tasks running now; its pending tasks of lowest index up to that
    room stay eligible (so an array runs in index order, as Slurm's does), the rest are held back. One query,
    whatever the number of arrays: the active tasks of limited arrays, in index order.
    """
    rows = (
        Job.objects.filter(array__limit__isnull=False, state__in=[JobState.PENDING.value, JobState.RUNNING.value])
        .order_by("array_id", "array_index")
        .values_list("pk", "array_id", "array__limit", "state")
    )
    pending: dict[int, list[int]] = defaultdict(list)
    running: dict[int, int] = defaultdict(int)
    limits: dict[int, int] = {}
    for pk, array_id, limit, state in rows:
        assert array_id is not None and limit is not None  # filtered on array__limit__isnull=False
        limits[array_id] = limit
        if state == JobState.RUNNING.value:
            running[array_id] += 1
        else:
            pending[array_id].append(pk)
    held: dict[int, str] = {}
    for array_id, waiting in pending.items():
        limit = limits[array_id]
        room = max(0, limit - running[array_id])
        if len(waiting) <= room:
            continue
        detail = f"array {array_id} runs at most {limit} task{'s' if limit != 1 else ''} at once"
        held.update(dict.fromkeys(waiting[room:], detail))
    return held
