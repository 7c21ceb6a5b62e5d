"""Lending and reclaiming a serving system's nodes (issue #19; docs/elastic.md, "Loanable pools").

A node of a pool other than ``training`` takes Corral's work only while lent (``Node.takes_new_work``, the one rule
the rounds use). The serving side lends nodes (:func:`pool_lend`) and later reclaims a number of them with a
deadline (:func:`pool_reclaim`): Corral chooses which by the least server preemption cost
(``scheduling.core.loan.plan_reclaim``), marks them ``returning`` so no new work lands there, and stops the jobs on
them through ``job_stop_with_notice``: the checkpoint signal first, the stop ``min(CORRAL_CHECKPOINT_SECONDS,
deadline)`` seconds later. Elastic jobs that keep their minimum elsewhere are only shrunk. :func:`reclaims_progress`
(every beat) hands each chosen node back once no GPU of it is held, and at the deadline hands back the rest anyway,
stopping what still runs there, and records that the reclaim was late and which nodes were forced.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from portal.errors import NotFound, ValidationFailed
from portal.jobs.elastic_services import job_stop_with_notice
from portal.jobs.models import EventKind, Job
from portal.jobs.services import job_requeue
from portal.nodes.models import Node
from portal.pools.models import Reclaim
from portal.pools.selectors import (
    ReclaimJobRow,
    busy_node_names,
    reclaims_open,
    running_jobs_holding,
    running_jobs_on,
)
from portal.rounds import request_round
from scheduling.core.loan import TRAINING, LoanError, LoanPool, RunningJob, lend, plan_reclaim
from scheduling.core.states import JobState

logger = logging.getLogger(__name__)

#: Who stops jobs and hands nodes back when no person is asking (the beat).
ACTOR = "pools"


def _actor(by: User | None) -> str:
    return by.get_username() if by is not None else ACTOR


def _own_pool_refused(pool: str) -> None:
    if pool == TRAINING:
        raise ValidationFailed(f"the {TRAINING!r} pool is Corral's own: its nodes are never lent or reclaimed")


@dataclass(frozen=True, slots=True)
class LendResult:
    """After a lend: the pool, the nodes newly lent by this call, and every node of the pool lent now."""

    pool: str
    newly_lent: list[str]
    lent: list[str]


@transaction.atomic
def pool_lend(*, pool: str, nodes: Sequence[str], by: User | None) -> LendResult:
    """Lend ``nodes`` of loanable ``pool`` to training: from now on rounds may place work on them.

    Refuses, lending nothing: the ``training`` pool (400), a pool no node belongs to (404), a node that does not
    exist or belongs to another pool (400 on ``nodes``, naming each). Lending a node that is lent already changes
    nothing (one being given back stays so: a reclaim chose it). Side effect: a scheduling round after commit.
    """
    _own_pool_refused(pool)
    members = list(Node.objects.select_for_update().filter(pool=pool).order_by("name"))
    if not members:
        raise NotFound(f"no node belongs to a pool named {pool!r}")
    asked = list(dict.fromkeys(nodes))
    if not asked:
        raise ValidationFailed("name at least one node to lend", field="nodes")
    by_name = {n.name: n for n in members}
    strangers = [name for name in asked if name not in by_name]
    if strangers:
        elsewhere = dict(Node.objects.filter(name__in=strangers).values_list("name", "pool"))
        words = [
            f"{name} is in pool {elsewhere[name]!r}, not {pool!r}" if name in elsewhere else f"no node named {name!r}"
            for name in strangers
        ]
        raise ValidationFailed("; ".join(words), field="nodes")
    state = LoanPool(pool, frozenset(by_name), frozenset(n.name for n in members if n.lent))
    try:
        after = lend(state, asked)  # the core's rule; what it refuses was refused above with a finer message
    except LoanError as exc:  # pragma: no cover - kept in step with the checks above
        raise ValidationFailed(str(exc), field="nodes") from exc
    newly = [name for name in asked if name not in state.lent]
    if newly:
        Node.objects.filter(pk__in=[by_name[name].pk for name in newly]).update(lent=True)
        logger.info("%s lent %s of pool %s to training", _actor(by), ", ".join(newly), pool)
        request_round()  # new capacity: pending jobs may start there
    return LendResult(pool=pool, newly_lent=newly, lent=sorted(after.lent))


def _running_job(row: ReclaimJobRow, *, now: datetime) -> RunningJob:
    """The core's view of a running job; ``since_checkpoint`` from its last checkpoint signal or its start."""
    size = sum(row.per_node.values())
    since = (now - row.last_checkpoint).total_seconds() if row.last_checkpoint is not None else 0.0
    return RunningJob(
        id=row.job_id,
        per_node=row.per_node,
        # An elastic job may shrink to its minimum; an inelastic one runs at its size or not at all.
        min_gpus=row.gpus if row.max_gpus is not None else size,
        since_checkpoint=max(0.0, since),
        checkpoint_seconds=float(settings.CORRAL_CHECKPOINT_SECONDS),
        restart_seconds=float(settings.CORRAL_RESTART_SECONDS),
    )


@transaction.atomic
def pool_reclaim(*, pool: str, count: int, deadline_seconds: float, by: User | None, now: datetime) -> Reclaim:
    """Take ``count`` lent nodes of ``pool`` back within ``deadline_seconds``: choose them by least server
    preemption cost, mark them ``returning`` (no new work), shrink the elastic jobs that can keep their minimum
    elsewhere and preempt the others, each with the checkpoint signal now and the stop ``min(checkpoint seconds,
    deadline)`` later. Nodes already empty are handed back at once. Returns the recorded :class:`Reclaim`.

    Refuses, changing nothing: the ``training`` pool or a negative deadline (400), an unknown pool (404), fewer
    than one node or more than are lent and not already being given back (400 on ``count``).
    """
    _own_pool_refused(pool)
    if not deadline_seconds >= 0:
        raise ValidationFailed("the deadline is a number of seconds, 0 or more", field="deadline_seconds")
    members = list(Node.objects.select_for_update().filter(pool=pool).order_by("name"))
    if not members:
        raise NotFound(f"no node belongs to a pool named {pool!r}")
    lent = [n for n in members if n.lent and not n.returning]
    if count < 1:
        raise ValidationFailed("reclaim at least one node", field="count")
    if count > len(lent):
        raise ValidationFailed(
            f"pool {pool!r} has {len(lent)} node(s) lent and not already being given back; cannot reclaim {count}",
            field="count",
        )
    jobs = [_running_job(row, now=now) for row in running_jobs_on(node_ids=[n.pk for n in lent])]
    plan = plan_reclaim(lent=[n.name for n in lent], jobs=jobs, count=count, deadline=deadline_seconds)
    Node.objects.filter(pool=pool, name__in=plan.nodes).update(returning=True)
    actor = _actor(by)
    reason = f"pool {pool} reclaims {', '.join(plan.nodes)}"
    notice = min(float(settings.CORRAL_CHECKPOINT_SECONDS), deadline_seconds)
    for job_id, size in plan.shrink.items():
        job_stop_with_notice(
            job_id=int(job_id), actor=actor, reason=reason, notice_seconds=notice, now=now, resize_to=size
        )
    for job_id in plan.preempt:
        job_stop_with_notice(job_id=int(job_id), actor=actor, reason=reason, notice_seconds=notice, now=now)
    reclaim = Reclaim.objects.create(
        pool=pool,
        count=count,
        deadline_seconds=deadline_seconds,
        requested_at=now,
        deadline_at=now + timedelta(seconds=deadline_seconds),
        requested_by=by,
        nodes=list(plan.nodes),
        shrunk={str(job_id): size for job_id, size in plan.shrink.items()},
        preempted=[int(job_id) for job_id in plan.preempt],
        cost_gpu_seconds=plan.cost,
    )
    logger.info("%s reclaims %s from pool %s (deadline %gs, cost %.0f GPU-s)", actor, plan.nodes, pool,
                deadline_seconds, plan.cost)  # fmt: skip
    _advance(reclaim, now=now)
    return reclaim


def _stop_latecomers(reclaim: Reclaim, names: list[str], *, now: datetime) -> None:
    """Stop, with the notice the deadline still allows, the running jobs on ``names`` that no stop is scheduled
    for: jobs a round placed there after the plan was made (it read the node before it was marked returning)."""
    left = (reclaim.deadline_at - now).total_seconds()
    notice = max(0.0, min(float(settings.CORRAL_CHECKPOINT_SECONDS), left))
    reason = f"pool {reclaim.pool} reclaims {', '.join(names)}"
    for job_id in running_jobs_holding(names=names, unstopped=True):
        job_stop_with_notice(job_id=job_id, actor=ACTOR, reason=reason, notice_seconds=notice, now=now)


def _advance(reclaim: Reclaim, *, now: datetime) -> bool:
    """Hand back the reclaim's nodes that are empty; at the deadline, the others too (stopping the running jobs
    still there). True once every chosen node is back. Precondition: ``reclaim`` is row-locked or new."""
    waiting = [name for name in reclaim.nodes if name not in reclaim.returned]
    busy = busy_node_names(names=waiting)
    at_deadline = now >= reclaim.deadline_at
    forced = [name for name in waiting if name in busy] if at_deadline else []
    if forced:
        for job_id in running_jobs_holding(names=forced):
            job = Job.objects.select_for_update().filter(pk=job_id, state=JobState.RUNNING.value).first()
            if job is not None:
                why = f"pool {reclaim.pool} took back {', '.join(forced)} at the reclaim's deadline"
                job_requeue(job, actor=ACTOR, reason=why, hardware=False, kind=EventKind.PREEMPTED)
        reclaim.forced = [*reclaim.forced, *forced]
        reclaim.late = True
        logger.warning("reclaim %s of pool %s: %s still busy at the deadline, given back anyway", reclaim.pk,
                       reclaim.pool, ", ".join(forced))  # fmt: skip
    elif busy:
        _stop_latecomers(reclaim, [name for name in waiting if name in busy], now=now)
    back = [name for name in waiting if name not in busy or name in forced]
    if back:
        # Only nodes still in the pool and lent: one an admin moved or that a later lend touched is left alone.
        Node.objects.filter(pool=reclaim.pool, name__in=back, lent=True).update(lent=False, returning=False)
        stamp = now.isoformat().replace("+00:00", "Z")  # as the API writes its other times
        reclaim.returned = {**reclaim.returned, **dict.fromkeys(back, stamp)}
    done = len(reclaim.returned) >= len(reclaim.nodes)
    if done:
        reclaim.finished_at = now
    if back or forced or done:
        reclaim.save(update_fields=["returned", "forced", "late", "finished_at"])
    return done


@transaction.atomic
def reclaims_progress(*, now: datetime) -> list[int]:
    """Advance every open reclaim: each chosen node with no GPU held any more is handed back to its pool
    (``lent`` and ``returning`` cleared, the time recorded); past the deadline the rest are handed back anyway, the
    running jobs still on them stopped (their tasks told to stop) and the reclaim marked ``late`` with those nodes
    ``forced``. Returns the ids of the reclaims that finished. Safe to run twice."""
    finished = []
    for reclaim in reclaims_open().select_for_update():
        if _advance(reclaim, now=now):
            finished.append(reclaim.pk)
    return finished
