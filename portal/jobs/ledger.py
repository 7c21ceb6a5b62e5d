"""The GPU ledger: which attempt of which job holds which GPU. Rows are written here and nowhere else.

An ``Allocation`` row per GPU and a ``JobTask`` per node of the gang are created when a job starts. A task's
allocations are released only once its processes are *confirmed* gone, never when the portal merely decides the
task is over (a cancel, a time limit, a preemption, a lost node). There are exactly three confirmations:

- the node's agent reports the task's process group exited, or no longer runs it (:func:`release_task_gpus`);
- the node's agent registers again with a clean slate: it killed what it ran and saw it gone
  (:func:`release_lost_tasks_gpus`);
- an admin declares the node's lost tasks dead (the same function, called by the admin's service).

Until then the GPUs are *stopping* (or *fenced*, on a node that is down): not free, and still counted against
their tenant's cap (``portal.jobs.selectors.stopping_allocations``). The database backs the ledger up: a partial
unique index (``jobs_allocation_one_active_per_gpu``) makes a second active whole-GPU allocation of a GPU impossible
(shares of one GPU, issue #17, hold it together: :func:`allocate_share`).
Callers hold the job's row lock; a scheduling round also holds the scheduler lease (``portal.jobs.lease``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Exists, OuterRef
from django.utils import timezone

from portal.jobs.models import Allocation, Job, JobTask, TaskState
from portal.nodes.models import Node


@dataclass(frozen=True, slots=True)
class RankPlacement:
    """One node's share of a gang: the node and its GPUs as (GPU id, NVML index) pairs."""

    node: Node
    gpus: Sequence[tuple[int, int]]


def gang_order(ranks: Sequence[RankPlacement]) -> list[RankPlacement]:
    """Rank 0 (the rendezvous master) is the node holding most of the gang, then by name for determinism."""
    return sorted(ranks, key=lambda r: (-len(r.gpus), r.node.name))


def allocate(job: Job, ranks: Sequence[RankPlacement]) -> None:
    """Give ``job``'s current attempt its GPUs and one task per node, ranked as listed. Raises ``IntegrityError``
    when a GPU is still held (run it in a savepoint). Precondition: ``job`` is row-locked."""
    for rank, placement in enumerate(ranks):
        Allocation.objects.bulk_create(
            Allocation(job=job, attempt=job.attempt, gpu_id=gpu_id, node=placement.node, rank=rank)
            for gpu_id, _ in placement.gpus
        )
        JobTask.objects.create(
            job=job,
            attempt=job.attempt,
            rank=rank,
            node=placement.node,
            gpu_indices=sorted(index for _, index in placement.gpus),
        )


def allocate_share(job: Job, *, node: Node, gpu_id: int, index: int, compute_percent: int, memory_bytes: int) -> None:
    """Give ``job``'s current attempt a share of one shared GPU (issue #17): one ``Allocation`` carrying its MPS
    limits and one task. Several shares may hold a GPU at once (the one-active-per-GPU index is for whole-GPU
    allocations); the share round keeps them within the GPU. Precondition: ``job`` is row-locked, in the round."""
    Allocation.objects.create(
        job=job,
        attempt=job.attempt,
        gpu_id=gpu_id,
        node=node,
        rank=0,
        compute_percent=compute_percent,
        memory_limit_bytes=memory_bytes,
    )
    JobTask.objects.create(job=job, attempt=job.attempt, rank=0, node=node, gpu_indices=[index])


def release_task_gpus(task: JobTask) -> None:
    """Free the GPUs a task held: its agent has reported the process group exited, or that it no longer runs it."""
    Allocation.objects.filter(
        job_id=task.job_id, attempt=task.attempt, node_id=task.node_id, released_at__isnull=True
    ).update(released_at=timezone.now())


def release_lost_tasks_gpus(node: Node) -> int:
    """Free the GPUs still held by the *lost* tasks of ``node`` (fenced: their node went down or their agent
    restarted before they could report an exit), once it is confirmed that none of their processes lives: the
    node's agent re-registered with a clean slate, or an admin said so. Returns how many GPUs it freed.

    Only lost tasks' rows are touched, never those of a task assigned meanwhile by a round that ran concurrently.
    Precondition: the caller holds ``node``'s row lock.
    """
    lost = JobTask.objects.filter(
        job_id=OuterRef("job_id"), attempt=OuterRef("attempt"), node_id=node.pk, state=TaskState.LOST
    )
    return (
        Allocation.objects.filter(node_id=node.pk, released_at__isnull=True)
        .filter(Exists(lost))
        .update(released_at=timezone.now())
    )
