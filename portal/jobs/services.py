"""Services that change jobs. Each is keyword-only, runs in one transaction, checks the state table of
``scheduling.core.states`` and records a :class:`JobEvent` for every state change.

Side effects outside the database (kicking the scheduler) are queued with ``transaction.on_commit`` so they
never fire for a change that rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, IntegerField
from django.db.models.functions import Length
from django.utils import timezone

from portal.errors import Conflict, NotAllowed, QuotaExceeded, ValidationFailed
from portal.jobs.models import (
    ACTIVE_STATES,
    MAX_TIME_LIMIT,
    Allocation,
    EventKind,
    Job,
    JobEvent,
    JobLogChunk,
    JobTask,
    TaskState,
)
from portal.nodes.models import Gpu
from portal.queue import SCHEDULE_ROUND, enqueue_on_commit
from portal.telemetry.exits import XidBlame, fatal_xid_near_exit, xid_exit_window
from portal.tenants.models import Membership, Quota, Role, Tenant
from scheduling.core.durations import format_duration
from scheduling.core.states import InvalidTransition, JobState, check_reopen, check_transition

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_COMMAND_CHARS = 16_000
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables the portal sets for each task; a user's env may not override them.
RESERVED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CORRAL_JOB_ID",
        "CORRAL_ATTEMPT",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "CORRAL_NNODES",
        "CORRAL_NODE_RANK",
    }
)


def _record(job: Job, kind: str, *, actor: str, reason: str = "", from_state: str = "", to_state: str = "") -> None:
    JobEvent.objects.create(job=job, kind=kind, actor=actor, reason=reason, from_state=from_state, to_state=to_state)


def _kick_scheduler() -> None:
    """Ask for a scheduling round once the current transaction commits (submit, finish, cancel all free or
    need GPUs). If the broker is briefly unreachable the change still stands and the beat-driven round places the
    job a few seconds later."""
    enqueue_on_commit(SCHEDULE_ROUND)


def job_transition(job: Job, target: JobState, *, kind: str, actor: str, reason: str = "") -> Job:
    """Move a locked ``job`` to ``target`` if the state table allows it, stamping times and recording the event.

    Precondition: the caller holds ``job``'s row lock inside a transaction.
    """
    current = JobState(job.state)
    check_transition(current, target)
    now = timezone.now()
    job.state = target.value
    if target is JobState.RUNNING:
        job.started_at = now
        job.reason_code, job.reason = "", ""
    elif target is JobState.PENDING:
        job.queued_at = now
    else:  # terminal
        job.finished_at = now
        job.reason_code, job.reason = "", ""
    job.save()
    _record(job, kind, actor=actor, reason=reason, from_state=current.value, to_state=target.value)
    return job


def _membership(user: User, tenant: Tenant) -> Membership | None:
    return Membership.objects.filter(user=user, tenant=tenant).first()


def _resolve_tenant(user: User, tenant: Tenant | str | None) -> Tenant:
    resolved: Tenant | None
    if isinstance(tenant, Tenant):
        resolved = tenant
    elif tenant:
        resolved = Tenant.objects.filter(slug=tenant).first()
        if resolved is None:
            raise ValidationFailed(f"unknown tenant '{tenant}'", field="tenant")
    else:
        slugs = list(Membership.objects.filter(user=user).values_list("tenant__slug", flat=True)[:2])
        if len(slugs) != 1:
            problem = "you belong to no tenant" if not slugs else "you belong to several tenants; name one"
            raise ValidationFailed(problem, field="tenant")
        return Tenant.objects.get(slug=slugs[0])
    if not user.is_staff and _membership(user, resolved) is None:
        # Same words as for an unknown tenant: do not confirm that another tenant exists.
        raise ValidationFailed(f"unknown tenant '{resolved.slug}'", field="tenant")
    return resolved


def _validate_spec(*, name: str, command: str, gpus: int, env: Mapping[str, str], time_limit: int | None) -> None:
    if not command.strip():
        raise ValidationFailed("the command is empty", field="command")
    if len(command) > MAX_COMMAND_CHARS:
        raise ValidationFailed(f"the command is longer than {MAX_COMMAND_CHARS} characters", field="command")
    if "\x00" in command:
        raise ValidationFailed("the command contains a NUL character", field="command")
    if not name.strip():
        raise ValidationFailed("the name is empty", field="name")
    if gpus < 1:
        raise ValidationFailed("a job needs at least 1 GPU", field="gpus")
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise ValidationFailed(f"'{key}' is not a valid environment variable name", field="env")
        if key in RESERVED_ENV:
            raise ValidationFailed(f"'{key}' is set by Corral and cannot be overridden", field="env")
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationFailed(f"the value of '{key}' must be a string without NUL characters", field="env")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, int) or time_limit < 1:
            raise ValidationFailed("the time limit must be a whole number of seconds, at least 1", field="time_limit")
        if time_limit > MAX_TIME_LIMIT:
            raise ValidationFailed(
                f"the time limit may be at most {format_duration(MAX_TIME_LIMIT)} ({MAX_TIME_LIMIT} seconds); "
                f"this job asks for {format_duration(time_limit)}",
                field="time_limit",
            )


def _check_fits(*, tenant: Tenant, gpus: int, quota: Quota | None) -> None:
    """Refuse at submit a job that could never start, so it does not wait forever with no hope."""
    if quota is not None and quota.gpu_limit is not None and gpus > quota.gpu_limit:
        raise ValidationFailed(
            f"tenant '{tenant.slug}' may use at most {quota.gpu_limit} GPUs at once; this job asks for {gpus}",
            field="gpus",
        )
    if quota is not None and quota.user_gpu_limit is not None and gpus > quota.user_gpu_limit:
        raise ValidationFailed(
            f"each member of '{tenant.slug}' may use at most {quota.user_gpu_limit} GPUs; this job asks for {gpus}",
            field="gpus",
        )
    cluster_gpus = Gpu.objects.filter(present=True).count()
    if gpus > cluster_gpus:
        raise ValidationFailed(f"the cluster has {cluster_gpus} GPUs; this job asks for {gpus}", field="gpus")


@transaction.atomic
def job_submit(
    *,
    user: User,
    command: str,
    gpus: int,
    name: str = "",
    tenant: Tenant | str | None = None,
    env: Mapping[str, str] | None = None,
    time_limit: int | None = None,
) -> Job:
    """Queue a new job for ``user`` in ``tenant`` (their only tenant when omitted).

    ``time_limit`` (seconds, 1 to 30 days; None: no limit) bounds each attempt: past it the job is stopped and
    fails (see :func:`jobs_enforce_time_limits`); a short enough limit also lets it run on soft-cordoned GPUs.

    Refuses (``ValidationFailed``, field-scoped) a job that could never run: empty command, bad env, a time limit
    out of range, more GPUs than the tenant's cap or the cluster; refuses (``QuotaExceeded``) when the tenant
    already has ``max_active_jobs`` jobs pending or running. That count is taken under the quota row's lock, so
    concurrent submits cannot overshoot it. Side effects: a ``submitted`` event; a scheduling round after commit.
    """
    env = dict(env or {})
    name = (name or command.strip().split("\n", 1)[0])[:200]
    _validate_spec(name=name, command=command, gpus=gpus, env=env, time_limit=time_limit)
    resolved = _resolve_tenant(user, tenant)
    quota = Quota.objects.select_for_update().filter(tenant=resolved).first()
    _check_fits(tenant=resolved, gpus=gpus, quota=quota)
    if quota is not None and quota.max_active_jobs is not None:
        active = Job.objects.filter(tenant=resolved, state__in=ACTIVE_STATES).count()
        if active >= quota.max_active_jobs:
            raise QuotaExceeded(f"tenant '{resolved.slug}' already has {active} jobs pending or running (its limit)")
    job = Job.objects.create(
        tenant=resolved,
        user=user,
        name=name,
        command=command,
        gpus=gpus,
        env=env,
        time_limit=time_limit,
        queued_at=timezone.now(),
    )
    _record(job, EventKind.SUBMITTED, actor=user.get_username(), to_state=JobState.PENDING.value)
    _kick_scheduler()
    return job


def _may_manage(user: User, job: Job) -> bool:
    if user.is_staff or job.user_id == user.pk:
        return True
    membership = _membership(user, job.tenant)
    return membership is not None and membership.role == Role.ADMIN


@transaction.atomic
def job_cancel(*, job: Job, by: User) -> Job:
    """Cancel ``job`` on behalf of ``by`` (its owner, a tenant admin or staff).

    A pending job is cancelled at once. A running job is marked ``cancel_requested`` and its tasks are told to
    stop (SIGTERM, then SIGKILL after the grace period); it becomes ``cancelled`` when its processes have exited,
    so its GPUs are never handed out while a process still holds them. Refused with ``Conflict`` when finished.
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if not _may_manage(by, job):
        raise NotAllowed("only the job's owner or a tenant admin can cancel it")
    actor = by.get_username()
    state = JobState(job.state)
    if state is JobState.PENDING:
        return job_transition(job, JobState.CANCELLED, kind=EventKind.CANCELLED, actor=actor)
    if state is JobState.RUNNING:
        if job.cancel_requested_at is None:
            job.cancel_requested_at = timezone.now()
            job.save(update_fields=["cancel_requested_at"])
            JobTask.objects.filter(job=job, attempt=job.attempt).update(kill_requested=True)
            _record(job, EventKind.CANCEL_REQUESTED, actor=actor, reason="stopping its processes")
        return job
    raise Conflict(f"job {job.pk} has already {state.value}")


#: Who the history names when the portal stops a job that ran past its time limit.
TIME_LIMIT_ACTOR = "scheduler"


@transaction.atomic
def jobs_enforce_time_limits(*, now: datetime) -> list[int]:
    """Fail every running job whose current attempt started more than its ``time_limit`` before ``now``.

    Each such job becomes ``failed`` at once, with a ``failed`` event saying "time limit of 2h exceeded", and its
    tasks are told to stop the way a cancel stops them: the next heartbeat sends SIGTERM, then SIGKILL after
    ``CORRAL_KILL_GRACE``. Its GPUs stay allocated until each process has exited. A job whose cancel is already
    under way is left to end cancelled.

    Candidates are read in one query, then locked in id order (as heartbeats lock jobs) and checked again under the
    lock, so a job that finished, was requeued or was cancelled meanwhile is left alone, and no job is failed twice.
    ``now`` is the caller's clock (the scheduling round reads it). Returns the ids of the jobs it failed.
    """
    # The limit as an interval, typed at each step: SQLite's emulated date arithmetic needs to be told.
    seconds = ExpressionWrapper(F("time_limit"), output_field=IntegerField())
    limit = ExpressionWrapper(seconds * timedelta(seconds=1), output_field=DurationField())
    deadline = ExpressionWrapper(F("started_at") + limit, output_field=DateTimeField())
    overdue = list(
        Job.objects.filter(state=JobState.RUNNING.value, time_limit__isnull=False, cancel_requested_at__isnull=True)
        .alias(deadline=deadline)
        .filter(deadline__lt=now)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    failed: list[int] = []
    for job in Job.objects.select_for_update().filter(pk__in=overdue).order_by("pk"):
        if (
            job.state != JobState.RUNNING.value
            or job.cancel_requested_at is not None
            or job.started_at is None
            or job.time_limit is None
            or now - job.started_at <= timedelta(seconds=job.time_limit)
        ):
            continue
        JobTask.objects.filter(job=job, attempt=job.attempt, state__in=[TaskState.ASSIGNED, TaskState.RUNNING]).update(
            kill_requested=True
        )
        job.exit_code = None
        job_transition(
            job,
            JobState.FAILED,
            kind=EventKind.FAILED,
            actor=TIME_LIMIT_ACTOR,
            reason=f"time limit of {format_duration(job.time_limit)} exceeded",
        )
        failed.append(job.pk)
    return failed


def job_requeue(job: Job, *, actor: str, reason: str, hardware: bool, kind: EventKind = EventKind.REQUEUED) -> Job:
    """Put a running ``job`` back in the queue as a whole gang: every task of its attempt is told to stop.

    ``kind`` says why in the job's history (``requeued`` for lost hardware, ``preempted`` for the scheduler).
    ``hardware`` jobs (lost node, fatal GPU fault) count against ``CORRAL_MAX_HARDWARE_RETRIES``; past it the job
    fails instead of looping forever on a broken cluster. Precondition: ``job`` is row-locked by the caller.
    GPUs of tasks that are still alive stay allocated until those tasks report their exit.
    """
    if job.state != JobState.RUNNING.value:
        raise InvalidTransition(JobState(job.state), JobState.PENDING)
    JobTask.objects.filter(job=job, attempt=job.attempt, state__in=[TaskState.ASSIGNED, TaskState.RUNNING]).update(
        kill_requested=True
    )
    if job.cancel_requested_at is not None:
        return job_transition(job, JobState.CANCELLED, kind=EventKind.CANCELLED, actor=actor, reason=reason)
    if hardware:
        job.hardware_retries += 1
        if job.hardware_retries > settings.CORRAL_MAX_HARDWARE_RETRIES:
            job.exit_code = None
            job_transition(
                job,
                JobState.FAILED,
                kind=EventKind.FAILED,
                actor=actor,
                reason=f"{reason}; gave up after {settings.CORRAL_MAX_HARDWARE_RETRIES} hardware retries",
            )
            _kick_scheduler()  # its quota and any GPUs its exited ranks held are free for others
            return job
    if job.started_at is not None:
        job.attained_service += job.gpus * max(0.0, (timezone.now() - job.started_at).total_seconds())
    job.started_at = None
    job_transition(job, JobState.PENDING, kind=kind, actor=actor, reason=reason)
    _kick_scheduler()
    return job


def job_log_append(*, job: Job, data: str) -> int:
    """Append ``data`` to ``job``'s output and return the log's new size: every character the job has printed.

    Storage is bounded by ``CORRAL_JOB_LOG_MAX_CHARS`` (0: unbounded), because one job printing in a loop must not
    fill the database. Its first half is the *head*, how the job began, and is kept for good; the rest holds the
    most recent output, where the error that ended the job will be. Once more is stored than the cap, whole chunks
    after the head are deleted, oldest first, until it fits (never the newest chunk: new output that alone exceeds
    the tail keeps only its end). What is deleted is counted in ``log_dropped`` and leaves one gap in the chunk
    offsets, which ``job_log_read`` shows as a marker line. Offsets never move, so the byte counts acknowledged to
    the agent are untouched and it is never asked to resend.

    Precondition: ``job`` is row-locked by the caller (the new chunk's offset is the job's current size, and the
    counts are read, changed and written back).
    """
    if not data:
        return job.log_size
    cap = settings.CORRAL_JOB_LOG_MAX_CHARS
    start = job.log_size
    job.log_size += len(data)
    chunks: list[JobLogChunk] = []
    head = cap // 2
    if cap > 0:
        if start < head < job.log_size:
            # Split at the head's end, so the head is exactly the first ``head`` characters, never a chunk more.
            chunks.append(JobLogChunk(job=job, offset=start, data=data[: head - start]))
            data, start = data[head - start :], head
        cut = len(data) - (cap - head)
        if start >= head and cut > 0:
            data, start = data[cut:], start + cut
            job.log_dropped += cut
    chunks.append(JobLogChunk(job=job, offset=start, data=data))
    JobLogChunk.objects.bulk_create(chunks)
    if cap > 0:
        _log_drop_oldest(job, head=head, newest=start, excess=job.log_size - job.log_dropped - cap)
    job.save(update_fields=["log_size", "log_dropped"])
    return job.log_size


def _log_drop_oldest(job: Job, *, head: int, newest: int, excess: int) -> None:
    """Delete whole chunks that start in ``[head, newest)``, oldest first, until ``excess`` characters are gone,
    counting them in ``job.log_dropped``. Lengths are read a few chunks at a time: typically one or two go per
    append, and reading the length of every stored chunk would touch the whole log."""
    while excess > 0:
        batch = (
            JobLogChunk.objects.filter(job=job, offset__gte=head, offset__lt=newest)
            .order_by("offset")
            .annotate(chars=Length("data"))
            .values_list("pk", "chars")[:8]
        )
        doomed = []
        for pk, chars in batch:
            if excess <= 0:
                break
            doomed.append(pk)
            excess -= chars
            job.log_dropped += chars
        if not doomed:
            return  # nothing left to drop but the head and the newest output (the cap was lowered since)
        JobLogChunk.objects.filter(pk__in=doomed).delete()


def release_task_gpus(task: JobTask) -> None:
    """Free the GPUs a task held, once its process is known to be gone."""
    Allocation.objects.filter(
        job_id=task.job_id, attempt=task.attempt, node_id=task.node_id, released_at__isnull=True
    ).update(released_at=timezone.now())


def job_task_exited(*, task: JobTask, exit_code: int | None, actor: str) -> None:
    """Record that one task's process ended, free its GPUs and settle the job when its gang is done.

    Rules: all tasks of the current attempt exited 0 → succeeded; a cancel was requested → cancelled once every
    task has exited; any other non-zero exit → failed at once, and the remaining tasks are told to stop — unless a
    fatal XID hit one of the attempt's GPUs within ``CORRAL_XID_EXIT_WINDOW`` of now: then the hardware killed the
    process, and the job is requeued as a hardware retry instead (bounded by ``CORRAL_MAX_HARDWARE_RETRIES``; the
    event names the XID). Reports of older attempts only free GPUs. Precondition: the caller holds the job's row
    lock. Ref: #4 (the XID that arrives *after* the exit is handled by ``job_reopen_after_hardware_fault``).
    """
    task.state = TaskState.EXITED
    task.exit_code = exit_code
    task.finished_at = timezone.now()
    task.save(update_fields=["state", "exit_code", "finished_at"])
    release_task_gpus(task)
    job = task.job
    if task.attempt != job.attempt or job.state != JobState.RUNNING.value:
        return
    siblings = list(JobTask.objects.filter(job=job, attempt=job.attempt))
    all_done = all(t.state in (TaskState.EXITED, TaskState.LOST) for t in siblings)
    if job.cancel_requested_at is not None:
        if all_done:
            job.exit_code = exit_code
            job_transition(job, JobState.CANCELLED, kind=EventKind.CANCELLED, actor=actor, reason="processes ended")
            _kick_scheduler()
        return
    if exit_code != 0:
        what = f"exit code {exit_code}" if exit_code is not None else "the process could not start"
        # A process that could not start never touched a GPU; only a real exit can be the hardware's doing.
        blame = None
        if exit_code is not None:
            blame = fatal_xid_near_exit(job_id=job.pk, attempt=job.attempt, exited_at=task.finished_at)
        if blame is not None:
            reason = f"rank {task.rank}: {what}, {blame.gap(task.finished_at)} {blame.words()}: a hardware failure"
            job_requeue(job, actor=actor, reason=reason, hardware=True)
            return
        job.exit_code = exit_code
        JobTask.objects.filter(job=job, attempt=job.attempt, state__in=[TaskState.ASSIGNED, TaskState.RUNNING]).update(
            kill_requested=True
        )
        job_transition(job, JobState.FAILED, kind=EventKind.FAILED, actor=actor, reason=f"rank {task.rank}: {what}")
        _kick_scheduler()
    elif all_done:
        job.exit_code = 0
        job_transition(job, JobState.SUCCEEDED, kind=EventKind.SUCCEEDED, actor=actor)
        _kick_scheduler()


def job_reopen_after_hardware_fault(job: Job, *, blame: XidBlame, actor: str) -> bool:
    """Put a job that failed on a non-zero exit back in the queue, because a fatal XID on its GPUs arrived after
    the exit: the hardware killed it, the exit merely reached the portal first (Ref: #4).

    This is the one transition out of a terminal state (``failed → pending``, :data:`~scheduling.core.states.
    REOPENINGS`), so it is narrow. It happens only when the job failed on a non-zero exit of its latest attempt,
    within ``CORRAL_XID_EXIT_WINDOW`` of the XID and no longer ago than that window (a failed job is final once the
    window has passed), no cancel was asked for, its owner has not already resubmitted the same command to the same
    tenant since, and it has hardware retries left (``CORRAL_MAX_HARDWARE_RETRIES``). Returns whether it reopened.

    It counts as a hardware retry, is recorded as a ``requeued`` event (``failed → pending``) naming the XID,
    forgets the failed attempt's exit code and finish time, and asks for a scheduling round after commit.
    Precondition: the caller holds the job's row lock.
    """
    now = timezone.now()
    window = xid_exit_window()
    if (
        job.state != JobState.FAILED.value
        or job.exit_code in (None, 0)
        or job.cancel_requested_at is not None
        or job.finished_at is None
        or now - job.finished_at > window
        or abs(job.finished_at - blame.at) > window
        or job.hardware_retries >= settings.CORRAL_MAX_HARDWARE_RETRIES
    ):
        return False
    resubmitted = Job.objects.filter(
        tenant_id=job.tenant_id, user_id=job.user_id, command=job.command, submitted_at__gt=job.finished_at
    ).exists()
    if resubmitted:  # the owner already runs it again; a second copy would race the first for its outputs
        return False
    current = JobState(job.state)
    check_reopen(current, JobState.PENDING)
    reason = f"its exit code {job.exit_code} came {blame.gap(job.finished_at)} {blame.words()}: a hardware failure"
    if job.started_at is not None:
        job.attained_service += job.gpus * max(0.0, (job.finished_at - job.started_at).total_seconds())
    job.hardware_retries += 1
    job.state = JobState.PENDING.value
    job.exit_code = None
    job.started_at = job.finished_at = None
    job.queued_at = now
    job.reason_code, job.reason = "", ""
    job.save()
    _record(job, EventKind.REQUEUED, actor=actor, reason=reason, from_state=current.value, to_state=job.state)
    _kick_scheduler()
    return True
