"""Apply a core :class:`Decision` to the database, through the jobs services: preempt, start, and write every
waiting job's reason.

Called inside the round's transaction, holding the scheduler lease. Each start runs in its own savepoint (see
``portal.jobs.services.job_start``): if the database refuses one (a GPU whose allocation is still active, e.g. held
by a preempted job whose process has not exited yet), only that job stays pending and the rest of the decision
still applies.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from portal.jobs.ledger import RankPlacement
from portal.jobs.services import job_preempt, job_start
from portal.jobs.waiting import jobs_set_wait_reasons
from portal.scheduler.selectors import LiveSnapshot
from scheduling.core.model import SHORT_OF_GPUS, Decision, Placement, Wait, WaitReason, gpu_count

ACTOR = "scheduler"


@dataclass(frozen=True, slots=True)
class Applied:
    started: int
    preempted: int
    waiting: int


def _ranks(placement: Placement, live: LiveSnapshot) -> list[RankPlacement]:
    """The core's slots (node name, GPU id) as one :class:`RankPlacement` per node, with each GPU's NVML index."""
    by_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for slot in placement.slots:
        by_node[slot.node].append((slot.gpu, live.gpu_index[slot.gpu]))
    return [RankPlacement(node=live.nodes_by_name[name], gpus=gpus) for name, gpus in by_node.items()]


def apply_decision(decision: Decision, live: LiveSnapshot) -> Applied:
    """Write ``decision``. Precondition: inside the round's transaction, holding the scheduler lease."""
    preempted = sum(job_preempt(job_id=int(job_id), actor=ACTOR) for job_id in decision.preempt)
    started = sum(job_start(job_id=int(p.job_id), ranks=_ranks(p, live), actor=ACTOR) for p in decision.start)
    reasons = {int(job_id): _with_gpus_on_their_way(wait, live) for job_id, wait in decision.waiting.items()}
    reasons.update((job_id, (WaitReason.ARRAY_LIMIT, detail)) for job_id, detail in live.held_back.items())
    reasons.update((job_id, (WaitReason.PREVIOUS_ATTEMPT_STOPPING, "")) for job_id in live.awaiting)
    jobs_set_wait_reasons(reasons=reasons)
    return Applied(started=started, preempted=preempted, waiting=len(reasons))


def _with_gpus_on_their_way(wait: Wait, live: LiveSnapshot) -> tuple[WaitReason, str]:
    """A waiting job's reason and detail; one short of GPUs also hears of GPUs on their way: those being freed
    (held by jobs whose processes are stopping), so a wait of a few seconds does not read like a full cluster, and
    those of nodes waking up (energy saving had powered them down), so a wait of minutes says why."""
    if wait.reason not in SHORT_OF_GPUS:
        return wait.reason, wait.detail
    notes = [wait.detail] if wait.detail else []
    if live.freeing:
        notes.append(f"{gpu_count(live.freeing)} being freed as stopped jobs' processes exit")
    if live.waking:
        notes.append(f"waiting for a wake-up: {gpu_count(live.waking)} on nodes being powered on")
    return wait.reason, "; ".join(notes)
