"""When should each waiting job start? A short look ahead with the live policy, placement and quotas.

The forecast plays the current state forward: no new jobs arrive, every running job ends when its estimated
remaining run time is up, and after every end (and every instant a preemptive policy would re-rank jobs) one
round of :func:`scheduling.core.engine.run_round` decides what starts. That is the same round the live loop and
the simulator run, so the forecast follows whatever the admin configured (FIFO's head-of-line blocking, Tiresias's
queues and preemptions, QSSF's predictions, tenant caps and guarantees, topology placement) instead of a
first-come-first-served guess.

Run times are the caller's estimate (``remaining``): the adapter uses a job's time limit and the history of
similar jobs. A job with no estimate holds its GPUs for ever as far as the forecast can tell, so jobs that only
its GPUs could serve get no time (:attr:`StartOutlook.UNKNOWN_END`) rather than a made-up one. Pure: no Django,
no clock; ``now`` is an argument and the snapshot is not changed.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from itertools import count, islice

from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.engine import needs_preemptive_walk, run_round
from scheduling.core.fairshare import UsageMeter
from scheduling.core.model import JobId, JobState, JobView, Snapshot
from scheduling.core.placement import PlacementModel, resolve_placement
from scheduling.core.policies import resolve_policy
from scheduling.core.policies.base import Policy
from scheduling.core.pool import FreePool

#: How far ahead a forecast looks by default (seconds). Beyond a week a start time means little: people and
#: other jobs will have changed the queue long before.
DEFAULT_HORIZON = 7 * 86_400.0
#: Rounds a forecast may run before it gives up on the jobs still waiting; bounds its cost on a huge queue.
DEFAULT_MAX_ROUNDS = 10_000
#: Default cost bound of a forecast under a preemptive walk, in job-rounds; see :func:`round_budget`.
DEFAULT_WORK = 10_000_000


def round_budget(jobs: int, *, preemptive: bool, work: int = DEFAULT_WORK) -> int:
    """Rounds a forecast over ``jobs`` pending and running jobs may play.

    A preemptive round ranks every job in the system, so its cost grows with the queue: such forecasts get about
    ``work`` job-rounds (at least 100 rounds, so the head of any queue gets a time). A plain round stops as soon
    as the free GPUs are used up and costs little whatever the queue, so it gets :data:`DEFAULT_MAX_ROUNDS`.
    """
    if not preemptive:
        return DEFAULT_MAX_ROUNDS
    return max(100, min(DEFAULT_MAX_ROUNDS, work // max(1, jobs)))


def remaining_run_time(job: JobView, *, now: float, predictor: DurationPredictor) -> float | None:
    """Seconds ``job`` is expected to keep its GPUs from ``now`` (running) or from its next start (pending): the
    forecast's ``remaining``, as the live loop and the accuracy benchmark (``bench/start_estimates.py``) both give it.

    Two sources, as a user would reason: the time limit (the job is stopped then, whatever happens) and the mean
    run time of similar finished jobs (Helios's groups: same user, name and GPU count, with fallbacks). The
    nearer of the two wins. A job that has already outlived the history's estimate and has no limit is expected
    to run as long again: deep-learning run times are heavy-tailed, so a job that ran long tends to run longer.
    None: no limit and no history at all.
    """
    attempt_elapsed = now - job.last_started if job.state == JobState.RUNNING and job.last_started else 0.0
    limit_left = None if job.time_limit is None else max(0.0, job.time_limit - attempt_elapsed)
    executed = job.executed_at(now)
    predicted = predictor.predict(job, as_of=now)
    if predicted is not None and predicted > executed:
        left = predicted - executed
        return left if limit_left is None else min(left, limit_left)
    if limit_left is not None:
        return limit_left
    if predicted is not None:
        return max(executed, 60.0)
    return None


class StartOutlook(StrEnum):
    """What a forecast could say about one waiting job."""

    ESTIMATED = "estimated"  # ``StartForecast.at`` holds the expected start
    UNKNOWN_END = "unknown_end"  # it waits for GPUs held by jobs whose end nobody can estimate
    BEYOND_HORIZON = "beyond_horizon"  # not within the horizon
    BEYOND_REACH = "beyond_reach"  # the forecast used up its rounds before this job started
    NO_CAPACITY = "no_capacity"  # would not start even on an idle cluster: the nodes up now cannot take it


@dataclass(frozen=True, slots=True)
class StartForecast:
    outlook: StartOutlook
    at: float | None = None  # epoch seconds; set only when ``outlook`` is ESTIMATED


def forecast_starts(
    snapshot: Snapshot,
    *,
    now: float,
    remaining: Mapping[JobId, float | None],
    policy: str | Policy = "fifo",
    placement: str | PlacementModel = "topology",
    horizon: float = DEFAULT_HORIZON,
    max_rounds: int = DEFAULT_MAX_ROUNDS,
) -> dict[JobId, StartForecast]:
    """The expected (first) start of every pending job in ``snapshot``.

    ``remaining[id]`` is the seconds a job still has to run once it holds GPUs (for a running job: from ``now``);
    ``None`` or a missing id means unknown. A pending job that the first round starts gets ``now``. A job that
    the forecast starts and then preempts keeps its first start: that is when the user sees it begin.

    ``policy`` should be the live policy *object* (what it learned ranks the jobs), but it is never told about
    the forecast's imagined finishes, so calling this leaves the policy as it was.
    """
    return _Forecast(snapshot, now, remaining, resolve_policy(policy), resolve_placement(placement)).run(
        horizon, max_rounds
    )


class _Forecast:
    def __init__(
        self,
        snapshot: Snapshot,
        now: float,
        remaining: Mapping[JobId, float | None],
        policy: Policy,
        placement: PlacementModel,
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self.policy = policy
        self.placement = placement
        self.preemptive = needs_preemptive_walk(policy)
        self.pool = FreePool(snapshot.nodes)
        self.running: dict[JobId, JobView] = {}
        self.pending: dict[JobId, JobView] = {}
        self.left: dict[JobId, float] = {}  # seconds still to run, as of the job's (re)start or ``now``
        self.ends: dict[JobId, float] = {}  # running jobs: when they end (inf: unknown)
        self.end_heap: list[tuple[float, int, JobId]] = []  # (end, tie-break, id); stale entries are skipped
        self.tie = count()  # the heaps' tie-break: job ids may mix ints and strings
        # Preemptive policies only: when each job's key next moves (or its minimum quantum ends), the simulator's
        # wake-ups. A job's wake-up holds while its state does; ``stamp`` voids the ones a state change outdated.
        self.wakes: list[tuple[float, int, JobId, int]] = []
        self.stamp: dict[JobId, int] = {}
        self.first_start: dict[JobId, float] = {}
        self.plain_order: list[JobView] | None = None
        self.order_head = 0  # plain walks: every job before this index in ``plain_order`` has started
        self.order_stale = False
        # Fair share: tenants' usage goes on growing with the jobs the forecast runs, and decaying.
        self.meter = (
            UsageMeter.starting_from(snapshot.usage, now) if snapshot.usage is not None and policy.guarantees else None
        )
        for job in snapshot.jobs:
            if job.state not in (JobState.PENDING, JobState.RUNNING):
                continue
            estimate = remaining.get(job.id)
            self.left[job.id] = math.inf if estimate is None else max(0.0, estimate)
            if job.state == JobState.RUNNING:
                # Service measured as of ``now``; from here the core extrapolates it while the job runs.
                view = replace(
                    job, attained_service=job.attained_at(now), executed_time=job.executed_at(now), service_at=now
                )
                self._run(view, now)
            else:
                self.pending[job.id] = job
                self._arm(job, now)
        self.pending_ids = list(self.pending)
        self.waited = set(self.pending_ids)  # jobs running now that the forecast preempts and restarts are not

    def run(self, horizon: float, max_rounds: int) -> dict[JobId, StartForecast]:
        limit = self.now + horizon
        t = self.now
        stuck = StartOutlook.BEYOND_REACH  # for the jobs still waiting when the rounds run out
        unstarted = len(self.pending_ids)
        for _ in range(max_rounds):
            unstarted -= self._round(t)
            if not unstarted:
                break
            nxt = self._next_event(t)
            if math.isinf(nxt):  # nothing will end: the rest wait on jobs of unknown length, or on nothing at all
                stuck = StartOutlook.UNKNOWN_END if self.ends else StartOutlook.NO_CAPACITY
                break
            if nxt > limit:
                stuck = StartOutlook.BEYOND_HORIZON
                break
            t = nxt
            heap = self.end_heap
            while heap and heap[0][0] <= t:
                end, _, job_id = heapq.heappop(heap)
                if self.ends.get(job_id) == end:
                    self._finish(job_id, end)
            wakes = self.wakes
            while wakes and wakes[0][0] <= t:
                _, _, job_id, stamp = heapq.heappop(wakes)
                if self.stamp.get(job_id) == stamp:  # still in the state it was armed in: arm its next one
                    view = self.running.get(job_id) or self.pending[job_id]
                    self._arm(view, t)
        return {
            job_id: (
                StartForecast(StartOutlook.ESTIMATED, self.first_start[job_id])
                if job_id in self.first_start
                else StartForecast(stuck)
            )
            for job_id in self.pending_ids
        }

    def _round(self, t: float) -> int:
        """One round at ``t``; returns how many jobs started for the first time."""
        running = list(self.running.values())
        ordered: Iterable[JobView]
        if self.preemptive:
            ordered = self.policy.order(running + list(self.pending.values()), t)
        else:
            # A plain walk never preempts and its keys never move (the simulator relies on the same): the waiting
            # jobs are sorted once, and leave that order as they start.
            if self.plain_order is None:
                self.plain_order = self.policy.order(list(self.pending.values()), t)
            elif self.order_stale:
                self._drop_started()
            self.order_stale = False
            if not self.pool.total_free:
                return 0
            pending, order = self.pending, self.plain_order
            ordered = (v for v in islice(order, self.order_head, None) if v.id in pending)
        if not self.pending:
            return 0
        result = run_round(
            ordered=ordered,
            running=running,
            pool=self.pool,
            placement=self.placement,
            policy=self.policy,
            now=t,
            limits=self.snapshot.tenants,
            explain=False,
            usage=None if self.meter is None else self.meter.history(t),
        )
        for view in result.preempt:
            self._preempt(view.id, t)
        first = 0
        for placed in result.start:
            job = self.pending.pop(placed.job_id)
            self._run(replace(job, state=JobState.RUNNING, allocation=placed.slots, last_started=t, service_at=t), t)
            if placed.job_id not in self.first_start and placed.job_id in self.waited:
                self.first_start[placed.job_id] = t
                first += 1
        self.order_stale = bool(result.start)
        return first

    def _drop_started(self) -> None:
        """Forget the jobs that started from the plain order, cheaply: a job that starts never waits again in a plain
        walk, so the head moves past started jobs for good, and the rest of the list is rebuilt only once enough
        jobs started behind the head (backfill). Rebuilding it every round cost O(queue) per round: 12 s at 50,000
        pending jobs."""
        order, pending = self.plain_order, self.pending
        assert order is not None
        head = self.order_head
        while head < len(order) and order[head].id not in pending:
            head += 1
        self.order_head = head
        behind = len(order) - head - len(pending)  # started jobs still in the list past the head
        if behind > max(256, (len(order) - head) // 8):
            self.plain_order = [v for v in islice(order, head, None) if v.id in pending]
            self.order_head = 0

    def _run(self, view: JobView, t: float) -> None:
        self.running[view.id] = view
        if self.meter is not None:
            self.meter.change(view.tenant, view.gpus, t)
        end = t + self.left[view.id]
        self.ends[view.id] = end
        if not math.isinf(end):
            heapq.heappush(self.end_heap, (end, next(self.tie), view.id))
        self._arm(view, t)

    def _arm(self, view: JobView, t: float) -> None:
        """Note when ``view``'s place in a preemptive ranking may next change (nothing to note for plain walks)."""
        if not self.preemptive:
            return
        stamp = self.stamp[view.id] = self.stamp.get(view.id, 0) + 1
        wake = self.policy.key_expiry(view, t)
        quantum = self.policy.min_quantum
        if quantum > 0 and view.state == JobState.RUNNING and view.last_started is not None:
            done = view.last_started + quantum
            if t < done < wake:
                wake = done
        if t < wake < math.inf:
            heapq.heappush(self.wakes, (wake, next(self.tie), view.id, stamp))

    def _preempt(self, job_id: JobId, t: float) -> None:
        job = self.running.pop(job_id)
        if self.meter is not None:
            self.meter.change(job.tenant, -job.gpus, t)
        ran = t - (job.service_at if job.service_at is not None else t)
        self.left[job_id] = max(0.0, self.left[job_id] - ran)
        del self.ends[job_id]
        view = self.pending[job_id] = replace(
            job,
            state=JobState.PENDING,
            allocation=(),
            last_queued=t,
            attained_service=job.attained_at(t),
            executed_time=job.executed_at(t),
            service_at=None,
        )
        self._arm(view, t)

    def _finish(self, job_id: JobId, t: float) -> None:
        job = self.running.pop(job_id)
        if self.meter is not None:
            self.meter.change(job.tenant, -job.gpus, t)
        del self.ends[job_id]
        self.stamp.pop(job_id, None)
        self.pool.give(job.allocation)

    def _next_event(self, t: float) -> float:
        """The next instant the outcome of a round may change: a running job's end, or, for preemptive policies,
        a wake-up (a job's priority moves or its minimum quantum runs out)."""
        ends, wakes = self.end_heap, self.wakes
        while ends and self.ends.get(ends[0][2]) != ends[0][0]:
            heapq.heappop(ends)  # a preempted run's end
        while wakes and self.stamp.get(wakes[0][2]) != wakes[0][3]:
            heapq.heappop(wakes)  # armed in a state the job has left
        return min(ends[0][0] if ends else math.inf, wakes[0][0] if wakes else math.inf)
