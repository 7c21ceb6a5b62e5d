"""Stops with notice, the way elastic jobs change size and reclaimed nodes are emptied (issue #19).

A resize is a restart from a checkpoint: the running attempt's processes get the checkpoint signal (SIGUSR1, the
same delivery as a cordon's, through the node's next heartbeat), and at ``Job.stop_due_at`` the attempt is stopped
and the job requeued, to start again at ``Job.resize_to`` GPUs. A reclaimed node's jobs are stopped the same way,
with a notice no longer than the reclaim's deadline allows. Two steps rather than one because a checkpoint takes
the job's own time: a job that finished writing it may simply exit, and then it is requeued at once like any other
stop.

Every change records an event: ``stop_scheduled`` when the signal is sent, ``resized`` or ``preempted`` when the
attempt is stopped.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction

from portal.jobs.models import EventKind, Job, JobEvent, JobTask, TaskState
from portal.jobs.selectors import attempt_size
from portal.jobs.services import job_requeue
from scheduling.core.model import gpu_count
from scheduling.core.states import JobState


@transaction.atomic
def job_stop_with_notice(
    *, job_id: int, actor: str, reason: str, notice_seconds: float, now: datetime, resize_to: int | None = None
) -> bool:
    """Send running job ``job_id`` the checkpoint signal now and stop it ``notice_seconds`` later, to start again
    at ``resize_to`` GPUs (an elastic job's new size) or at its minimum. False when it is not running. A second
    notice only brings the stop forward (the earlier of the two) and may change the size asked for.

    Raises ``ValueError`` for a ``resize_to`` outside the job's range: the callers compute it, so that is a bug.
    """
    job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.RUNNING.value).first()
    if job is None:
        return False
    if resize_to is not None and (job.max_gpus is None or not job.gpus <= resize_to <= job.max_gpus):
        raise ValueError(f"job {job.pk} cannot run at {resize_to} GPUs")
    due = now + timedelta(seconds=max(0.0, notice_seconds))
    first = job.stop_due_at is None
    job.stop_due_at = due if job.stop_due_at is None else min(job.stop_due_at, due)
    job.stop_reason = reason
    job.resize_to = resize_to if resize_to != job.gpus else None
    job.save(update_fields=["stop_due_at", "stop_reason", "resize_to"])
    if first:
        JobTask.objects.filter(job=job, attempt=job.attempt, state__in=[TaskState.ASSIGNED, TaskState.RUNNING]).update(
            checkpoint_requested_at=now, checkpoint_signalled_at=None
        )
    notice = f"stopped in {round(max(0.0, notice_seconds))} s" if notice_seconds > 0 else "stopped now"
    JobEvent.objects.create(
        job=job, kind=EventKind.STOP_SCHEDULED, actor=actor, reason=f"{reason}: checkpoint signal sent, {notice}"
    )
    return True


@transaction.atomic
def jobs_stop_due(*, now: datetime, actor: str = "scheduler") -> list[int]:
    """Stop every running job whose notice is over and requeue it; returns their ids. Called by every round and
    beat, like the time limits."""
    due = list(
        Job.objects.select_for_update().filter(state=JobState.RUNNING.value, stop_due_at__lte=now).order_by("pk")
    )
    for job in due:
        size = job.resize_to or job.gpus
        was = attempt_size(job)
        resizing = job.max_gpus is not None and size != was
        kind = EventKind.RESIZED if resizing else EventKind.PREEMPTED
        why = f"{job.stop_reason}; restarts on {gpu_count(size)}" if resizing else job.stop_reason
        job_requeue(job, actor=actor, reason=why, hardware=False, kind=kind)
    return [job.pk for job in due]


def jobs_reset_size(*, job_ids: list[int]) -> int:
    """Send pending elastic jobs that were grown back to their minimum: the GPUs they were offered while idle are
    wanted by jobs waiting for their minimums. Not a state change (they stay pending), so no event; their wait
    reason says the rest. Returns how many changed."""
    return Job.objects.filter(pk__in=job_ids, state=JobState.PENDING.value, resize_to__isnull=False).update(
        resize_to=None
    )
