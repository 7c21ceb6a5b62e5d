"""Apply a core :class:`Decision` to the database: preempt, start, and write every waiting job's reason.

Called inside the round's transaction. Each start runs in its own savepoint: if the database refuses one (a GPU
whose allocation is still active — e.g. held by a preempted job whose process has not exited yet), only that
job stays pending and the rest of the decision still applies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from portal.jobs.models import Allocation, EventKind, Job, JobTask
from portal.jobs.services import job_requeue, job_transition
from portal.scheduler.snapshot import LiveSnapshot
from scheduling.core.model import Decision, Placement, WaitReason
from scheduling.core.states import JobState

ACTOR = "scheduler"


@dataclass(frozen=True, slots=True)
class Applied:
    started: int
    preempted: int
    waiting: int


def _start(placement: Placement, live: LiveSnapshot) -> bool:
    job = Job.objects.select_for_update().filter(pk=placement.job_id, state=JobState.PENDING.value).first()
    if job is None:  # cancelled since the snapshot was read
        return False
    by_node: dict[str, list[int]] = defaultdict(list)
    for slot in placement.slots:
        by_node[slot.node].append(slot.gpu)
    # Rank 0 (the rendezvous master) is the node holding most of the gang, then by name for determinism.
    ordered = sorted(by_node.items(), key=lambda item: (-len(item[1]), item[0]))
    try:
        with transaction.atomic():
            job.attempt += 1
            for rank, (node_name, gpu_ids) in enumerate(ordered):
                node = live.nodes_by_name[node_name]
                Allocation.objects.bulk_create(
                    Allocation(job=job, attempt=job.attempt, gpu_id=g, node=node, rank=rank) for g in gpu_ids
                )
                JobTask.objects.create(
                    job=job,
                    attempt=job.attempt,
                    rank=rank,
                    node=node,
                    gpu_indices=sorted(live.gpu_index[g] for g in gpu_ids),
                )
            where = "; ".join(
                f"{name} GPUs {','.join(str(live.gpu_index[g]) for g in sorted(ids, key=live.gpu_index.__getitem__))}"
                for name, ids in ordered
            )
            job_transition(job, JobState.RUNNING, kind=EventKind.STARTED, actor=ACTOR, reason=f"on {where}")
    except IntegrityError:
        job.refresh_from_db()
        _set_reason(job.pk, WaitReason.NOT_ENOUGH_FREE_GPUS, "waiting for preempted jobs to release their GPUs")
        return False
    return True


def reason_text(code: WaitReason, detail: str) -> str:
    """What a pending job shows: the reason's label, then the core's detail in brackets (fits the column)."""
    return (f"{code.label} ({detail})" if detail else code.label)[:255]


def _set_reason(job_id: int, code: WaitReason, detail: str) -> None:
    Job.objects.filter(pk=job_id, state=JobState.PENDING.value).update(
        reason_code=code.value, reason=reason_text(code, detail)
    )


def apply_decision(decision: Decision, live: LiveSnapshot) -> Applied:
    """Write ``decision``. Precondition: inside the round's transaction, holding the scheduler lease."""
    preempted = 0
    for job_id in decision.preempt:
        job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.RUNNING.value).first()
        if job is not None:
            job_requeue(
                job, actor=ACTOR, reason="preempted for a higher-priority job", hardware=False, kind=EventKind.PREEMPTED
            )
            preempted += 1
    started = sum(_start(p, live) for p in decision.start)
    # Reasons change rarely between rounds: write only the ones that differ, grouped into one UPDATE each.
    current = dict(
        Job.objects.filter(pk__in=list(decision.waiting), state=JobState.PENDING.value).values_list("pk", "reason")
    )
    groups: dict[tuple[WaitReason, str], list[int]] = defaultdict(list)
    for job_id, wait in decision.waiting.items():
        text = reason_text(wait.reason, wait.detail)
        if job_id in current and current[job_id] != text:
            groups[(wait.reason, text)].append(int(job_id))
    for (code, text), ids in groups.items():
        Job.objects.filter(pk__in=ids, state=JobState.PENDING.value).update(reason_code=code.value, reason=text)
    return Applied(started=started, preempted=preempted, waiting=len(decision.waiting))
