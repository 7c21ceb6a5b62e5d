"""Health actions: what Corral does to a GPU the health rules condemned or the predictor expects to fail (drain it,
requeue or reopen its jobs, soft-cordon it), an admin's "healthy again", and the alerts and mail they raise.

Lock order: the actions that take a GPU out of service take the scheduler's lease first, then the GPU, then jobs by
id, so a scheduling round can never hand out a GPU in the instant between "this GPU is bad" and "its jobs are
requeued". Mail and other side effects outside the database are queued with ``transaction.on_commit``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import datetime

from django.core.mail import mail_admins
from django.db import transaction
from django.utils import timezone

from portal.jobs.lease import hold_round_lease
from portal.jobs.models import Allocation, Job, JobTask, TaskState
from portal.jobs.selectors import cordon_rule
from portal.jobs.services import job_reopen_after_hardware_fault, job_requeue
from portal.nodes.models import Gpu, GpuHealth
from portal.queue import NOTIFY_ADMINS, enqueue_on_commit
from portal.telemetry.exits import XidBlame, jobs_an_xid_may_have_killed
from portal.telemetry.models import Alert, AlertSeverity, FailureModel, GpuHealthEvent, HealthEventKind
from portal.telemetry.services._shared import _dt
from scheduling.core.states import JobState
from telemetry.health import HealthCause, Verdict
from telemetry.retry import FailureOrigin, failure_origin
from telemetry.sample import XidEvent

log = logging.getLogger(__name__)

HEALTH_ACTOR = "health"
PREDICTOR_ACTOR = "predictor"


@transaction.atomic
def gpu_mark_unhealthy(*, gpu_id: int, verdict: Verdict, xid: int | None = None, actor: str = HEALTH_ACTOR) -> bool:
    """Drain a GPU the health rules condemned: mark it unhealthy (the scheduler's snapshot then offers it to no
    one), requeue every running job holding it as a whole gang (a hardware retry, bounded by
    ``CORRAL_MAX_HARDWARE_RETRIES``), record a :class:`GpuHealthEvent` and alert admins.

    Returns False (and does nothing) when the GPU is already unhealthy. Lock order: scheduler lease, GPU, jobs by id.
    """
    hold_round_lease()
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu_id)
    if gpu.health == GpuHealth.UNHEALTHY:
        return False
    finding = verdict.findings[0] if verdict.findings else None
    detail = f"{verdict.cause.label if verdict.cause else 'unhealthy'}: {verdict.message}"
    gpu.health, gpu.health_detail = GpuHealth.UNHEALTHY, detail[:255]
    gpu.save(update_fields=["health", "health_detail"])
    requeued: list[int] = []
    if failure_origin(gpu_verdicts=[verdict]) is FailureOrigin.HARDWARE:
        requeued = _requeue_jobs_on(gpu, reason=f"GPU {gpu} failed: {verdict.message}"[:255], actor=actor)
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.UNHEALTHY,
        cause=(verdict.cause or HealthCause.FATAL_XID).value,
        xid=xid,
        evidence_at=_dt(finding.at) if finding else None,
        message=verdict.message[:255],
        actor=actor,
        requeued_jobs=requeued,
    )
    jobs = f" Requeued job(s) {', '.join(map(str, requeued))} elsewhere." if requeued else ""
    _raise_alert(
        gpu=gpu,
        severity=AlertSeverity.CRITICAL,
        title=f"GPU {gpu} ({gpu.uuid}) drained: {verdict.cause.label if verdict.cause else 'unhealthy'}",
        message=f"{verdict.message}. The GPU takes no new work until an admin marks it healthy again.{jobs}",
    )
    return True


@transaction.atomic
def jobs_reopen_for_xid(*, gpu_id: int, event: XidEvent, actor: str = HEALTH_ACTOR) -> list[int]:
    """The exit-first order of issue #4: a fatal XID on a GPU arrived after the non-zero exit it caused, so the
    job was recorded as failing by itself. Every job whose latest attempt held the GPU and that failed within
    ``CORRAL_XID_EXIT_WINDOW`` of the XID is reopened as a hardware retry (``job_reopen_after_hardware_fault``
    holds the rules). Returns the reopened job ids.

    Precondition: the XID is already committed (``telemetry_ingest`` calls this after storing the batch). A
    heartbeat settling one of these jobs at the same moment then either saw the XID and requeued the job itself, or
    commits before the lock below is granted and the job is judged here as failed; neither order loses the retry,
    and the job's row lock keeps both from requeueing it twice. Lock order: jobs by id (as heartbeats).
    """
    at = _dt(event.timestamp)
    ids = jobs_an_xid_may_have_killed(gpu_id=gpu_id, at=at, now=timezone.now())
    if not ids:
        return []
    blame = XidBlame(xid=event.xid, gpu=str(Gpu.objects.select_related("node").get(pk=gpu_id)), at=at)
    reopened = []
    for job in Job.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
        if job_reopen_after_hardware_fault(job, blame=blame, actor=actor):
            reopened.append(job.pk)
            log.warning("job %s had failed, but %s came within the window of its exit: retried", job.pk, blame.words())
    return reopened


def _requeue_jobs_on(gpu: Gpu, *, reason: str, actor: str) -> list[int]:
    """Requeue the running jobs whose current attempt holds ``gpu``. Precondition: in the caller's transaction."""
    held = defaultdict(set)
    for job_id, attempt in Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list(
        "job_id", "attempt"
    ):
        held[job_id].add(attempt)
    requeued = []
    for job in Job.objects.select_for_update().filter(pk__in=list(held)).order_by("pk"):
        if job.state == JobState.RUNNING.value and job.attempt in held[job.pk]:
            job_requeue(job, actor=actor, reason=reason, hardware=True)
            requeued.append(job.pk)
    return requeued


@transaction.atomic
def gpu_cordon(*, gpu_id: int, risk: float, model: FailureModel | None, now: datetime | None = None) -> bool:
    """Soft-cordon a GPU the predictor expects to fail: no new work lands on it, and every running task holding it
    is asked to checkpoint (the next heartbeat delivers SIGUSR1 once). Admins are alerted.

    Returns False when the GPU is not healthy (already cordoned or drained). Running jobs keep running: a
    prediction is not a fault, and the job's own checkpoint is cheaper than a restart.
    """
    now = now or timezone.now()
    hold_round_lease()
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu_id)
    if gpu.health != GpuHealth.HEALTHY:
        return False
    version = f" (model v{model.version})" if model else ""
    gpu.health = GpuHealth.CORDONED
    gpu.health_detail = f"predicted to fail: risk {risk:.2f}{version}"[:255]
    gpu.save(update_fields=["health", "health_detail"])
    held = list(Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list("job_id", "attempt", "rank"))
    asked: list[int] = []
    for job_id, attempt, rank in held:
        # A fresh request (signalled_at cleared) so a job asked before an earlier, cleared cordon is asked again.
        updated = JobTask.objects.filter(
            job_id=job_id, attempt=attempt, rank=rank, node=gpu.node, state=TaskState.RUNNING
        ).update(checkpoint_requested_at=now, checkpoint_signalled_at=None)
        if updated:
            asked.append(job_id)
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.CORDONED,
        cause="predicted",
        evidence_at=now,
        message=gpu.health_detail,
        actor=PREDICTOR_ACTOR,
        checkpoint_jobs=asked,
    )
    jobs = f" Asked job(s) {', '.join(map(str, asked))} to checkpoint." if asked else ""
    _raise_alert(
        gpu=gpu,
        severity=AlertSeverity.WARNING,
        title=f"GPU {gpu} ({gpu.uuid}) predicted to fail: risk {risk:.2f}",
        message=f"Soft-cordoned{version}: it {cordon_rule()}.{jobs}",
    )
    return True


@transaction.atomic
def gpu_mark_healthy(*, gpu_id: int, by: str, note: str = "") -> bool:
    """An admin's word that a GPU was reset or repaired: it takes work again and its open alerts are resolved.

    Returns False when it already was healthy. The next batches are judged afresh: a GPU still reporting an
    uncorrectable error or no spare rows is drained again at once.
    """
    gpu = Gpu.objects.select_for_update().get(pk=gpu_id)
    if gpu.health == GpuHealth.HEALTHY:
        return False
    previous = gpu.health
    gpu.health, gpu.health_detail = GpuHealth.HEALTHY, ""
    gpu.save(update_fields=["health", "health_detail"])
    now = timezone.now()
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.RESTORED,
        cause="",
        evidence_at=now,
        message=(note or f"marked healthy by {by} (was {previous})")[:255],
        actor=by[:150],
    )
    Alert.objects.filter(gpu=gpu, resolved_at__isnull=True).update(resolved_at=now, resolved_by=by[:150])
    log.info("GPU %s (%s) marked healthy by %s", gpu_id, gpu.uuid, by)
    return True


def _raise_alert(*, gpu: Gpu, severity: str, title: str, message: str) -> Alert:
    """Record an alert, log it, and mail admins once the transaction commits (never for a rolled-back change)."""
    alert = Alert.objects.create(node=gpu.node, gpu=gpu, severity=severity, title=title[:200], message=message)
    log.warning("telemetry alert [%s] %s: %s", severity, title, message)
    enqueue_on_commit(NOTIFY_ADMINS, alert.pk)
    return alert


def alert_mail_admins(*, alert_id: int) -> bool:
    """Mail ``settings.ADMINS`` about one alert (a no-op when none are configured); False when the alert is gone.
    Never raises for SMTP trouble: the alert is already on the node page and in the API; mail is a convenience."""
    alert = Alert.objects.select_related("node", "gpu").filter(pk=alert_id).first()
    if alert is None:
        return False
    body = f"{alert.message}\n\nNode: {alert.node.name}\nRaised at: {alert.at:%Y-%m-%d %H:%M:%S} UTC\n"
    mail_admins(f"[{alert.severity}] {alert.title}", body, fail_silently=True)
    return True
