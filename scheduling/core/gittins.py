"""The Gittins index of a job's attained service, from an empirical distribution of finished jobs' service.

For a job that has received service ``a`` (GPU-seconds) and a further investment ``d``, the ratio

    P(S <= a + d | S > a) / E[min(S, a + d) - a | S > a]

is the chance of finishing per GPU-second invested; the Gittins index is its best value over ``d``. Serving the
highest index first minimizes mean completion time for a known service *distribution* without knowing any one
job's size (Gittins; Aalto et al. for M/G/1). Tiresias (NSDI'19) applies it in two dimensions (GPUs x time).

Service levels are discretized on a geometric grid, so a running job's index changes only when its service
crosses a grid point (few preemption checks) and the whole table costs O(grid^2 log n) to rebuild.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Sequence
from itertools import accumulate


def geometric_grid(first: float = 60.0, ratio: float = 1.5, last: float = 1e9) -> tuple[float, ...]:
    """``0, first, first*ratio, ...`` up to ``last``: service levels at which the index is evaluated."""
    if first <= 0 or ratio <= 1 or last <= first:
        raise ValueError("need 0 < first < last and ratio > 1")
    points = [0.0]
    x = first
    while x < last:
        points.append(x)
        x *= ratio
    points.append(last)
    return tuple(points)


class ServiceDistribution:
    """Finished jobs' service samples and the Gittins index table over a fixed grid.

    ``add`` is cheap; ``refit`` rebuilds the table and is called by the policy on a geometric schedule, so the
    total cost over a whole trace stays small while the estimate keeps up with what has been learned.
    """

    __slots__ = ("grid", "samples", "table", "fitted_on")

    def __init__(self, grid: Sequence[float]) -> None:
        self.grid = tuple(grid)
        self.samples: list[float] = []
        self.table: tuple[float, ...] = tuple(0.0 for _ in self.grid)
        self.fitted_on = 0

    def __len__(self) -> int:
        return len(self.samples)

    def add(self, service: float) -> None:
        insort(self.samples, service)

    def refit(self) -> None:
        samples = self.samples
        self.fitted_on = len(samples)
        if not samples:
            return
        prefix = [0.0, *accumulate(samples)]
        n = len(samples)
        grid = self.grid
        # For each grid level: how many samples are <= it, and their sum.
        below = [bisect_right(samples, g) for g in grid]
        table = []
        for i, a in enumerate(grid):
            lo = below[i]
            if lo >= n:
                table.append(0.0)  # beyond every job seen: nothing is known, lowest priority
                continue
            best = 0.0
            for j in range(i + 1, len(grid)):
                b = grid[j]
                hi = below[j]
                finished = hi - lo
                if finished == 0:
                    continue
                # Expected GPU-seconds invested up to b: finished jobs' (s - a), survivors' (b - a).
                cost = (prefix[hi] - prefix[lo]) - finished * a + (n - hi) * (b - a)
                if cost > 0:
                    best = max(best, finished / cost)
                if hi >= n:
                    break
            table.append(best)
        self.table = tuple(table)

    def level(self, service: float) -> int:
        """Index of the grid cell holding ``service``."""
        return bisect_right(self.grid, service) - 1

    def index(self, service: float) -> float:
        return self.table[self.level(service)]
