"""The GPU ledger: which attempt of which job holds which GPU. Rows are written here and nowhere else.

An ``Allocation`` row per GPU and a ``JobTask`` per node of the gang are created when a job starts; a task's
allocations are released once its process is known to be gone. The database backs the ledger up: a partial
unique index (``jobs_allocation_one_active_per_gpu``) makes a second active allocation of a GPU impossible.
Callers hold the job's row lock; a scheduling round also holds the scheduler lease (``portal.jobs.lease``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils import timezone

from portal.jobs.models import Allocation, Job, JobTask
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


def release_task_gpus(task: JobTask) -> None:
    """Free the GPUs a task held, once its process is known to be gone."""
    Allocation.objects.filter(
        job_id=task.job_id, attempt=task.attempt, node_id=task.node_id, released_at__isnull=True
    ).update(released_at=timezone.now())
