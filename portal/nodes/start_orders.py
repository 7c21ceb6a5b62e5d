"""What the portal tells an agent to start: one task's order, with the environment Corral gives it (the user's
variables, then the rendezvous and the attempt's size, which an elastic job's resize changes, issue #19)."""

from __future__ import annotations

from django.conf import settings

from portal.jobs.array_selectors import array_task_env
from portal.jobs.models import Job, JobTask
from portal.jobs.share_selectors import share_order
from portal.nodes.models import Node


def task_env(task: JobTask, job: Job, *, master: Node, nnodes: int, gpus: int) -> dict[str, str]:
    """The environment the portal gives one task: the user's variables, then the ones Corral owns. ``gpus`` is the
    attempt's size, which an elastic job's resize changes (issue #19)."""
    env = {str(k): str(v) for k, v in (job.env or {}).items()}
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in task.gpu_indices),
            "CORRAL_JOB_ID": str(job.pk),
            "CORRAL_ATTEMPT": str(task.attempt),
            "CORRAL_NNODES": str(nnodes),
            "CORRAL_NODE_RANK": str(task.rank),
            "CORRAL_GPUS": str(gpus),
            "CORRAL_NODE_GPUS": str(len(task.gpu_indices)),
            # torchrun-style rendezvous: one process per node, rank = node rank; a task may run torchrun itself.
            "MASTER_ADDR": master.address or master.hostname or "127.0.0.1",
            "MASTER_PORT": str(settings.CORRAL_MASTER_PORT_BASE + job.pk % 1000),
            "WORLD_SIZE": str(nnodes),
            "RANK": str(task.rank),
            "NODE_RANK": str(task.rank),
            "LOCAL_RANK": "0",
        }
    )
    env.update(array_task_env(job))  # CORRAL_ARRAY_TASK_ID and the rest, for a task of a job array
    return env


def start_order(task: JobTask) -> dict[str, object]:
    job = task.job
    gang = list(JobTask.objects.filter(job=job, attempt=task.attempt).select_related("node").order_by("rank"))
    order: dict[str, object] = {
        "job": job.pk,
        "attempt": task.attempt,
        "rank": task.rank,
        "command": job.command,
        "gpus": list(task.gpu_indices),
        "env": task_env(task, job, master=gang[0].node, nnodes=len(gang), gpus=sum(len(t.gpu_indices) for t in gang)),
    }
    share = share_order(job=job, attempt=task.attempt)  # a share of one GPU under MPS (issue #17)
    if share is not None:
        order["share"] = share
    return order
