"""A deterministic, event-driven replay of a job trace through the scheduling core.

Time jumps from event to event (arrivals, completions, and wake-ups a policy asks for: a queue threshold crossed, a
starvation limit reached, a minimum quantum over); after the events of one instant are applied, one round of
:func:`scheduling.core.engine.run_round` decides what starts and what is preempted. That is the same round the
live loop runs through ``decide``; the simulator only keeps its inputs alive between events instead of rebuilding a
snapshot, which is what makes a 100k-job trace take seconds rather than hours.

Nothing here is random: ties are broken by event kind (completions before arrivals before wake-ups) and then by
trace order, so a trace, a policy and a cluster always give the same result.

This module is the event loop and the rounds it triggers. The cluster (:mod:`scheduling.sim.cluster`), the results
(:mod:`scheduling.sim.results`) and the per-job records with their sorted queues (:mod:`scheduling.sim.queues`) live
beside it; ``Cluster``, ``can_ever_run``, ``JobOutcome``, ``Timeline`` and ``SimResult`` are re-exported here,
where callers import them from.
"""

from __future__ import annotations

import heapq
import math
from bisect import insort
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from scheduling.core.engine import needs_preemptive_walk, run_round
from scheduling.core.fairshare import UsageMeter
from scheduling.core.model import FinishedJob, GpuSlot, JobState, JobView, TenantLimits
from scheduling.core.placement import PlacementModel, resolve_placement
from scheduling.core.policies import Policy, resolve_policy
from scheduling.core.preemption import PreemptionCost
from scheduling.sim.cluster import Cluster as Cluster
from scheduling.sim.cluster import can_ever_run as can_ever_run
from scheduling.sim.queues import SimJob, by_sort_key, contested_running, exact_running, merged, remove_sorted, view_of
from scheduling.sim.results import JobOutcome as JobOutcome
from scheduling.sim.results import SimResult as SimResult
from scheduling.sim.results import Timeline as Timeline
from scheduling.sim.results import TimelineRecorder
from scheduling.sim.trace import TraceJob

_FINISH, _ARRIVE, _WAKE = 0, 1, 2  # order of events that share an instant


class SimObserver(Protocol):
    """Optional hooks for tests and debugging: every GPU hand-out and hand-back, and the state after each round."""

    def started(self, job_id: str, slots: tuple[GpuSlot, ...], now: float) -> None: ...

    def stopped(self, job_id: str, slots: tuple[GpuSlot, ...], now: float, *, finished: bool) -> None: ...

    def round_done(self, now: float, free_gpus: int, waiting: Sequence[JobView]) -> None: ...


class SimulationStuck(RuntimeError):
    """Jobs are waiting but nothing is running and no event is left: a policy or placement bug."""


def simulate(
    trace: Sequence[TraceJob],
    policy: str | Policy,
    *,
    cluster: Cluster,
    placement: str | PlacementModel = "count",
    overhead: PreemptionCost | None = None,
    tenants: Mapping[str, TenantLimits] | None = None,
    progress: Callable[[int], None] | None = None,
    observer: SimObserver | None = None,
    usage_half_life: float | None = None,
) -> SimResult:
    """Replay ``trace`` under ``policy`` on ``cluster`` and return every job's outcome.

    ``policy`` may be a name (a fresh, history-free object) or an object, which then learns from this run.
    ``progress`` is called with the number of jobs finished since its last call. ``usage_half_life`` (seconds)
    turns on fair share for a ``+quota`` policy: tenants' usage is metered from the replay itself, starting from
    nothing, and orders who borrows idle quota first.
    """
    return _Simulation(
        trace,
        resolve_policy(policy),
        cluster,
        resolve_placement(placement),
        overhead or PreemptionCost(),
        dict(tenants or {}),
        progress,
        observer,
        usage_half_life,
    ).run()


class _Simulation:
    """One replay: the event heap, the job records and their queues, the free pool. :meth:`run` is the loop."""

    def __init__(
        self,
        trace: Sequence[TraceJob],
        policy: Policy,
        cluster: Cluster,
        placement: PlacementModel,
        overhead: PreemptionCost,
        tenants: dict[str, TenantLimits],
        progress: Callable[[int], None] | None,
        observer: SimObserver | None = None,
        usage_half_life: float | None = None,
    ) -> None:
        self.observer = observer
        self.meter = UsageMeter(usage_half_life) if usage_half_life is not None and policy.guarantees else None
        self.policy = policy
        self.cluster = cluster
        self.placement = placement
        self.overhead = overhead
        self.tenants = tenants
        self.has_caps = any(t.gpu_cap is not None or t.user_cap is not None for t in tenants.values())
        self.progress = progress
        self.pool = cluster.free_pool()
        self.preemptive_walk = needs_preemptive_walk(policy)
        self.jobs: list[SimJob] = []
        self.skipped: list[str] = []
        for t in trace:
            if can_ever_run(t, cluster, tenants):
                self.jobs.append(SimJob(len(self.jobs), t))
            else:
                self.skipped.append(t.job_id)
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.running: dict[int, SimJob] = {}
        # Pending jobs sorted by (key, trace index). Under a preemptive walk, running jobs are kept sorted the same
        # way in ``run_sorted``; a job's key changes only at a wake-up, a state change or a policy refit.
        self.pend_sorted: list[SimJob] = []
        self.run_sorted: list[SimJob] = []
        self.waiting = 0
        self.pending_gpus = 0
        self.outcomes: list[JobOutcome] = []
        self.clock = TimelineRecorder()
        self.rounds = 0
        self.seen_version = policy.version
        self.arrived: set[int] = set()  # only tracked for an observer

    # -- events -------------------------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job: SimJob, token: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, job.index, token))

    def run(self) -> SimResult:
        for job in self.jobs:
            self._push(job.trace.submit_time, _ARRIVE, job, 0)
        heap, jobs = self.heap, self.jobs
        while heap:
            now = heap[0][0]
            changed = False
            while heap and heap[0][0] == now:
                _, kind, _, index, token = heapq.heappop(heap)
                job = jobs[index]
                if kind == _FINISH:
                    if token == job.token:
                        self._finish(job, now)
                        changed = True
                elif kind == _ARRIVE:
                    self._arrive(job, now)
                    changed = True
                elif job.wake == now and not job.done:  # a wake-up that is still wanted
                    job.wake = math.inf
                    changed = self._requeue(job, now) or changed
            if changed or self.policy.version != self.seen_version:
                self._round(now)
            if self.observer is not None:
                waiting = [j.view for j in self.jobs if j.view.state == JobState.PENDING and j.index in self.arrived]
                self.observer.round_done(now, self.pool.total_free, waiting)
            self.clock.record(now, self.cluster.total_gpus - self.pool.total_free, self.waiting)
        if self.waiting:
            raise SimulationStuck(f"{self.waiting} jobs still waiting with nothing running under {self.policy.name}")
        return SimResult(
            policy=self.policy.name,
            clairvoyant=self.policy.clairvoyant,
            placement=self.placement.name,
            cluster=self.cluster,
            outcomes=tuple(self.outcomes),
            timeline=self.clock.timeline(),
            skipped=tuple(self.skipped),
            rounds=self.rounds,
        )

    def _arrive(self, job: SimJob, now: float) -> None:
        self.waiting += 1
        self.pending_gpus += job.trace.gpus
        if self.observer is not None:
            self.arrived.add(job.index)
        self._rekey(job, now)
        insort(self.pend_sorted, job, key=by_sort_key)

    def _finish(self, job: SimJob, now: float) -> None:
        view = job.view
        self.pool.give(view.allocation)
        if self.meter is not None:
            self.meter.change(view.tenant, -view.gpus, now)
        if self.observer is not None:
            self.observer.stopped(job.trace.job_id, view.allocation, now, finished=True)
            self.arrived.discard(job.index)
        del self.running[job.index]
        if self.preemptive_walk:
            remove_sorted(self.run_sorted, job)
        job.done = True
        ran = now - job.run_start
        job.held += ran
        t = job.trace
        assert job.first_start is not None
        self.outcomes.append(
            JobOutcome(
                t.job_id, t.tenant, t.user, t.gpus, t.submit_time, job.first_start, now, t.duration, job.held,
                job.preemptions,
            )
        )  # fmt: skip
        self.policy.observe_finished(
            FinishedJob(
                id=view.id,
                tenant=t.tenant,
                user=t.user,
                gpus=t.gpus,
                submit_time=t.submit_time,
                finish_time=now,
                executed_time=view.executed_time + ran,
                name=t.name,
                model=t.model,
            )
        )
        if self.progress is not None:
            self.progress(1)

    # -- keys ---------------------------------------------------------------------------------------------------
    def _rekey(self, job: SimJob, now: float) -> None:
        """Recompute a job's priority and wake up when it next changes (a queue threshold crossed, a starvation
        limit reached) so a preemptive policy reacts at that instant, not at the next arrival."""
        if not self.preemptive_walk:  # plain walks never re-rank a waiting job: no wake-ups
            job.sort_key = (self.policy.key(job.view, now), job.index)
            return
        key, expiry = self.policy.key_and_expiry(job.view, now)
        job.sort_key = (key, job.index)
        if now < expiry < job.wake:
            job.wake = expiry
            self._push(expiry, _WAKE, job, 0)

    def _requeue(self, job: SimJob, now: float) -> bool:
        """Move a woken job to where its new key belongs. True if that can change a round's outcome: any waiting
        job moving, or a running one that ranks (or ranked) behind the best waiting job. A running job that stays
        ahead of every waiting one is kept by any round, so its wake-up alone needs no round."""
        running = job.index in self.running
        lst = self.run_sorted if running else self.pend_sorted
        old_key = job.sort_key
        remove_sorted(lst, job)
        self._rekey(job, now)
        insort(lst, job, key=by_sort_key)
        if not running:
            return True
        pend = self.pend_sorted
        return bool(pend) and max(old_key, job.sort_key) > pend[0].sort_key

    def _rekey_all(self, jobs: list[SimJob], now: float) -> None:
        for job in jobs:
            self._rekey(job, now)
        jobs.sort(key=by_sort_key)

    # -- rounds -------------------------------------------------------------------------------------------------
    def _round(self, now: float) -> None:
        """One round of the core over the queues as they stand; its preemptions are applied before its starts,
        which reuse their GPUs."""
        if not self.waiting:
            return
        self.rounds += 1
        policy = self.policy
        pin_running = False
        movable: list[SimJob] = list(self.running.values())
        if not self.preemptive_walk:
            ordered: Iterable[JobView] = map(view_of, self.pend_sorted)
        else:
            if policy.version != self.seen_version:  # the policy refit what it learned: every key may move
                self.seen_version = policy.version
                self._rekey_all(self.pend_sorted, now)
                self._rekey_all(self.run_sorted, now)
            if policy.guarantees or self.has_caps:
                movable = exact_running(self.run_sorted, policy, now, 0)
            else:
                movable = contested_running(
                    self.run_sorted,
                    self.pend_sorted,
                    free=self.pool.total_free,
                    pending_gpus=self.pending_gpus,
                    policy=policy,
                    now=now,
                )
                pin_running = not movable
            if pin_running:
                ordered = map(view_of, self.pend_sorted)
            else:
                ordered = merged(movable, self.pend_sorted)
        result = run_round(
            ordered=ordered,
            running=() if pin_running else [job.view for job in movable],
            pool=self.pool,
            placement=self.placement,
            policy=policy,
            now=now,
            limits=self.tenants,
            explain=False,
            pin_running=pin_running,
            usage=None if self.meter is None else self.meter.history(now),
        )
        jobs = self.jobs
        for view in result.preempt:
            self._preempt(jobs[view.id], now)  # type: ignore[index]
        for placement in result.start:
            self._start(jobs[placement.job_id], placement.slots, now)  # type: ignore[index]

    def _start(self, job: SimJob, slots: tuple[GpuSlot, ...], now: float) -> None:
        if job.preemptions:
            job.remaining += self.overhead.overhead(job.trace.gpus)
        job.run_start = now
        job.token += 1
        if self.meter is not None:
            self.meter.change(job.trace.tenant, job.trace.gpus, now)
        if job.first_start is None:
            job.first_start = now
        remove_sorted(self.pend_sorted, job)
        job.view = replace(job.view, state=JobState.RUNNING, allocation=slots, last_started=now, service_at=now)
        self.running[job.index] = job
        self.waiting -= 1
        self.pending_gpus -= job.trace.gpus
        if self.observer is not None:
            self.observer.started(job.trace.job_id, slots, now)
        self._push(now + job.remaining, _FINISH, job, job.token)
        if self.preemptive_walk:
            self._rekey(job, now)
            insort(self.run_sorted, job, key=by_sort_key)
            quantum = self.policy.min_quantum
            if quantum > 0 and now + quantum < job.wake:
                job.wake = now + quantum
                self._push(now + quantum, _WAKE, job, 0)

    def _preempt(self, job: SimJob, now: float) -> None:
        ran = now - job.run_start
        job.remaining -= ran
        job.held += ran
        job.token += 1  # its completion event is void now
        job.preemptions += 1
        view = job.view
        if self.meter is not None:
            self.meter.change(view.tenant, -view.gpus, now)
        if self.observer is not None:
            self.observer.stopped(job.trace.job_id, view.allocation, now, finished=False)
        remove_sorted(self.run_sorted, job)
        job.view = replace(
            view,
            state=JobState.PENDING,
            allocation=(),
            last_queued=now,
            service_at=None,
            attained_service=view.attained_service + view.gpus * ran,
            executed_time=view.executed_time + ran,
        )
        del self.running[job.index]
        self.waiting += 1
        self.pending_gpus += job.trace.gpus
        self._rekey(job, now)
        insort(self.pend_sorted, job, key=by_sort_key)
