"""What a replay reports: every finished job's outcome and the busy-GPU / waiting-job timeline.

These are plain frozen values (:mod:`scheduling.sim.metrics` and the what-if pages read them); the event loop in
:mod:`scheduling.sim.simulator` builds them and re-exports the names, where callers import them from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.sim.cluster import Cluster


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One finished job. ``held`` is the seconds it held GPUs, restore overheads included."""

    job_id: str
    tenant: str
    user: str
    gpus: int
    submit: float
    first_start: float
    finish: float
    duration: float
    held: float
    preemptions: int

    @property
    def jct(self) -> float:
        return self.finish - self.submit

    @property
    def queued(self) -> float:
        """Time spent without GPUs (the first wait plus every wait after a preemption)."""
        return self.jct - self.held


@dataclass(frozen=True, slots=True)
class Timeline:
    """Step series after every round: busy GPUs and waiting jobs from ``times[i]`` until ``times[i + 1]``."""

    times: tuple[float, ...]
    busy_gpus: tuple[int, ...]
    queued_jobs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SimResult:
    """One replay: the policy and placement it ran under, the cluster, every finished job and the timeline."""

    policy: str
    clairvoyant: bool
    placement: str
    cluster: Cluster
    outcomes: tuple[JobOutcome, ...]
    timeline: Timeline
    skipped: tuple[str, ...] = ()  # jobs that could never run here (more GPUs than the cluster or their cap)
    rounds: int = 0

    @property
    def preemptions(self) -> int:
        return sum(o.preemptions for o in self.outcomes)


@dataclass
class TimelineRecorder:
    """Builds a :class:`Timeline` as the replay goes, keeping only the instants where something changed (a long
    replay has far more events than changes of busy GPUs or queue length)."""

    times: list[float] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)

    def record(self, t: float, busy: int, queued: int) -> None:
        if self.times and self.busy[-1] == busy and self.queued[-1] == queued:
            return
        if self.times and self.times[-1] == t:
            self.busy[-1], self.queued[-1] = busy, queued
            return
        self.times.append(t)
        self.busy.append(busy)
        self.queued.append(queued)

    def timeline(self) -> Timeline:
        return Timeline(tuple(self.times), tuple(self.busy), tuple(self.queued))
