"""Services that change nodes: agent registration and heartbeats, liveness, drain.

The heartbeat is where the portal and an agent reconcile what should run with what runs. The rules are in one
function, :func:`node_heartbeat`, and every one of them is idempotent, so a lost request or response is repaired
by the next heartbeat (see docs/agent-protocol.md).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.errors import Conflict, ValidationFailed
from portal.jobs.ledger import release_lost_tasks_gpus, release_task_gpus
from portal.jobs.logs import task_log_receive
from portal.jobs.models import Job, JobTask, TaskState
from portal.jobs.services import job_requeue, job_task_exited
from portal.jobs.share_services import job_share_evicted, job_share_mps_fault
from portal.nodes.models import Gpu, Node, NodePower, NodeState
from portal.nodes.start_orders import start_order
from portal.rounds import request_round
from scheduling.core.states import JobState

logger = logging.getLogger(__name__)

LIVE_TASK_STATES = (TaskState.ASSIGNED, TaskState.RUNNING)
#: Sent to a task's process group when it should checkpoint soon (documented for job authors in docs/agent.md).
CHECKPOINT_SIGNAL = "SIGUSR1"


def node_token_issue(*, name: str) -> tuple[Node, str]:
    """Create ``name`` if needed and give it a fresh agent token (any older token stops working).

    Returns the node and the token in clear; only its hash is stored, so this is the one time it can be shown.
    """
    token = secrets.token_urlsafe(32)
    node, _ = Node.objects.get_or_create(name=name)
    node.token_hash = Node.hash_token(token)
    node.save(update_fields=["token_hash"])
    return node, token


def node_for_token(token: str) -> Node | None:
    if not token:
        return None
    return Node.objects.filter(token_hash=Node.hash_token(token)).first()


@dataclass(frozen=True, slots=True)
class GpuReport:
    index: int
    uuid: str
    model: str = ""
    memory_mb: int = 0


@dataclass(frozen=True, slots=True)
class TaskReport:
    """What an agent says about one of its tasks in a heartbeat."""

    job: int
    attempt: int
    rank: int
    state: str  # running | exited | failed_to_start
    pid: int | None = None
    exit_code: int | None = None
    log_offset: int = 0
    log: str = ""
    log_end: int | None = None  # byte offset in the agent's file where ``log`` ends
    log_size: int = 0
    eviction: Mapping[str, Any] | None = None  # issue #17: the agent evicted this share, or its MPS server faulted
    mps_fault: Mapping[str, Any] | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.job, self.attempt, self.rank)


@dataclass(slots=True)
class HeartbeatReply:
    start: list[dict[str, object]] = field(default_factory=list)
    kill: list[dict[str, object]] = field(default_factory=list)
    forget: list[dict[str, int]] = field(default_factory=list)
    signal: list[dict[str, object]] = field(default_factory=list)
    log_offsets: dict[str, int] = field(default_factory=dict)


def _lose_tasks(tasks: Iterable[JobTask], *, actor: str, reason: str, confirmed_gone: bool) -> None:
    """Mark tasks whose processes the portal no longer hears from (node died, agent restarted) and requeue their
    jobs as whole gangs. ``confirmed_gone``: the node's agent says it runs none of them, so their GPUs are freed;
    otherwise they stay allocated (*fenced*) until it does (see ``portal.jobs.ledger``). Precondition: inside a
    transaction."""
    for task in tasks:
        job = Job.objects.select_for_update().get(pk=task.job_id)
        task.state = TaskState.LOST
        task.finished_at = timezone.now()
        task.save(update_fields=["state", "finished_at"])
        if confirmed_gone:
            release_task_gpus(task)
        if task.attempt == job.attempt and job.state == JobState.RUNNING.value:
            job_requeue(job, actor=actor, reason=reason, hardware=True)


class NodeFenced(Exception):
    """A heartbeat from a node the portal has marked down: its tasks were requeued and its GPUs are fenced, so
    the agent must kill what it still runs and register again (docs/agent-protocol.md)."""


@transaction.atomic
def node_register(
    *,
    node: Node,
    hostname: str,
    address: str,
    agent_version: str,
    gpus: Sequence[GpuReport],
    clean: bool = False,
) -> Node:
    """Record a (re)starting agent's inventory and mark the node up (a draining node stays draining).

    A registration means the agent lost track of its processes, so every task the portal believed was running
    there is lost and its job is requeued. GPUs are matched by uuid; ones no longer reported are marked absent.

    ``clean`` is the agent's word that no process of any earlier task lives on the node any more (it SIGKILLed
    them and saw them gone): then the GPUs its lost tasks held are freed. Without it they stay fenced, counted
    against their tenants and offered to no one, until an admin releases them (:func:`node_release_fenced`).

    A GPU that moved here from a node that is down moves with its uuid. One still present on a node that is up or
    draining is refused (409): two live agents reporting one uuid is a misconfiguration (cloned fake GPUs, a copied
    token), and moving the GPU would take it from under whatever runs on it there.
    """
    if len({g.uuid for g in gpus}) != len(gpus) or len({g.index for g in gpus}) != len(gpus):
        raise ValidationFailed("GPU uuids and indices must be unique", field="gpus")
    node = Node.objects.select_for_update().get(pk=node.pk)
    elsewhere = (
        Gpu.objects.filter(uuid__in=[g.uuid for g in gpus], present=True)
        .exclude(node=node)
        .exclude(node__state=NodeState.DOWN)
        .select_related("node")
        .order_by("uuid")
        .first()
    )
    if elsewhere is not None:
        raise Conflict(
            f"GPU {elsewhere.uuid} is registered on node {elsewhere.node.name}, which is {elsewhere.node.state}; "
            "one GPU cannot be on two nodes",
            field="gpus",
        )
    now = timezone.now()
    node.hostname, node.address, node.agent_version = hostname[:255], address[:255], agent_version[:50]
    node.registered_at = node.last_heartbeat = now
    if node.state != NodeState.DRAINING:
        node.state, node.state_reason = NodeState.UP, ""
    node.save()
    reported = {g.uuid for g in gpus}
    node.gpus.exclude(uuid__in=reported).update(present=False)
    for report in gpus:
        # The index may move to a new uuid (a replaced card): free the index first.
        node.gpus.filter(index=report.index, present=True).exclude(uuid=report.uuid).update(present=False)
        Gpu.objects.update_or_create(
            uuid=report.uuid,
            defaults={
                "node": node,
                "index": report.index,
                "model": report.model[:100],
                "memory_mb": max(0, report.memory_mb),
                "present": True,
            },
            create_defaults={  # a GPU seen for the first time: shared when an admin said so for its node (#17)
                "node": node,
                "index": report.index,
                "model": report.model[:100],
                "memory_mb": max(0, report.memory_mb),
                "present": True,
                "shared": node.share_new_gpus,
            },
        )
    stale = JobTask.objects.filter(node=node, state__in=LIVE_TASK_STATES).order_by("job_id")
    _lose_tasks(list(stale), actor=f"agent:{node.name}", reason=f"agent on {node.name} restarted", confirmed_gone=clean)
    if clean:
        release_lost_tasks_gpus(node)
    request_round()  # its GPUs may be free again, and requeued jobs wait
    return node


def _apply_report(node: Node, task: JobTask | None, report: TaskReport, reply: HeartbeatReply) -> None:
    """Reconcile one reported task. Precondition: its job row is locked (when the task is known)."""
    key = f"{report.job}:{report.attempt}:{report.rank}"
    if task is None:
        # Not ours (or from before a database reset): kill it at once if it runs, then let the agent drop it.
        if report.state == "running":
            reply.kill.append({"job": report.job, "attempt": report.attempt, "grace_seconds": 0})
        else:
            reply.forget.append({"job": report.job, "attempt": report.attempt})
        return
    actor = f"agent:{node.name}"
    end = report.log_end if report.log_end is not None else report.log_offset + len(report.log.encode())
    reply.log_offsets[key] = task_log_receive(task=task, offset=report.log_offset, text=report.log, end=end)
    finished_here = task.state in (TaskState.EXITED, TaskState.LOST)
    if (report.eviction or report.mps_fault) and task.attempt == task.job.attempt:
        # A share (issue #17) the agent evicted, or whose MPS server faulted: requeued, never failed; an exit
        # that comes with it then only frees the GPU. Later reports of the same attempt change nothing.
        if report.eviction:
            requeued = job_share_evicted(job=task.job, eviction=report.eviction, actor=actor)
        else:
            requeued = job_share_mps_fault(job=task.job, fault=report.mps_fault or {}, actor=actor)
        task.kill_requested = task.kill_requested or requeued
    if report.state == "running":
        if finished_here:  # a stale duplicate: the portal already counts it gone, so no grace
            reply.kill.append({"job": report.job, "attempt": report.attempt, "grace_seconds": 0})
        elif task.kill_requested:
            reply.kill.append({"job": report.job, "attempt": report.attempt, "grace_seconds": _grace()})
        elif task.state == TaskState.ASSIGNED:
            task.state, task.pid, task.started_at = TaskState.RUNNING, report.pid, timezone.now()
            task.save(update_fields=["state", "pid", "started_at"])
        if task.checkpoint_requested_at is not None and task.checkpoint_signalled_at is None:
            # Delivered once: the job's own handler decides what a checkpoint means.
            reply.signal.append({"job": report.job, "attempt": report.attempt, "signal": CHECKPOINT_SIGNAL})
            task.checkpoint_signalled_at = timezone.now()
            task.save(update_fields=["checkpoint_signalled_at"])
    elif report.state in ("exited", "failed_to_start"):
        if task.log_final_size is None or report.log_size > task.log_final_size:
            # The log's size at the end: its output is whole once log_received reaches it (job_output_progress).
            task.log_final_size = report.log_size
            task.save(update_fields=["log_final_size"])
        if not finished_here:
            exit_code = report.exit_code if report.state == "exited" else None
            job_task_exited(task=task, exit_code=exit_code, actor=actor)
        if task.log_received >= report.log_size:
            task.forgotten = True
            task.save(update_fields=["forgotten"])
            reply.forget.append({"job": report.job, "attempt": report.attempt})


def _grace() -> float:
    return settings.CORRAL_KILL_GRACE


@transaction.atomic
def node_heartbeat(*, node: Node, reports: Sequence[TaskReport]) -> HeartbeatReply:
    """Take an agent's report of its tasks and answer what to start, kill and forget.

    Jobs are locked in id order, so two heartbeats touching the same multi-node gang cannot deadlock. A live task
    the agent no longer reports was never received (if it was only assigned and since cancelled) or was lost.
    Raises :class:`NodeFenced` for a node marked down: it is not marked up again until its agent re-registers.
    """
    reply = HeartbeatReply()
    now = timezone.now()
    node = Node.objects.select_for_update().get(pk=node.pk)  # locked before any job, as registration does
    if node.state == NodeState.DOWN:
        raise NodeFenced(node.name)
    node.last_heartbeat = now
    node.save(update_fields=["last_heartbeat"])
    reported = {r.key: r for r in reports}
    job_ids = sorted(
        {r.job for r in reports}
        | set(JobTask.objects.filter(node=node, state__in=LIVE_TASK_STATES).values_list("job_id", flat=True))
    )
    jobs = {j.pk: j for j in Job.objects.select_for_update().filter(pk__in=job_ids).order_by("pk")}
    tasks = {
        (t.job_id, t.attempt, t.rank): t
        for t in JobTask.objects.filter(node=node, job_id__in=jobs).select_related("job")
    }
    for t in tasks.values():
        t.job = jobs[t.job_id]  # share the locked instance so every change sees the others
    for report in reports:
        _apply_report(node, tasks.get(report.key), report, reply)
    for key, task in tasks.items():
        if key in reported or task.state not in LIVE_TASK_STATES:
            continue
        if task.state == TaskState.ASSIGNED and task.kill_requested:
            job_task_exited(task=task, exit_code=None, actor=f"agent:{node.name}")
        elif task.state == TaskState.ASSIGNED:
            reply.start.append(start_order(task))
        else:  # running, yet the agent does not track it: its process is gone
            _lose_tasks(
                [task],
                actor=f"agent:{node.name}",
                reason=f"{node.name} no longer runs the process",
                confirmed_gone=True,
            )
    return reply


@transaction.atomic
def nodes_mark_stale_down(*, now: datetime | None = None) -> list[str]:
    """Mark nodes silent for longer than ``CORRAL_NODE_TIMEOUT`` down and requeue their jobs; a scheduling round
    follows after commit. Returns the names of the nodes it marked down.

    The GPUs their tasks held stay fenced: allocated, counted against their tenants, offered to no one, until the
    node's agent re-registers having killed what it ran, or an admin releases them. Their jobs may start again
    elsewhere at once: the agent fences itself (kills its jobs) once it has not reached the portal for its lease,
    which is shorter than the node timeout (``node_lease_seconds``)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.CORRAL_NODE_TIMEOUT)
    stale = list(
        Node.objects.select_for_update()
        .filter(state__in=[NodeState.UP, NodeState.DRAINING], last_heartbeat__lt=cutoff)
        .filter(power=NodePower.ON)  # powered down or waking by energy saving: silent on purpose (portal.energy)
        .order_by("pk")
    )
    for node in stale:
        node.state = NodeState.DOWN
        node.state_reason = f"no heartbeat since {node.last_heartbeat:%Y-%m-%d %H:%M:%S} UTC"
        node.save(update_fields=["state", "state_reason"])
        lost = JobTask.objects.filter(node=node, state__in=LIVE_TASK_STATES).order_by("job_id")
        # Its processes may still run (a partition, a stopped agent): their GPUs stay fenced until it re-registers.
        _lose_tasks(
            list(lost),
            actor="scheduler",
            reason=f"node {node.name} stopped sending heartbeats",
            confirmed_gone=False,
        )
    if stale:
        request_round()  # what ran there can go elsewhere, and what waited for it must wait on
    return [n.name for n in stale]


def node_lease_seconds() -> float:
    """How long an agent may go without a successful heartbeat before it must kill its jobs and register again:
    two thirds of ``CORRAL_NODE_TIMEOUT`` (at least two heartbeats), counted by the agent from when it *sent* its
    last good heartbeat, so its jobs are dead before the portal declares the node down and lets them start
    elsewhere. Never more than 85% of the timeout less a second (the agent's watchdog acts up to a second late)."""
    timeout = settings.CORRAL_NODE_TIMEOUT
    wanted = max(settings.CORRAL_HEARTBEAT_INTERVAL * 2, timeout * 2 / 3)
    return max(0.5, min(wanted, timeout * 0.85 - 1.0))


@transaction.atomic
def node_release_fenced(*, node: Node, by: str) -> int:
    """An admin's word that no process of ``node``'s lost tasks lives any more (the machine was powered off or
    reinstalled): free the GPUs those tasks still hold. The node itself stays as it is; if it is down its agent still
    has to register again before it gets work. Returns how many GPUs were freed."""
    node = Node.objects.select_for_update().get(pk=node.pk)
    freed = release_lost_tasks_gpus(node)
    if freed:
        logger.warning("%s released %d fenced GPU(s) of node %s", by, freed, node.name)
        request_round()
    return freed


@transaction.atomic
def node_set_draining(*, node: Node, draining: bool, reason: str = "") -> Node:
    """Drain (no new work; running jobs finish) or undrain ``node``."""
    node = Node.objects.select_for_update().get(pk=node.pk)
    if draining and node.state == NodeState.UP:
        node.state, node.state_reason = NodeState.DRAINING, reason or "drained by an admin"
    elif not draining and node.state == NodeState.DRAINING:
        node.state, node.state_reason = NodeState.UP, ""
    node.save(update_fields=["state", "state_reason"])
    return node
