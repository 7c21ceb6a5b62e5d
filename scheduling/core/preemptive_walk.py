"""The preemptive walk of a round: rank running and pending jobs together, keep the best, preempt the rest.

:func:`scheduling.core.engine.run_round` takes this walk for preemptive policies and for the quota layer (which
reclaims borrowed GPUs even under a non-preemptive policy). The walk runs in phases, each a method of
:class:`_PreemptiveWalk` called in order by :meth:`~_PreemptiveWalk.run`:

1. :meth:`~_PreemptiveWalk.pin_guaranteed` and :meth:`~_PreemptiveWalk.split_running`: which running jobs keep
   their GPUs whatever happens (*pinned*) and which may lose them (*movable*).
2. :meth:`~_PreemptiveWalk.rank_candidates`: every job that is not pinned, in policy order (with the quota layer,
   jobs inside their tenant's guarantee before borrowers).
3. :meth:`~_PreemptiveWalk.want_best`: the best candidates that fit the capacity (free GPUs plus the movable
   jobs' GPUs) are *wanted*; :meth:`~_PreemptiveWalk.lend_fairly` then hands the borrowers' part out again in
   fair-share order.
4. :meth:`~_PreemptiveWalk.preempt_unkept`, :meth:`~_PreemptiveWalk.place_wanted`,
   :meth:`~_PreemptiveWalk.undo_idle_preemptions`: free the GPUs of movable jobs not kept, place the wanted jobs,
   and give back what nobody could use.
5. :meth:`~_PreemptiveWalk.backfill`: GPUs still idle go to jobs the walk passed over; every job left waiting
   gets its reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from operator import attrgetter

from scheduling.core.fairshare import NO_SHARE, BorrowRank
from scheduling.core.model import JobId, JobState, JobView, Placement, TenantLimits, Wait, WaitReason
from scheduling.core.placement import PlacementModel, Shape
from scheduling.core.policies.base import Policy
from scheduling.core.pool import FreePool
from scheduling.core.round_result import RoundResult, WaitCache
from scheduling.core.tenancy import Guarantees, Ledger

_RUNNING = JobState.RUNNING
_allocation = attrgetter("allocation")


def preemptive_walk(
    *,
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
    """Walk ``ordered`` (running and pending jobs in policy order) and write the round into ``result``.

    ``ledger`` holds every running job on entry. ``pin_running`` says every running job outranks every pending one
    (see :func:`scheduling.core.engine.run_round`), so phase 1 is skipped and ``ordered`` may hold pending jobs only.
    ``ranks`` (the quota layer with a usage history) turns on fair lending to borrowers.
    """
    walk = _PreemptiveWalk(pool, ledger, placement, policy, limits, explain, result, ranks)
    walk.run(ordered, running, now, pin_running)


class _PreemptiveWalk:
    """One preemptive walk. Each method is a phase; the attributes are what one phase hands to the next."""

    __slots__ = (
        "pool",
        "ledger",
        "placement",
        "policy",
        "limits",
        "explain",
        "result",
        "ranks",
        "waits",
        "pinned",
        "movable_jobs",
        "movable",
        "borrowers",
        "fair",
        "candidates",
        "capacity",
        "kept",
        "wanted",
        "passed_over",
        "jumped",
        "failed_shapes",
    )

    def __init__(
        self,
        pool: FreePool,
        ledger: Ledger,
        placement: PlacementModel,
        policy: Policy,
        limits: Mapping[str, TenantLimits],
        explain: bool,
        result: RoundResult,
        ranks: Mapping[str, BorrowRank] | None,
    ) -> None:
        self.pool = pool
        self.ledger = ledger
        self.placement = placement
        self.policy = policy
        self.limits = limits
        self.explain = explain
        self.result = result
        self.ranks = ranks
        self.waits = WaitCache()
        self.pinned: set[JobId] = set()  # running jobs that keep their GPUs whatever the ranking says
        self.movable_jobs: list[JobView] = []  # running jobs the walk may preempt
        self.movable = 0  # GPUs the movable jobs hold inside the pool
        self.borrowers: list[JobView] = []  # quota layer: candidates outside their tenant's guarantee
        self.fair = False  # borrowers are lent GPUs again in fair-share order
        self.candidates: Iterator[JobView] = iter(())  # one iterator: what the wanting stops before, backfill reads
        self.capacity = 0  # free GPUs plus the movable jobs' GPUs, when the wanting began
        self.kept: set[JobId] = set()  # movable jobs that keep their GPUs
        self.wanted: list[JobView] = []  # pending jobs to place, in priority order
        self.passed_over: list[JobView] = []  # pending jobs the wanting passed over: backfill candidates
        self.jumped: set[JobId] = set()  # waiting borrowers the policy would have started; fair share lent their GPUs
        self.failed_shapes: set[Shape] = set()  # no placement found; from placing on the pool only shrinks

    def run(self, ordered: Iterable[JobView], running: Sequence[JobView], now: float, pin_running: bool) -> None:
        """The phases, in order. With ``pin_running`` every running job is kept: none is pinned or movable, and
        ``ordered`` (pending jobs only) is ranked as it is."""
        if not pin_running:
            if self.policy.guarantees:
                ordered = list(ordered)  # walked twice: for the owner/borrower split and for the ranking
            self.pin_guaranteed(ordered)
            self.split_running(running, now)
        self.rank_candidates(ordered)
        budget = self.want_best()
        if self.fair:
            self.lend_fairly(budget)
        preempted = self.preempt_unkept()
        self.place_wanted()
        self.undo_idle_preemptions(preempted)
        self.backfill()

    def pin_guaranteed(self, ordered: Iterable[JobView]) -> None:
        """Under a non-preemptive policy with the quota layer, pin the running jobs inside their tenant's guarantee:
        such a policy reclaims only borrowed GPUs, never a tenant's own share (claimed in policy order)."""
        if self.policy.preemptive:
            return
        owners = Guarantees(self.limits, self.ledger.held)
        pinned = self.pinned
        for job in ordered:
            if job.state == _RUNNING and owners.claim(job):
                pinned.add(job.id)

    def split_running(self, running: Sequence[JobView], now: float) -> None:
        """Pin the running jobs inside their minimum quantum or with no GPU in the pool (GPUs on nodes that take no
        work could not be reused); the others are movable, and their GPUs in the pool count towards the capacity.

        The ledger then holds pinned jobs only: a movable job counts against its caps again only when the walk
        keeps it.
        """
        pinned, pool = self.pinned, self.pool
        quantum = self.policy.min_quantum
        whole = pool.complete
        movable_jobs: list[JobView] = []
        movable = 0
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
        self.movable_jobs, self.movable = movable_jobs, movable
        ledger = self.ledger
        if ledger.active:
            for job in movable_jobs:
                ledger.remove(job)

    def rank_candidates(self, ordered: Iterable[JobView]) -> None:
        """The jobs that compete for the capacity: every job not pinned, in policy order. With the quota layer,
        owners (jobs inside their tenant's guaranteed share, counted after the pinned jobs' claims) come before
        borrowers, each group in policy order, so an owner reclaims its share ahead of any borrower."""
        pinned = self.pinned
        candidates: Iterator[JobView] = (job for job in ordered if job.id not in pinned) if pinned else iter(ordered)
        if self.policy.guarantees:
            share = Guarantees(self.limits, self.ledger.held)
            for job in ordered:
                if job.id in pinned:
                    share.claim(job)
            owners_first: list[JobView] = []
            borrowers = self.borrowers
            for job in candidates:
                (owners_first if share.claim(job) else borrowers).append(job)
            candidates = chain(owners_first, borrowers)
        self.candidates = candidates
        self.fair = self.ranks is not None and bool(self.borrowers)

    def want_best(self) -> int:
        """Want the best candidates that fit the capacity the movable jobs and the free GPUs make up together:
        wanted running jobs are kept, wanted pending jobs will be placed. A pending job over a cap waits with the
        cap's reason; one that does not fit the budget left is passed over (a backfill candidate). Returns the
        budget left.

        Without explanations the walk stops once the capacity is used up (unless fair share still has to see every
        borrower); the rest of the candidates stays unread for :meth:`backfill`.
        """
        capacity = self.pool.total_free + self.movable
        self.capacity = budget = capacity
        ledger, waiting, explain, fair = self.ledger, self.result.waiting, self.explain, self.fair
        check_caps = ledger.active
        keep, want, pass_over = self.kept.add, self.wanted.append, self.passed_over.append
        if budget == 0 and not explain:
            self.candidates = iter(())
        for job in self.candidates:
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
        return budget

    def lend_fairly(self, budget: int) -> None:
        """Hand the borrowers' part of the capacity out again, in fair-share order.

        The policy-order walk decided which running borrowers keep their GPUs; those stay kept, so fair share never
        preempts a job the policy would keep. What the walk gave to waiting borrowers, plus what it left idle, is
        then lent again to the waiting borrowers *and* the running borrowers the walk would preempt, in order of
        their tenants' rank (the policy's order within one rank). A running borrower chosen here is spared; a
        waiting one the policy would have started but fair share passed over is added to ``jumped``. ``wanted``
        and ``passed_over`` are rewritten: the owners' entries as the walk left them, then the borrowers in fair
        order.
        """
        ranks, kept, ledger, waiting = self.ranks, self.kept, self.ledger, self.result.waiting
        assert ranks is not None  # self.fair says so
        ids = {job.id for job in self.borrowers}
        lent = {job.id for job in self.wanted if job.id in ids}
        for job in self.wanted:
            if job.id in lent:
                budget += job.gpus
                ledger.remove(job)
        owners_wanted = [job for job in self.wanted if job.id not in lent]
        owners_passed = [job for job in self.passed_over if job.id not in ids]
        contenders = [job for job in self.borrowers if job.id not in kept]  # waiting, and running ones to preempt
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
                        self.jumped.add(job.id)
        self.wanted = owners_wanted + chosen
        self.passed_over = owners_passed + not_chosen

    def preempt_unkept(self) -> list[JobView]:
        """Free the GPUs of the movable jobs that were not kept (including any the wanting stopped before reaching).
        Returns them: they are preempted unless :meth:`undo_idle_preemptions` gives their GPUs back."""
        preempted = [job for job in self.movable_jobs if job.id not in self.kept]
        for job in preempted:
            self.pool.give(job.allocation)
        return preempted

    def place_wanted(self) -> None:
        """Place the wanted pending jobs in priority order, so a better job gets the better-shaped GPUs. A job whose
        shape finds no placement waits (``NO_NODE_FITS``) and gives its place in the caps back."""
        pool, placement, ledger, failed_shapes = self.pool, self.placement, self.ledger, self.failed_shapes
        start, waiting = self.result.start, self.result.waiting
        for job in self.wanted:
            shape = placement.shape(job)
            slots = None if shape in failed_shapes else placement.place(pool, job)
            if slots is None:
                failed_shapes.add(shape)
                ledger.remove(job)
                waiting[job.id] = self.waits.get(WaitReason.NO_NODE_FITS, job.gpus, pool.total_free)
            else:
                start.append(Placement(job.id, tuple(slots)))

    def undo_idle_preemptions(self, preempted: list[JobView]) -> None:
        """Undo each preemption whose GPUs are all still free (a wanted job found no placement) and whose job the
        caps still allow: preempting a job only to leave its GPUs idle would waste its progress for nothing. The
        rest are preempted for good."""
        pool, ledger, result = self.pool, self.ledger, self.result
        for job in preempted:
            if pool.holds(job.allocation) and ledger.cap_wait(job) is None:
                pool.take_exact(job.allocation)
                ledger.add(job)
            else:
                result.preempt.append(job)
                result.waiting[job.id] = self.waits.get(WaitReason.PREEMPTED, job.gpus, 0)

    def backfill(self) -> None:
        """Start jobs the walk passed over (or never reached, if it stopped early) on GPUs that are still idle, in
        policy order, so the walk stays work-conserving; then give every job left waiting its reason (only when
        explaining: the simulator stops once nothing is free)."""
        pool, ledger, placement, failed_shapes = self.pool, self.ledger, self.placement, self.failed_shapes
        start, waiting, explain = self.result.start, self.result.waiting, self.explain
        no_nodes = pool.empty
        passed_over = chain(self.passed_over, (job for job in self.candidates if job.state != _RUNNING))
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
            if explain:
                waiting[job.id] = self.wait_after_backfill(job, no_nodes)

    def wait_after_backfill(self, job: JobView, no_nodes: bool) -> Wait:
        """Why a pending job the walk did not start waits: its cap first, else what stopped it, in the order of
        precedence of ``docs/scheduling.md``. A job that would have fit the capacity lost to higher-ranked jobs, or
        to fair share when that lent its GPUs to another tenant's borrower."""
        need, free = job.gpus, self.pool.total_free
        if no_nodes:
            reason = WaitReason.NO_SCHEDULABLE_NODES
        elif need <= free:
            reason = WaitReason.NO_NODE_FITS
        elif need <= self.capacity:
            reason = WaitReason.FAIR_SHARE if job.id in self.jumped else WaitReason.LOWER_PRIORITY
        else:
            reason = WaitReason.NOT_ENOUGH_FREE_GPUS
        return self.ledger.cap_wait(job) or self.waits.get(reason, need, free)
