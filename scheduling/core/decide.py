"""``decide``: the pure entry point the live loop calls every round.

It never reads the clock (``now`` is an argument), touches no database and keeps no state of its own: given the
same snapshot, time and policy object it returns an equal :class:`Decision`. Policies that learn from history keep
what they learned on the policy object, fed only through ``policy.observe_finished``; pass the same object every
round (a policy *name* builds a fresh, history-free one each call).
"""

from __future__ import annotations

from scheduling.core.engine import needs_preemptive_walk, run_round
from scheduling.core.model import Decision, JobState, JobView, Snapshot
from scheduling.core.placement import PlacementModel, explain_short_only, resolve_placement
from scheduling.core.policies import resolve_policy
from scheduling.core.policies.base import Policy
from scheduling.core.pool import FreePool


def decide(
    snapshot: Snapshot,
    *,
    now: float,
    policy: str | Policy = "fifo",
    placement: str | PlacementModel = "topology",
) -> Decision:
    """Decide which jobs to start (and where), which to preempt, and why every other pending job waits.

    Gang allocation: a job gets all its GPUs at once or none. Jobs that are neither pending nor running are
    ignored. Short-only GPUs (``NodeView.short_only``) go only to jobs the placement model counts as short. With
    the quota layer, ``snapshot.usage`` (when given) orders who borrows idle quota first.
    """
    pol = resolve_policy(policy)
    plc = resolve_placement(placement)
    pool = FreePool(snapshot.nodes)
    running: list[JobView] = []
    pending: list[JobView] = []
    for job in snapshot.jobs:
        if job.state == JobState.PENDING:
            pending.append(job)
        elif job.state == JobState.RUNNING:
            running.append(job)
    candidates = running + pending if needs_preemptive_walk(pol) else pending
    result = run_round(
        ordered=pol.order(candidates, now),
        running=running,
        pool=pool,
        placement=plc,
        policy=pol,
        now=now,
        limits=snapshot.tenants,
        explain=True,
        usage=snapshot.usage,
        held=snapshot.held,
    )
    decision = Decision(
        start=tuple(result.start),
        preempt=tuple(job.id for job in result.preempt),
        waiting=result.waiting,
    )
    return explain_short_only(snapshot, decision, plc)  # a long job kept off short-only GPUs is told so
