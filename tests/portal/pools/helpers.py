"""A loanable pool on the real database: nodes registered like any agent's, moved to a serving pool, and jobs
started on them through the jobs services (as a round would) and ended through heartbeats (as an agent would)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from portal.jobs.ledger import RankPlacement
from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_start, job_submit
from portal.nodes.models import Node
from portal.nodes.services import TaskReport, node_heartbeat, node_set_draining
from tests.fixtures import World, register_node

POOL = "inference"


def make_pool(world: World, names: tuple[str, ...] = ("s1", "s2", "s3"), *, gpus: int = 4, pool: str = POOL) -> None:
    """Register ``names`` as nodes of ``pool`` (not lent), and drain the training nodes so that work lands only on
    lent nodes."""
    for name in names:
        register_node(name, gpus)
    Node.objects.filter(name__in=names).update(pool=pool)
    for node in world.nodes:
        node_set_draining(node=node, draining=True)


def submit(user: AbstractBaseUser, gpus: int, *, max_gpus: int | None = None, name: str = "train") -> Job:
    job = job_submit(user=user, command=f"python {name}.py", gpus=gpus, name=name)
    if max_gpus is not None:
        Job.objects.filter(pk=job.pk).update(max_gpus=max_gpus)
        job.refresh_from_db()
    return job


def start(job: Job, where: dict[str, int]) -> Job:
    """Start pending ``job`` with ``where[node]`` free GPUs of each node, as a round would."""
    ranks = []
    held = set(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", flat=True))
    for name, count in where.items():
        node = Node.objects.get(name=name)
        free = [g for g in node.gpus.order_by("index") if g.pk not in held][:count]
        assert len(free) == count, f"{name} has {len(free)} free GPUs"
        ranks.append(RankPlacement(node=node, gpus=[(g.pk, g.index) for g in free]))
    with transaction.atomic():
        assert job_start(job_id=job.pk, ranks=ranks, actor="scheduler")
    job.refresh_from_db()
    return job


def exit_all(job: Job) -> None:
    """Every task of ``job``'s current attempt reports its exit, as its agents would after the kill."""
    job.refresh_from_db()
    for task in JobTask.objects.filter(job=job, attempt=job.attempt).select_related("node"):
        report = TaskReport(job.pk, job.attempt, task.rank, "exited", exit_code=-15)
        node_heartbeat(node=task.node, reports=[report])


def pool_state() -> dict[str, tuple[bool, bool]]:
    """Each pool node's (lent, returning)."""
    return {n.name: (n.lent, n.returning) for n in Node.objects.filter(pool=POOL)}


def later(start: datetime, seconds: float) -> datetime:
    return start + timedelta(seconds=seconds)
