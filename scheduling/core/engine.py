"""One scheduling round: turn a policy's order into starts, preemptions and wait reasons.

Both callers go through :func:`run_round`: ``decide`` builds its inputs from a :class:`Snapshot`, the simulator
keeps them alive between events. The simulator passes ``explain=False`` so a round may stop as soon as nothing
more can start; ``decide`` always explains every waiting job, because the UI shows the reason.

Two walks:

- *Plain* (non-preemptive policies): running jobs keep their GPUs; pending jobs are tried in order. A job that
  does not fit is skipped (backfill) or, for head-of-line policies, blocks every later job.
- *Preemptive* (preemptive policies, or the quota layer reclaiming borrowed GPUs): every job that may move is
  ranked together; the best ones that fit the capacity are wanted, running jobs not wanted are preempted, and
  wanted pending jobs are placed. A preemption that freed GPUs nobody could use is undone, and GPUs still idle are
  backfilled, so the walk stays work-conserving under ``count`` placement.

With the quota layer and a usage history, the GPUs the walk lends to borrowers are handed out again in fair-share
order (:mod:`scheduling.core.fairshare`).

The plain walk is here; the preemptive walk, in named phases, is in :mod:`scheduling.core.preemptive_walk`. Both
fill in a :class:`~scheduling.core.round_result.RoundResult` (re-exported here, next to :func:`run_round`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from scheduling.core.fairshare import borrow_ranks
from scheduling.core.model import (
    HeldGpus,
    JobView,
    Placement,
    TenantLimits,
    UsageHistory,
    Wait,
    WaitReason,
    gpu_count,
)
from scheduling.core.placement import PlacementModel, Shape
from scheduling.core.policies.base import Policy
from scheduling.core.pool import FreePool
from scheduling.core.preemptive_walk import preemptive_walk
from scheduling.core.round_result import RoundResult as RoundResult  # re-exported: run_round's return type
from scheduling.core.round_result import WaitCache
from scheduling.core.tenancy import Ledger


def run_round(
    *,
    ordered: Iterable[JobView],
    running: Sequence[JobView],
    pool: FreePool,
    placement: PlacementModel,
    policy: Policy,
    now: float,
    limits: Mapping[str, TenantLimits],
    explain: bool = True,
    pin_running: bool = False,
    usage: UsageHistory | None = None,
    held: Sequence[HeldGpus] = (),
) -> RoundResult:
    """Run one round.

    ``ordered`` is the policy's order of the jobs that may be (re)considered: the pending jobs for plain walks,
    pending and running jobs together for preemptive ones (see :func:`needs_preemptive_walk`). ``running`` is every
    running job. ``pool`` is mutated: started jobs take GPUs from it, preempted jobs return theirs.

    ``pin_running`` tells a preemptive walk that every running job outranks every pending one, so none can lose
    its GPUs and ``ordered`` may hold only the pending jobs. The result is the same as the full walk (each running
    job would be kept, in order, within the capacity it already holds); the simulator uses it to skip re-ranking
    hundreds of running jobs on rounds where nothing could be preempted. Not valid with the quota layer, whose
    owner/borrower split reorders jobs.

    ``usage`` turns on fair share for the quota layer: borrowers get idle quota in the order of their tenants'
    decayed usage per guaranteed GPU. Policies without the quota layer ignore it.

    ``held`` lists GPUs that attempts which are over still hold (their processes are stopping): they are not in
    ``pool`` and count against their tenants' caps and guarantees like running jobs.
    """
    ledger = Ledger(limits, held)
    if ledger.active:
        for job in running:
            ledger.add(job)
    result = RoundResult()
    if needs_preemptive_walk(policy):
        if pin_running and policy.guarantees:
            raise ValueError("pin_running cannot be used with the quota layer")
        ranks = borrow_ranks(usage, limits) if usage is not None and policy.guarantees else None
        preemptive_walk(
            ordered=ordered,
            running=running,
            pool=pool,
            ledger=ledger,
            placement=placement,
            policy=policy,
            now=now,
            limits=limits,
            explain=explain,
            result=result,
            pin_running=pin_running,
            ranks=ranks,
        )
    else:
        _plain_walk(ordered, pool, ledger, placement, policy, explain, result)
    return result


def needs_preemptive_walk(policy: Policy) -> bool:
    """True when running jobs must be ranked together with pending ones."""
    return policy.preemptive or policy.guarantees


def _plain_walk(
    ordered: Iterable[JobView],
    pool: FreePool,
    ledger: Ledger,
    placement: PlacementModel,
    policy: Policy,
    explain: bool,
    result: RoundResult,
) -> None:
    """Try the pending jobs in policy order; running jobs keep their GPUs. Each job gets its whole gang or waits.

    A job held back by a cap is skipped. Under a head-of-line policy (strict FIFO) the first job that does not fit
    blocks every later one; otherwise later jobs backfill around it. Without explanations the walk stops once
    nothing is free (or at the blocker), since the rest could not start anyway.
    """
    waiting, start = result.waiting, result.start
    waits = WaitCache()
    hol = policy.head_of_line
    free_at_start = pool.total_free
    blocked: Wait | None = None
    failed_shapes: set[Shape] = set()
    no_nodes = pool.empty
    for job in ordered:
        cap = ledger.cap_wait(job)
        if cap is not None:
            waiting[job.id] = cap  # skipped, never a blocker: a tenant at its cap must not stall the others
            continue
        if blocked is not None:
            if not explain:
                break
            waiting[job.id] = blocked
            continue
        need = job.gpus
        if no_nodes:
            waiting[job.id] = waits.get(WaitReason.NO_SCHEDULABLE_NODES, need, 0)
            continue
        free = pool.total_free
        slots = None
        if need <= free:
            shape = placement.shape(job)
            if shape not in failed_shapes:  # the pool only shrinks, so a failed shape stays failed
                slots = placement.place(pool, job)
                if slots is None:
                    failed_shapes.add(shape)
            reason = WaitReason.NO_NODE_FITS
        elif hol or need > free_at_start:
            reason = WaitReason.NOT_ENOUGH_FREE_GPUS
        else:
            reason = WaitReason.LOWER_PRIORITY  # it would have fit, but jobs ahead of it took the GPUs
        if slots is not None:
            start.append(Placement(job.id, tuple(slots)))
            ledger.add(job)
            continue
        waiting[job.id] = waits.get(reason, need, free)
        if hol:
            blocked = Wait(
                WaitReason.BLOCKED_BY_EARLIER_JOB, f"behind job {job.id} (needs {gpu_count(need)}, {free} free)"
            )
        elif not explain and pool.total_free == 0:
            break
