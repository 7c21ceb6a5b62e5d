"""Tiresias discretized 2D-LAS (Gu et al., "Tiresias: A GPU Cluster Manager for Distributed Deep Learning",
NSDI 2019).

Without knowing durations, the job that has received the least *service* so far is the best bet to finish soonest
(least attained service). Tiresias measures service in two dimensions, GPUs x seconds executed, and discretizes it
into K queues split at GPU-second thresholds so that jobs are not preempted every time their service crosses a
neighbour's: a job runs in queue *k* until its service passes threshold *k*, then drops one queue. Inside a queue
the order is FIFO by submission. A waiting job whose wait exceeds ``starvation_knob`` times its executed time goes
back to the top queue.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from itertools import chain
from operator import attrgetter

from scheduling.core.model import JobState, JobView
from scheduling.core.policies.base import NEVER, Key, Policy

#: The Tiresias simulator's defaults for its 60-job trace: three queues split at 3,250 and 7,200 GPU-seconds.
TIRESIAS_SMALL_TRACE_THRESHOLDS: tuple[float, ...] = (3250.0, 7200.0)

#: Defaults for Philly-scale jobs (durations of hours to weeks, 1-8 GPUs): thresholds spread geometrically over
#: the service range so each queue separates a real class of jobs (see docs/scheduling.md for the sweep).
PHILLY_THRESHOLDS: tuple[float, ...] = (4 * 3600.0, 32 * 3600.0, 256 * 3600.0)


_by_submit = attrgetter("submit_time")


class TiresiasLas(Policy):
    """Discretized 2D least-attained-service with K = len(thresholds) + 1 queues."""

    name = "tiresias-las"
    preemptive = True

    def __init__(
        self,
        thresholds: Sequence[float] = PHILLY_THRESHOLDS,
        *,
        starvation_knob: float | None = None,
        min_quantum: float = 0.0,
    ) -> None:
        if list(thresholds) != sorted(thresholds) or any(t <= 0 for t in thresholds):
            raise ValueError("queue thresholds must be positive and increasing")
        self.thresholds = tuple(float(t) for t in thresholds)
        self.starvation_knob = starvation_knob
        self.min_quantum = min_quantum

    def queue(self, job: JobView, now: float) -> int:
        """The job's queue (0 is the top) at ``now``."""
        if self._promoted(job, now):
            return 0
        return bisect_right(self.thresholds, job.attained_at(now))

    def key(self, job: JobView, now: float) -> Key:
        return (self.queue(job, now), job.submit_time)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        # Same order as sorting by ``key``, without a Python call per comparison: bucket by queue, then sort each
        # bucket by submission in C. ``decide`` over 25k jobs spends most of its time here otherwise.
        th = self.thresholds
        queues: list[list[JobView]] = [[] for _ in range(len(th) + 1)]
        knob = self.starvation_knob
        for job in jobs:
            if knob is not None and self._promoted(job, now):
                queues[0].append(job)
            else:
                queues[bisect_right(th, job.attained_at(now))].append(job)
        for queue in queues:
            queue.sort(key=_by_submit)
        return list(chain.from_iterable(queues))

    def key_expiry(self, job: JobView, now: float) -> float:
        if job.state == JobState.RUNNING:
            # The next threshold this job's service will cross while it keeps running.
            service = job.attained_at(now)
            q = bisect_right(self.thresholds, service)
            if q >= len(self.thresholds):
                return NEVER
            return now + (self.thresholds[q] - service) / job.gpus
        knob = self.starvation_knob
        if knob is None or job.executed_time <= 0 or self._promoted(job, now):
            return NEVER
        return (job.last_queued if job.last_queued is not None else job.submit_time) + knob * job.executed_time

    def _promoted(self, job: JobView, now: float) -> bool:
        knob = self.starvation_knob
        if knob is None or job.state == JobState.RUNNING or job.executed_time <= 0:
            return False
        since = job.last_queued if job.last_queued is not None else job.submit_time
        return now - since >= knob * job.executed_time

    def describe(self) -> str:
        th = ", ".join(f"{t:g}" for t in self.thresholds)
        return f"{self.name} (queues split at {th} GPU-s)"
