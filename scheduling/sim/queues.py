"""The simulator's mutable record of each job, the policy-ordered queues those records live in, and how a round
reads them.

The event loop (:mod:`scheduling.sim.simulator`) keeps pending and running jobs in lists sorted by
:attr:`SimJob.sort_key` (policy key, then trace index) so a round can read them in policy order without sorting
thousands of jobs every event. Under a preemptive walk, :func:`contested_running` and :func:`merged` hand a round
only the running jobs it could preempt, merged into the pending queue: the same result as ranking every job, for a
fraction of the work.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Iterator
from itertools import chain, islice
from operator import attrgetter

from scheduling.core.model import JobView
from scheduling.core.policies import Key, Policy
from scheduling.sim.trace import TraceJob


class SimJob:
    """One job of the replay. ``view`` is what the core sees; the rest is the simulator's bookkeeping."""

    __slots__ = (
        "index",
        "trace",
        "view",
        "remaining",
        "run_start",
        "token",
        "wake",
        "sort_key",
        "done",
        "first_start",
        "held",
        "preemptions",
    )

    def __init__(self, index: int, trace: TraceJob) -> None:
        self.index = index
        self.trace = trace
        self.view = JobView(
            id=index,
            tenant=trace.tenant,
            user=trace.user,
            gpus=trace.gpus,
            submit_time=trace.submit_time,
            last_queued=trace.submit_time,
            name=trace.name,
            model=trace.model,
            duration=trace.duration,
        )
        self.remaining = trace.duration  # seconds of work left, restore overheads included
        self.run_start = 0.0
        self.token = 0  # bumped on every start and preemption: a completion event with an older token is void
        self.wake = math.inf  # the earliest wake-up still wanted; a wake-up event at any other time is void
        self.sort_key: tuple[Key, int] | tuple[()] = ()  # (policy key, trace index) once ranked
        self.done = False
        self.first_start: float | None = None
        self.held = 0.0
        self.preemptions = 0


by_sort_key = attrgetter("sort_key")
view_of = attrgetter("view")


def remove_sorted(jobs: list[SimJob], job: SimJob) -> None:
    """Delete ``job`` from a list sorted by ``sort_key`` (keys are unique: they end in the trace index)."""
    i = bisect_left(jobs, job.sort_key, key=by_sort_key)
    if i >= len(jobs) or jobs[i] is not job:
        raise AssertionError(f"job {job.trace.job_id} is not where its key says")
    del jobs[i]


def merged(running: list[SimJob], pend: list[SimJob]) -> Iterator[JobView]:
    """Running and pending jobs in one order. The pending jobs ranked behind every running one are not sorted
    in (the walk often stops before reaching them); the part they interleave with is sorted by C code."""
    if not running:
        return map(view_of, pend)
    k = bisect_left(pend, running[-1].sort_key, key=by_sort_key)
    head = running + pend[:k]
    head.sort(key=by_sort_key)
    return chain(map(view_of, head), map(view_of, islice(pend, k, None)))


def contested_running(
    runs: list[SimJob], pend: list[SimJob], *, free: int, pending_gpus: int, policy: Policy, now: float
) -> list[SimJob]:
    """The running jobs that rank behind the first pending job that overflows the ``free`` GPUs: the only ones a
    round could preempt. ``pending_gpus`` is what the pending jobs need in all.

    The pending jobs ahead of that one fit in the free GPUs, so every job ranked before it (those pending jobs
    and the running jobs between them) fits in the walk's capacity and is taken, whatever comes after. Leaving
    those running jobs out of the round, with their GPUs, leaves the same budget for the rest of the walk and
    gives the same result for a fraction of the work. When everything waiting fits in the free GPUs no running
    job is contested at all.
    """
    if not runs or not pend or pending_gpus <= free:
        return []
    i = 0
    while free >= pend[i].trace.gpus:  # ends: the pending jobs need more than ``free`` in all
        free -= pend[i].trace.gpus
        i += 1
    cut = pend[i].sort_key
    return exact_running(runs, policy, now, bisect_left(runs, cut, key=by_sort_key), cut)


def exact_running(
    runs: list[SimJob], policy: Policy, now: float, first: int, cut: tuple[Key, int] | tuple[()] = ()
) -> list[SimJob]:
    """``runs[first:]`` with exact keys. With improving keys the cached keys are upper bounds: refresh the ones
    that might rank behind ``cut`` (the first pending job that overflows the free GPUs), re-sort ``runs`` in place,
    and cut again."""
    if policy.improving_keys and first < len(runs):
        key = policy.key
        for job in runs[first:]:
            job.sort_key = (key(job.view, now), job.index)
        runs.sort(key=by_sort_key)
        if first:
            first = bisect_left(runs, cut, key=by_sort_key)
    return runs[first:]
