"""Services for shares of a GPU (issue #17): start one on a shared GPU, requeue one the agent evicted or whose MPS
server faulted, mark a repeat culprit, and write why pending shares wait.

Every service follows the jobs services' rules (keyword-only, the job row locked, a ``JobEvent`` per state change,
a round asked for after commit through ``job_requeue``). An evicted or faulted share is requeued, never failed:
offline work is best-effort by contract, and an MPS fault hits every client of the GPU, not only its cause.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from portal.jobs.ledger import allocate_share
from portal.jobs.models import EventKind, Job, WorkloadClass
from portal.jobs.selectors import jobs_awaiting_previous_attempt
from portal.jobs.services import job_requeue, job_transition
from portal.jobs.share_selectors import EVICTED_PREFIX
from portal.nodes.models import Node
from scheduling.core.states import JobState


class ShareWait(StrEnum):
    """Why a pending share waits, beyond the core's reasons (caps reuse those). Shown like every other reason."""

    NO_SHARED_GPU = "share_no_shared_gpu"
    NO_ROOM = "share_no_room"
    MPS_CULPRIT = "share_mps_culprit"
    TENANT_CAP_REACHED = "tenant_cap_reached"  # the core's codes: the job page links to the tenants page for these
    USER_CAP_REACHED = "user_cap_reached"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    ShareWait.NO_SHARED_GPU: "Waiting for a shared GPU: none that accepts shares is up and healthy.",
    ShareWait.NO_ROOM: "Waiting for room on a shared GPU.",
    ShareWait.MPS_CULPRIT: "Kept off shared GPUs: MPS server faults named this job repeatedly.",
    ShareWait.TENANT_CAP_REACHED: "Waiting: the tenant is using all GPUs its quota allows.",
    ShareWait.USER_CAP_REACHED: "Waiting: you are using all GPUs your per-user cap allows.",
}


def gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def job_start_share(
    *, job_id: int, node: Node, gpu_id: int, index: int, compute_percent: int, memory_bytes: int, actor: str
) -> bool:
    """Start pending share ``job_id`` on one shared GPU with these MPS limits: a new attempt, its share in the
    ledger, one task, a ``started`` event naming the GPU and the share. False (the job stays pending) when it is no
    longer pending or a rank of its previous attempt may still be alive. Precondition: inside the round's
    transaction, holding the scheduler lease."""
    job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.PENDING.value).first()
    if job is None or jobs_awaiting_previous_attempt(job_ids=[job.pk]):
        return False
    try:
        with transaction.atomic():
            job.attempt += 1
            allocate_share(
                job, node=node, gpu_id=gpu_id, index=index, compute_percent=compute_percent, memory_bytes=memory_bytes
            )
            where = f"on {node.name} GPU {index}, shared: {compute_percent}% compute, {gib(memory_bytes)} memory"
            job_transition(job, JobState.RUNNING, kind=EventKind.STARTED, actor=actor, reason=where)
    except IntegrityError:
        job.refresh_from_db()
        return False
    return True


def job_share_evicted(*, job: Job, eviction: Mapping[str, Any], actor: str) -> bool:
    """The agent evicted this running share to protect online work on its GPU: requeue it (never fail it), with the
    reason "evicted to protect online work on GPU N" as a ``requeued`` event, and count the eviction (placement
    weighs a job's history). False when the job is no longer running. Precondition: ``job`` is row-locked."""
    if job.state != JobState.RUNNING.value:
        return False
    reason = f"{EVICTED_PREFIX} on GPU {eviction.get('gpu')}"
    cause = str(eviction.get("cause") or "")
    job.evictions += 1
    job_requeue(job, actor=actor, reason=f"{reason} ({cause})" if cause else reason, hardware=False)
    return True


def job_share_mps_fault(*, job: Job, fault: Mapping[str, Any], actor: str) -> bool:
    """The MPS server of this running share's GPU faulted. Online work is restarted first (``action`` restart:
    requeued, and every placer places online shares before offline ones); offline work is requeued. Neither is a
    failure: a fault hits every client of the GPU. A job the MPS logs named as the suspect
    ``CORRAL_MPS_CULPRIT_FAULTS`` times (2) or more is marked the culprit and kept off shared GPUs from then on.
    False when the job is no longer running. Precondition: ``job`` is row-locked."""
    if job.state != JobState.RUNNING.value:
        return False
    if fault.get("suspect"):
        job.mps_suspect_faults = max(job.mps_suspect_faults + 1, int(fault.get("suspect_faults") or 0))
    if job.mps_suspect_faults >= settings.CORRAL_MPS_CULPRIT_FAULTS:
        job.mps_culprit = True
    restart = fault.get("action") == "restart" or job.workload_class == WorkloadClass.ONLINE
    what = "restarting it (online work first)" if restart else "requeued"
    reason = f"MPS server fault on GPU {fault.get('gpu')}: {what}"
    if job.mps_culprit:
        reason += f"; named by {job.mps_suspect_faults} faults, so kept off shared GPUs"
    job_requeue(job, actor=actor, reason=reason, hardware=False)
    return True


def jobs_set_share_wait_reasons(*, reasons: Mapping[int, tuple[ShareWait, str]]) -> None:
    """Write each still-pending share's reason where it changed (one UPDATE per distinct text). No row locks: only
    the reason columns of pending jobs are written, as ``portal.jobs.waiting`` does."""
    if not reasons:
        return
    current = dict(Job.objects.filter(pk__in=list(reasons), state=JobState.PENDING.value).values_list("pk", "reason"))
    groups: dict[tuple[str, str], list[int]] = {}
    for job_id, (code, detail) in reasons.items():
        text = (f"{code.label} ({detail})" if detail else code.label)[:255]
        if job_id in current and current[job_id] != text:
            groups.setdefault((code.value, text), []).append(job_id)
    for (code_value, text), ids in groups.items():
        Job.objects.filter(pk__in=ids, state=JobState.PENDING.value).update(reason_code=code_value, reason=text)
