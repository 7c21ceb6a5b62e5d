"""First-in-first-out, strict and with backfill.

Strict FIFO is what YARN's capacity scheduler (and the Philly cluster it ran) does per queue: the oldest job waits
for its whole gang and every later job waits behind it, however small. It is the live default because users can
predict it, and the baseline every other policy is measured against.
"""

from __future__ import annotations

from collections.abc import Iterable
from operator import attrgetter

from scheduling.core.model import JobView
from scheduling.core.policies.base import Key, Policy

_by_submit = attrgetter("submit_time")


class Fifo(Policy):
    """Oldest submission first; the head of the queue blocks everyone behind it (head-of-line blocking)."""

    name = "fifo"
    head_of_line = True

    def key(self, job: JobView, now: float) -> Key:
        return (job.submit_time,)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        return sorted(jobs, key=_by_submit)  # C-level key: this runs on every live round


class FifoBackfill(Fifo):
    """FIFO order, but a job that does not fit is skipped so later, smaller jobs use the idle GPUs. Starvation of
    big jobs is possible; it is the price of work conservation."""

    name = "fifo-backfill"
    head_of_line = False
