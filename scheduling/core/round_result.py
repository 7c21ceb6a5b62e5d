"""What one scheduling round produces: the :class:`RoundResult` both walks fill in, and the wait values they share.

It lives below both walks (the plain one in :mod:`scheduling.core.engine`, the preemptive one in
:mod:`scheduling.core.preemptive_walk`) so that the engine can hand a round to either walk without an import circle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduling.core.model import JobId, JobView, Placement, Wait, WaitReason, gpu_count


@dataclass(slots=True)
class RoundResult:
    """What a round did. ``preempt`` holds the views of running jobs that lose their GPUs."""

    start: list[Placement] = field(default_factory=list)
    preempt: list[JobView] = field(default_factory=list)
    waiting: dict[JobId, Wait] = field(default_factory=dict)


class WaitCache:
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
