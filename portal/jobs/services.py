"""Services that change jobs. Each is keyword-only, runs in one transaction, checks the state table of
``scheduling.core.states`` and records a :class:`JobEvent` for every state change.

Side effects outside the database (kicking the scheduler) are queued with ``transaction.on_commit`` so they
never fire for a change that rolled back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, IntegerField
from django.utils import timezone

from portal.errors import Conflict, NotAllowed
from portal.jobs.elastic_spec import elastic_columns
from portal.jobs.ledger import RankPlacement, allocate, gang_order, release_task_gpus
from portal.jobs.models import (
    EventKind,
    Job,
    JobEvent,
    JobTask,
    TaskState,
)
from portal.jobs.outcome import exit_words
from portal.jobs.selectors import attempt_size, jobs_awaiting_previous_attempt
from portal.jobs.share_spec import ShareSpec, check_share, share_columns
from portal.jobs.validation import admit_submission, default_job_name, may_manage, validate_spec
from portal.jobs.waiting import jobs_set_wait_reasons
from portal.rounds import request_round
from portal.telemetry.exits import XidBlame, fatal_xid_near_exit, xid_exit_window
from portal.tenants.models import Tenant
from scheduling.core.durations import format_duration
from scheduling.core.model import WaitReason
from scheduling.core.states import InvalidTransition, JobState, check_reopen, check_transition
from telemetry.retry import FailureOrigin, RetryDecision, retry_decision

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def _record(job: Job, kind: str, *, actor: str, reason: str = "", from_state: str = "", to_state: str = "") -> None:
    JobEvent.objects.create(job=job, kind=kind, actor=actor, reason=reason, from_state=from_state, to_state=to_state)


def _kick_scheduler() -> None:
    """Ask for a scheduling round once the current transaction commits (submit, finish, cancel all free or
    need GPUs). Coalesced (``portal.rounds``): a burst of changes is placed by one round, not one round each. If the
    cache or broker is briefly unreachable the change still stands and the beat round places the job shortly."""
    request_round()


def job_transition(job: Job, target: JobState, *, kind: str, actor: str, reason: str = "") -> Job:
    """Move a locked ``job`` to ``target`` if the state table allows it, stamping times and recording the event.

    Precondition: the caller holds ``job``'s row lock inside a transaction.
    """
    current = JobState(job.state)
    check_transition(current, target)
    now = timezone.now()
    job.state = target.value
    job.stop_due_at, job.stop_reason = None, ""  # a notice (elastic_services) is about the attempt that ends here
    if target is JobState.RUNNING:
        job.started_at = now
        job.resize_to = None  # the size it asked for is what it now holds
        job.reason_code, job.reason = "", ""
    elif target is JobState.PENDING:
        job.queued_at = now
    else:  # terminal
        job.finished_at = now
        job.reason_code, job.reason = "", ""
    job.save()
    _record(job, kind, actor=actor, reason=reason, from_state=current.value, to_state=target.value)
    return job


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
    share: ShareSpec | None = None,
    max_gpus: int | None = None,
    scaling: object = None,
) -> Job:
    """Queue a new job for ``user`` in ``tenant`` (their only tenant when omitted); ``share``: part of one GPU (#17);
    ``max_gpus``: an elastic job that may grow from ``gpus`` to that many, with an optional ``scaling`` curve (#19).

    ``time_limit`` (seconds, 1 to 30 days; None: no limit) bounds each attempt: past it the job is stopped and
    fails (see :func:`jobs_enforce_time_limits`); a short enough limit also lets it run on soft-cordoned GPUs.

    Refuses (``ValidationFailed``, field-scoped) a job that could never run: empty command, bad env, a time limit
    out of range, more GPUs than the tenant's cap or the cluster; refuses (``QuotaExceeded``) when the tenant
    already has ``max_active_jobs`` jobs pending or running. That count is taken under the quota row's lock, so
    concurrent submits cannot overshoot it. Side effects: a ``submitted`` event; a scheduling round after commit.
    """
    env = dict(env or {})
    name = default_job_name(name, command)
    validate_spec(name=name, command=command, gpus=gpus, env=env, time_limit=time_limit)
    elastic = elastic_columns(gpus=gpus, max_gpus=max_gpus, scaling=scaling, fraction=share.fraction if share else None)
    if share is not None:
        check_share(share)
        gpus = 1  # a share is part of one GPU: every count of GPUs per job sees one
    resolved = admit_submission(user=user, tenant=tenant, gpus=gpus, adding=1, whole_gpus=share is None)
    job = Job.objects.create(
        tenant=resolved,
        user=user,
        name=name,
        command=command,
        gpus=gpus,
        env=env,
        time_limit=time_limit,
        queued_at=timezone.now(),
        **elastic,
        **share_columns(share),
    )
    _record(job, EventKind.SUBMITTED, actor=user.get_username(), to_state=JobState.PENDING.value)
    _kick_scheduler()
    return job


@transaction.atomic
def job_cancel(*, job: Job, by: User) -> Job:
    """Cancel ``job`` on behalf of ``by`` (its owner, a tenant admin or staff).

    A pending job is cancelled at once. A running job is marked ``cancel_requested`` and its tasks are told to
    stop (SIGTERM, then SIGKILL after the grace period); it becomes ``cancelled`` when its processes have exited,
    so its GPUs are never handed out while a process still holds them. Refused with ``Conflict`` when finished.
    """
    job = Job.objects.select_for_update().get(pk=job.pk)
    if not may_manage(by, owner_id=job.user_id, tenant=job.tenant):
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


def _hardware_retry(job: Job) -> RetryDecision:
    """Whether a job its hardware killed runs again: the one rule (``telemetry.retry.retry_decision``), bounded by
    ``CORRAL_MAX_HARDWARE_RETRIES``, for both a requeue and a reopening after a late XID."""
    return retry_decision(
        FailureOrigin.HARDWARE,
        hardware_retries_so_far=job.hardware_retries,
        max_hardware_retries=settings.CORRAL_MAX_HARDWARE_RETRIES,
    )


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
        retry = _hardware_retry(job)
        job.hardware_retries += 1
        if not retry.retry:
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
        job.attained_service += attempt_size(job) * max(0.0, (timezone.now() - job.started_at).total_seconds())
    job.started_at = None
    job_transition(job, JobState.PENDING, kind=kind, actor=actor, reason=reason)
    _kick_scheduler()
    return job


def job_start(*, job_id: int, ranks: Sequence[RankPlacement], actor: str) -> bool:
    """Start pending job ``job_id`` on ``ranks`` (one per node of its gang): a new attempt, its GPUs allocated in
    the ledger, one task per node, a ``started`` event naming where. Returns False, leaving the job pending, when it
    is no longer pending (cancelled since the round read it), when a rank of its previous attempt may still be
    alive on a node that is up, or when a GPU is still held (a preempted job whose process has not exited yet):
    then it waits with that reason, and the rest of the round still applies.

    Precondition: inside the round's transaction, holding the scheduler lease.
    """
    job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.PENDING.value).first()
    if job is None:
        return False
    if jobs_awaiting_previous_attempt(job_ids=[job.pk]):
        # Checked again under the row lock the heartbeat takes to free the GPUs: a job never runs twice at once.
        code = WaitReason.PREVIOUS_ATTEMPT_STOPPING
        jobs_set_wait_reasons(reasons={job.pk: (code, "")})
        return False
    ordered = gang_order(ranks)
    try:
        with transaction.atomic():  # a savepoint: a refused allocation undoes only this start
            job.attempt += 1
            allocate(job, ordered)
            where = "; ".join(
                f"{r.node.name} GPUs {','.join(str(index) for _, index in sorted(r.gpus, key=lambda g: g[1]))}"
                for r in ordered
            )
            job_transition(job, JobState.RUNNING, kind=EventKind.STARTED, actor=actor, reason=f"on {where}")
    except IntegrityError:
        job.refresh_from_db()
        jobs_set_wait_reasons(
            reasons={job.pk: (WaitReason.NOT_ENOUGH_FREE_GPUS, "waiting for preempted jobs to release their GPUs")}
        )
        return False
    return True


def job_preempt(*, job_id: int, actor: str) -> bool:
    """Requeue running job ``job_id`` because the scheduler gives its GPUs to a higher-priority job; False when it
    is no longer running. Its processes are stopped through the next heartbeats and its GPUs stay allocated until
    they have exited. Precondition: inside a transaction (the round's)."""
    job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.RUNNING.value).first()
    if job is None:
        return False
    job_requeue(
        job, actor=actor, reason="preempted for a higher-priority job", hardware=False, kind=EventKind.PREEMPTED
    )
    return True


def job_task_exited(*, task: JobTask, exit_code: int | None, actor: str) -> None:
    """Record that one task's process ended, free its GPUs and settle the job when its gang is done.

    Rules: all tasks of the current attempt exited 0 → succeeded; a cancel was requested → cancelled once every
    task has exited; any other non-zero exit → failed at once, and the remaining tasks are told to stop — unless a
    fatal XID hit one of the attempt's GPUs within ``CORRAL_XID_EXIT_WINDOW`` of now: then the hardware killed the
    process, and the job is requeued as a hardware retry instead (bounded by ``CORRAL_MAX_HARDWARE_RETRIES``; the
    event names the XID). Reports of older attempts (or of a job no longer running) only free GPUs and ask for a
    round. Precondition: the caller holds the job's row lock. Ref: #4 (the XID that arrives *after* the exit is
    handled by ``job_reopen_after_hardware_fault``).
    """
    task.state = TaskState.EXITED
    task.exit_code = exit_code
    task.finished_at = timezone.now()
    task.save(update_fields=["state", "exit_code", "finished_at"])
    release_task_gpus(task)
    job = task.job
    if task.attempt != job.attempt or job.state != JobState.RUNNING.value:
        _kick_scheduler()  # a stopping attempt freed GPUs: its job, or another, may be waiting for them
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
        what = exit_words(exit_code)  # "exit code 3", "killed by SIGKILL": how the history and the pages say it
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
        or not _hardware_retry(job).retry
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
        job.attained_service += attempt_size(job) * max(0.0, (job.finished_at - job.started_at).total_seconds())
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
