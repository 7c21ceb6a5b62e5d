"""Reads that pair a job's non-zero exit with a fatal XID on its GPUs: was the job killed by its hardware?

A job's process often dies *because* its GPU failed. The agent reports the exit in its heartbeat, while the XID
travels with the telemetry batches, so either can reach the portal first (issue #4). Both orders end here: an exit
and a fatal XID belong together when the XID hit one of the GPUs the job's latest attempt held, within
``CORRAL_XID_EXIT_WINDOW`` seconds of the exit, on either side. Either side, because the two times come from two
clocks: the XID is stamped by the node when its probe saw it (which can be a sampling period after the fault), the
exit by the portal when the heartbeat carrying it arrived.

Application XIDs (13, 31, 43, 45, 68) never explain an exit: they are the job's own doing. The services that act on
these answers are ``portal.jobs.services.job_task_exited`` (XID first) and
``portal.telemetry.services.health.jobs_reopen_for_xid`` with ``portal.jobs.services.job_reopen_after_hardware_fault``
(exit first).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, Q

from portal.jobs.models import Allocation
from portal.telemetry.models import XidRecord
from scheduling.core.states import JobState
from telemetry.xid import FATAL_XIDS, describe


@dataclass(frozen=True, slots=True)
class XidBlame:
    """A fatal XID that explains an exit: its code, the GPU (``node/gpuN``) and when the node saw it."""

    xid: int
    gpu: str
    at: datetime

    def words(self) -> str:
        return f"{describe(self.xid)} on {self.gpu}"

    def gap(self, exited_at: datetime) -> str:
        """When an exit at ``exited_at`` came relative to this XID, e.g. ``"2.0 s after"``, for event reasons."""
        seconds = (exited_at - self.at).total_seconds()
        return f"{abs(seconds):.1f} s {'after' if seconds >= 0 else 'before'}"


def xid_exit_window() -> timedelta:
    """``CORRAL_XID_EXIT_WINDOW`` (seconds, default 30), read at call time."""
    return timedelta(seconds=float(getattr(settings, "CORRAL_XID_EXIT_WINDOW", 30.0)))


def fatal_xid_near_exit(*, job_id: int, attempt: int, exited_at: datetime) -> XidBlame | None:
    """The earliest fatal XID recorded on any GPU that ``attempt`` of the job held, within the window around
    ``exited_at``; None when there is none. One query."""
    window = xid_exit_window()
    record = (
        XidRecord.objects.filter(
            gpu__in=Allocation.objects.filter(job_id=job_id, attempt=attempt).values("gpu_id"),
            xid__in=FATAL_XIDS,
            at__gte=exited_at - window,
            at__lte=exited_at + window,
        )
        .select_related("gpu__node")
        .order_by("at", "pk")
        .first()
    )
    return None if record is None else XidBlame(xid=record.xid, gpu=str(record.gpu), at=record.at)


def jobs_an_xid_may_have_killed(*, gpu_id: int, at: datetime, now: datetime) -> list[int]:
    """Ids of jobs whose latest attempt held ``gpu_id`` and that a fatal XID at ``at`` there may have killed
    although their exit came first: failed within the window around ``at`` and no longer ago than the window
    (``now``), or still running (a heartbeat may be failing them this very moment). In id order, the lock order.

    A superset, read without locks: the caller locks each job, waits out any heartbeat settling it, and judges the
    job again (``job_reopen_after_hardware_fault``). One query.
    """
    window = xid_exit_window()
    recently_failed = Q(
        job__state=JobState.FAILED.value,
        job__finished_at__gte=max(at, now) - window,
        job__finished_at__lte=at + window,
    )
    return sorted(
        set(
            Allocation.objects.filter(gpu_id=gpu_id, attempt=F("job__attempt"))
            .filter(recently_failed | Q(job__state=JobState.RUNNING.value))
            .values_list("job_id", flat=True)
        )
    )
