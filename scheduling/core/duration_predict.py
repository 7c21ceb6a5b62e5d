"""Duration prediction from history, as Helios's QSSF uses it (Hu et al., "Characterization and Prediction of Deep
Learning Workloads in Large-Scale GPU Datacenters", SC 2021).

Jobs repeat: the same user resubmits the same script with the same GPU count, so the mean duration of that group's
past jobs is a good estimate. When a group has no history the estimate falls back to coarser groups, ending with all
jobs of that GPU count and then all jobs.

A prediction is made *as of the job's submission*: only jobs that finished before it was submitted count. That
keeps the simulator honest (no peeking at the future of the trace) and makes the prediction of a waiting job a
constant, so ``decide`` gives the same order no matter when or how often it is called.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable

from scheduling.core.model import FinishedJob, JobView

_Group = tuple[str, ...]

#: Most specific first. Each returns the group key of a job (or of a finished record); "" parts mean unknown.
_GROUPS: tuple[Callable[[str, str, int], _Group], ...] = (
    lambda user, name, gpus: ("user+name+gpus", user, name, str(gpus)),
    lambda user, name, gpus: ("user+name", user, name),
    lambda user, name, gpus: ("user+gpus", user, str(gpus)),
    lambda user, name, gpus: ("user", user),
    lambda user, name, gpus: ("gpus", str(gpus)),
    lambda user, name, gpus: ("all",),
)
_NEEDS_USER = 4  # the first four groups are about a user; they mean nothing when the trace has no users
_NEEDS_NAME = 2


class _Series:
    """Durations of one group in finish order, with running sums for "mean as of time t" in O(log n)."""

    __slots__ = ("times", "sums")

    def __init__(self) -> None:
        self.times: list[float] = []
        self.sums: list[float] = [0.0]

    def add(self, finish: float, duration: float) -> None:
        if not self.times or finish >= self.times[-1]:
            self.times.append(finish)
            self.sums.append(self.sums[-1] + duration)
            return
        # Out of order (the live loop may learn of finishes late): rebuild the sums. Rare.
        durations = [b - a for a, b in zip(self.sums, self.sums[1:], strict=False)]
        pairs = list(zip(self.times, durations, strict=True))
        insort(pairs, (finish, duration))
        self.times = [t for t, _ in pairs]
        self.sums = [0.0]
        for _, d in pairs:
            self.sums.append(self.sums[-1] + d)

    def mean_before(self, t: float) -> float | None:
        n = bisect_right(self.times, t)
        return self.sums[n] / n if n else None


class DurationPredictor:
    """Mean duration of the most specific group with history, as of a given time."""

    __slots__ = ("series",)

    def __init__(self) -> None:
        self.series: dict[_Group, _Series] = {}

    def observe(self, record: FinishedJob) -> None:
        for group in _groups(record.user, record.name, record.gpus):
            series = self.series.get(group)
            if series is None:
                series = self.series[group] = _Series()
            series.add(record.finish_time, record.executed_time)

    def predict(self, job: JobView, as_of: float | None = None) -> float | None:
        """Predicted duration in seconds, from jobs finished by ``as_of`` (default: the job's submission)."""
        t = job.submit_time if as_of is None else as_of
        for group in _groups(job.user, job.name, job.gpus):
            series = self.series.get(group)
            if series is not None:
                mean = series.mean_before(t)
                if mean is not None:
                    return mean
        return None


def _groups(user: str, name: str, gpus: int) -> list[_Group]:
    out = []
    for i, group in enumerate(_GROUPS):
        if i < _NEEDS_USER and not user:
            continue
        if i < _NEEDS_NAME and not name:
            continue
        out.append(group(user, name, gpus))
    return out
