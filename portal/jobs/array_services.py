"""Services that create and cancel job arrays. Keyword-only, one transaction each, side effects after commit, like
``portal.jobs.services`` (whose checks, events and scheduler kick they share).

An array of 10,000 tasks must be accepted in well under two seconds (issue #16), so creation costs a fixed number
of statements whatever its size: the checks every submission passes, one row for the array, one ``INSERT ...
SELECT`` for its task jobs and one for their ``submitted`` events (:mod:`portal.jobs.array_rows`), and one
scheduling round asked for after commit. Cancelling is as many statements, plus one ``job_cancel`` per running
task.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.errors import Conflict, NotAllowed, ValidationFailed
from portal.jobs.array_rows import insert_task_events, insert_task_jobs
from portal.jobs.array_spec import ArraySpecError, parse_array_spec
from portal.jobs.models import ACTIVE_STATES, EventKind, Job, JobArray, JobEvent
from portal.jobs.services import _kick_scheduler, job_cancel
from portal.jobs.validation import admit_submission, default_job_name, may_manage, validate_spec
from portal.tenants.models import Tenant
from scheduling.core.states import JobState, check_transition

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def task_name_prefix(name: str, last_index: int) -> str:
    """What a task's job name starts with: the array's name, cut so that ``name[index]`` fits the column's 200
    characters for every index up to ``last_index`` (tasks are named ``train[7]``)."""
    return name[: 200 - len(f"[{last_index}]")]


@transaction.atomic
def job_array_submit(
    *,
    user: User,
    command: str,
    gpus: int,
    array: str,
    name: str = "",
    tenant: Tenant | str | None = None,
    env: Mapping[str, str] | None = None,
    time_limit: int | None = None,
) -> JobArray:
    """Queue a job array for ``user``: one task job per index of ``array`` (Slurm syntax, ``0-999%50``; see
    :mod:`portal.jobs.array_spec`), each like a job of ``job_submit`` with the same command, GPUs, environment and
    time limit, named ``name[index]``.

    Refuses, field-scoped (``ValidationFailed``), what ``job_submit`` refuses and a bad spec (``array``: a range
    that goes down, a limit below 1, more than ``CORRAL_MAX_ARRAY_TASKS`` tasks, ...); refuses (``QuotaExceeded``)
    when the tenant's ``max_active_jobs`` would be passed by the tasks added, counted under the quota row's lock.
    Side effects: a ``submitted`` event per task; one scheduling round after commit.
    """
    env = dict(env or {})
    name = default_job_name(name, command)
    validate_spec(name=name, command=command, gpus=gpus, env=env, time_limit=time_limit)
    try:
        spec = parse_array_spec(array, max_tasks=settings.CORRAL_MAX_ARRAY_TASKS)
    except ArraySpecError as exc:
        raise ValidationFailed(str(exc), field="array") from None
    resolved = admit_submission(user=user, tenant=tenant, gpus=gpus, adding=spec.count)
    now = timezone.now()
    job_array = JobArray.objects.create(
        tenant=resolved,
        user=user,
        name=name,
        command=command,
        gpus=gpus,
        env=env,
        time_limit=time_limit,
        spec=array.strip(),
        limit=spec.limit,
        task_count=spec.count,
        index_min=spec.first,
        index_max=spec.last,
    )
    # Written by the database, not one model instance a task (portal.jobs.array_rows): a copy of one prepared row
    # per index, then a copy of one event per task. Two statements, whatever the array's size.
    template = Job(
        tenant=resolved,
        user=user,
        command=command,
        gpus=gpus,
        env=env,
        time_limit=time_limit,
        queued_at=now,
        array=job_array,
    )
    insert_task_jobs(template=template, name_prefix=task_name_prefix(name, spec.last), indices=spec.indices)
    submitted = JobEvent(kind=EventKind.SUBMITTED, actor=user.get_username(), to_state=JobState.PENDING.value)
    insert_task_events(template=submitted, array_id=job_array.pk, state=JobState.PENDING.value)
    _kick_scheduler()
    return job_array


def may_manage_array(user: User, job_array: JobArray) -> bool:
    """Who may cancel an array: the rule of ``job_cancel`` (its owner, an admin of its tenant, staff)."""
    return may_manage(user, owner_id=job_array.user_id, tenant=job_array.tenant)


@dataclass(frozen=True, slots=True)
class ArrayCancel:
    """What cancelling an array did: ``cancelled`` pending tasks at once, ``stopping`` running tasks asked to stop
    (they become cancelled once their processes have exited)."""

    cancelled: int
    stopping: int

    def text(self) -> str:
        parts = [f"{self.cancelled:,} pending task{'s' if self.cancelled != 1 else ''} cancelled"]
        if self.stopping:
            parts.append(f"{self.stopping:,} running task{'s' if self.stopping != 1 else ''} stopping")
        return "; ".join(parts) + "."


@transaction.atomic
def job_array_cancel(*, job_array: JobArray, by: User) -> ArrayCancel:
    """Cancel every task of ``job_array`` still pending or running, on behalf of ``by`` (its owner, a tenant admin
    or staff; else ``NotAllowed``).

    Pending tasks are cancelled at once, in bulk, each with a ``cancelled`` event; running tasks go through
    ``job_cancel`` (``cancel_requested``, their processes told to stop; cancelled once they have exited). The active
    tasks are row-locked first, in id order as heartbeats lock jobs, so a round cannot start one meanwhile and no
    task is cancelled twice. Refused with ``Conflict`` when no task is left to cancel. Each task may also be
    cancelled alone, with ``job_cancel``. Side effect: a scheduling round after commit (jobs queued behind the
    array may start).
    """
    if not may_manage_array(by, job_array):
        raise NotAllowed("only the array's owner or a tenant admin can cancel it")
    active = list(
        Job.objects.select_for_update()
        .filter(array=job_array, state__in=ACTIVE_STATES)
        .order_by("pk")
        .values_list("pk", "state", "cancel_requested_at")
    )
    if not active:
        raise Conflict(f"array {job_array.pk} has no pending or running tasks left")
    pending = [pk for pk, state, _ in active if state == JobState.PENDING.value]
    running = [pk for pk, state, requested in active if state == JobState.RUNNING.value and requested is None]
    check_transition(JobState.PENDING, JobState.CANCELLED)
    # Every pending task is locked above, so these two statements see the same tasks: first their events (while
    # they are still pending), then the tasks themselves.
    reason = f"array {job_array.pk} cancelled"
    cancelled = JobEvent(
        kind=EventKind.CANCELLED,
        actor=by.get_username(),
        reason=reason,
        from_state=JobState.PENDING.value,
        to_state=JobState.CANCELLED.value,
    )
    insert_task_events(template=cancelled, array_id=job_array.pk, state=JobState.PENDING.value)
    Job.objects.filter(array=job_array, state=JobState.PENDING.value).update(
        state=JobState.CANCELLED.value, finished_at=timezone.now(), reason_code="", reason=""
    )
    for pk in running:  # as many as the array has GPUs in use: a few, and each needs its processes stopped
        job_cancel(job=Job(pk=pk), by=by)
    _kick_scheduler()
    return ArrayCancel(cancelled=len(pending), stopping=len(running))
