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
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter

from scheduling.core.fairshare import NO_SHARE, BorrowRank, borrow_ranks
from scheduling.core.model import (
    JobId,
    JobState,
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
from scheduling.core.tenancy import Guarantees, Ledger

_RUNNING = JobState.RUNNING
_allocation = attrgetter("allocation")


@dataclass(slots=True)
class RoundResult:
    """What a round did. ``preempt`` holds the views of running jobs that lose their GPUs."""

    start: list[Placement] = field(default_factory=list)
    preempt: list[JobView] = field(default_factory=list)
    waiting: dict[JobId, Wait] = field(default_factory=dict)


class _Waits:
    """Equal wait values built once per round: 25k queued jobs mostly share a handful of reasons."""

    __slots__ = ("cache",)

    def __init__(self) -> None:
        self.cache: dict[tuple[WaitReason, int, int], Wait] = {}

    def get(self, reason: WaitReason, need: int, free: int) -> Wait:
        key = (reason, need, free)
        wait = self.cache.get(key)
        if wait is None:
            wait = Wait(reason, _DETAILS[reason].format(need=gpu_count(need), free=free))
            self.cache[key] = wait
        return wait


_DETAILS: dict[WaitReason, str] = {
    WaitReason.NOT_ENOUGH_FREE_GPUS: "needs {need}, {free} free",
    WaitReason.NO_NODE_FITS: "needs {need}, {free} free but not in a usable shape",
    WaitReason.LOWER_PRIORITY: "needs {need}; higher-priority jobs hold or took them ({free} free)",
    WaitReason.NO_SCHEDULABLE_NODES: "needs {need}; no node accepts work",
    WaitReason.PREEMPTED: "lost its {need} to higher-priority jobs",
    WaitReason.FAIR_SHARE: "needs {need}; tenants that used less of their share lately borrow first ({free} free)",
}


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
    """
    ledger = Ledger(limits)
    if ledger.active:
        for job in running:
            ledger.add(job)
    result = RoundResult()
    if needs_preemptive_walk(policy):
        if pin_running and policy.guarantees:
            raise ValueError("pin_running cannot be used with the quota layer")
        ranks = borrow_ranks(usage, limits) if usage is not None and policy.guarantees else None
        _preemptive_walk(
            ordered, running, pool, ledger, placement, policy, now, limits, explain, result, pin_running, ranks
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
    waiting, start = result.waiting, result.start
    waits = _Waits()
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
            blocked = Wait(WaitReason.BLOCKED_BY_EARLIER_JOB, f"behind job {job.id} (needs {need} GPUs, {free} free)")
        elif not explain and pool.total_free == 0:
            break


def _preemptive_walk(
    ordered: Iterable[JobView],
    running: Sequence[JobView],
    pool: FreePool,
    ledger: Ledger,
    placement: PlacementModel,
    policy: Policy,
    now: float,
    limits: Mapping[str, TenantLimits],
    explain: bool,
    result: RoundResult,
    pin_running: bool,
    ranks: Mapping[str, BorrowRank] | None,
) -> None:
    waiting, start = result.waiting, result.start
    waits = _Waits()
    jumped: set[JobId] = set()  # waiting borrowers the policy would have started, whose GPUs fair share lent on
    borrowers: list[JobView] = []

    # 1. Running jobs that keep their GPUs whatever happens: inside their minimum quantum, on nodes outside the
    #    pool (their GPUs could not be reused), or, under a non-preemptive policy with the quota layer, jobs that
    #    run inside their tenant's guarantee (only borrowed GPUs are reclaimed).
    pinned: set[JobId] = set()
    movable_jobs: list[JobView] = []
    movable = 0
    if not pin_running:
        if policy.guarantees:
            ordered = list(ordered)  # walked twice: for the owner/borrower split and for the ranking
        if not policy.preemptive:
            owners = Guarantees(limits)
            for job in ordered:
                if job.state == _RUNNING and owners.claim(job):
                    pinned.add(job.id)
        quantum = policy.min_quantum
        whole = pool.complete
        if not pinned and quantum <= 0 and whole:  # the simulator's usual case: every running job may move
            movable_jobs = [job for job in running if job.allocation]
            pinned.update(job.id for job in running if not job.allocation)  # nothing to take back
            movable = sum(map(len, map(_allocation, movable_jobs)))
            running = ()
        for job in running:
            if job.id in pinned:
                continue
            started = job.last_started
            in_pool = len(job.allocation) if whole else pool.in_pool(job.allocation)
            if (quantum > 0 and started is not None and now - started < quantum) or in_pool == 0:
                pinned.add(job.id)
            else:
                movable += in_pool
                movable_jobs.append(job)
        # The ledger holds pinned jobs only; movable ones count again only when the walk keeps them.
        if ledger.active:
            for job in movable_jobs:
                ledger.remove(job)

    candidates: Iterator[JobView] = (job for job in ordered if job.id not in pinned) if pinned else iter(ordered)
    if policy.guarantees:
        # Owners (jobs inside their tenant's guaranteed share) before borrowers, each group in policy order.
        share = Guarantees(limits)
        for job in ordered:
            if job.id in pinned:
                share.claim(job)
        owners_first: list[JobView] = []
        for job in candidates:
            (owners_first if share.claim(job) else borrowers).append(job)
        candidates = chain(owners_first, borrowers)
    fair = ranks is not None and bool(borrowers)

    # 2. Want the best jobs that fit the capacity the movable jobs and the free GPUs make up together. Without
    #    explanations the walk stops once the capacity is used up; the rest of ``candidates`` stays unread.
    capacity = pool.total_free + movable
    budget = capacity
    wanted_pending: list[JobView] = []
    kept: set[JobId] = set()
    not_wanted: list[JobView] = []
    check_caps = ledger.active
    keep, want, pass_over = kept.add, wanted_pending.append, not_wanted.append
    if budget == 0 and not explain:
        candidates = iter(())
    for job in candidates:
        cap = ledger.cap_wait(job) if check_caps else None
        gpus = job.gpus
        if cap is None and gpus <= budget:
            budget -= gpus
            if check_caps:
                ledger.add(job)
            if job.state == _RUNNING:
                keep(job.id)
            else:
                want(job)
            if budget == 0 and not explain and not fair:
                break
        elif job.state != _RUNNING:
            if cap is not None:
                waiting[job.id] = cap
            elif explain or budget:
                pass_over(job)

    # 2b. Fair share: the GPUs the walk gave to waiting borrowers, and those it would free from running borrowers,
    #     go to the borrowers of the tenants with the least usage first.
    if fair:
        assert ranks is not None  # fair says so
        budget = _lend_fairly(borrowers, ranks, budget, kept, wanted_pending, not_wanted, waiting, ledger, jumped)

    # 3. Preempt movable running jobs that were not kept (including any the walk stopped before reaching).
    preempted = [job for job in movable_jobs if job.id not in kept]
    for job in preempted:
        pool.give(job.allocation)

    # 4. Place wanted jobs in priority order.
    failed_shapes: set[Shape] = set()
    for job in wanted_pending:
        shape = placement.shape(job)
        slots = None if shape in failed_shapes else placement.place(pool, job)
        if slots is None:
            failed_shapes.add(shape)
            ledger.remove(job)
            waiting[job.id] = waits.get(WaitReason.NO_NODE_FITS, job.gpus, pool.total_free)
        else:
            start.append(Placement(job.id, tuple(slots)))

    # 5. Undo preemptions whose GPUs nobody took (placement failures leave them idle).
    for job in preempted:
        if pool.holds(job.allocation) and ledger.cap_wait(job) is None:
            pool.take_exact(job.allocation)
            ledger.add(job)
        else:
            result.preempt.append(job)
            waiting[job.id] = waits.get(WaitReason.PREEMPTED, job.gpus, 0)

    # 6. Backfill GPUs that are still idle with jobs the walk passed over (or never reached, if it stopped early).
    free_at_start = capacity
    no_nodes = pool.empty
    passed_over = chain(not_wanted, (job for job in candidates if job.state != _RUNNING))
    for job in passed_over:
        if not explain and pool.total_free == 0:
            break
        need = job.gpus
        slots = None
        if need <= pool.total_free and ledger.cap_wait(job) is None:
            shape = placement.shape(job)
            if shape not in failed_shapes:
                slots = placement.place(pool, job)
                if slots is None:
                    failed_shapes.add(shape)
        if slots is not None:
            start.append(Placement(job.id, tuple(slots)))
            ledger.add(job)
            continue
        if not explain:
            continue
        if no_nodes:
            reason = WaitReason.NO_SCHEDULABLE_NODES
        elif need <= pool.total_free:
            reason = WaitReason.NO_NODE_FITS
        elif need <= free_at_start:
            reason = WaitReason.FAIR_SHARE if job.id in jumped else WaitReason.LOWER_PRIORITY
        else:
            reason = WaitReason.NOT_ENOUGH_FREE_GPUS
        waiting[job.id] = ledger.cap_wait(job) or waits.get(reason, need, pool.total_free)


def _lend_fairly(
    borrowers: list[JobView],
    ranks: Mapping[str, BorrowRank],
    budget: int,
    kept: set[JobId],
    wanted: list[JobView],
    passed: list[JobView],
    waiting: dict[JobId, Wait],
    ledger: Ledger,
    jumped: set[JobId],
) -> int:
    """Hand the borrowers' part of the capacity out again, in fair-share order; returns the budget left.

    The policy-order walk decided which running borrowers keep their GPUs; those stay kept, so fair share never
    preempts a job the policy would keep. What the walk gave to waiting borrowers, plus what it left idle, is then
    lent again to the waiting borrowers *and* the running borrowers the walk would preempt, in order of their
    tenants' rank (the policy's order within one rank). A running borrower chosen here is spared; a waiting one the
    policy would have started but fair share passed over is added to ``jumped``. ``wanted`` and ``passed`` are
    rewritten in place: the owners' entries as the walk left them, then the borrowers in fair order.
    """
    ids = {job.id for job in borrowers}
    lent = {job.id for job in wanted if job.id in ids}
    for job in wanted:
        if job.id in lent:
            budget += job.gpus
            ledger.remove(job)
    owners_wanted = [job for job in wanted if job.id not in lent]
    owners_passed = [job for job in passed if job.id not in ids]
    contenders = [job for job in borrowers if job.id not in kept]  # waiting, and running ones the walk would preempt
    chosen: list[JobView] = []
    not_chosen: list[JobView] = []
    for job in sorted(contenders, key=lambda job: ranks.get(job.tenant, NO_SHARE)):
        cap = ledger.cap_wait(job)
        if cap is None and job.gpus <= budget:
            budget -= job.gpus
            ledger.add(job)
            if job.state == _RUNNING:
                kept.add(job.id)
            else:
                chosen.append(job)
                waiting.pop(job.id, None)
        elif job.state != _RUNNING:
            if cap is not None:
                waiting[job.id] = cap
            else:
                not_chosen.append(job)
                if job.id in lent:
                    jumped.add(job.id)
    wanted[:] = owners_wanted + chosen
    passed[:] = owners_passed + not_chosen
    return budget
