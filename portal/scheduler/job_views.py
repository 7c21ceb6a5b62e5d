"""The core's view of every job in the system, kept between rounds and brought up to date incrementally.

A round at 50,000 pending jobs used to load each as a model instance with its tenant and user (3.5 s of a 3.7 s
round). Most of a job never changes once it is submitted (:class:`~portal.jobs.round_rows.JobFixedRow`), and what
does change (state, attempt, start, requeue time, service) is a handful of numbers. So each round reads only those
numbers for the active jobs (:func:`~portal.jobs.round_rows.active_job_rows`), and rebuilds a job's
:class:`JobView` only when they differ from last time; the fixed columns are read once per job, and the GPUs of a
running job are read every round (one query: a gang rank that exited frees its GPUs while the others run).

Running jobs' views are time-independent: they carry ``service_at`` (the start of the current run), and the core
extrapolates their service to any ``now``. Kept per worker process, under a lock; every worker derives the same
views from the same rows, so it does not matter which one runs a round. Rebuilt from scratch every
:data:`FULL_REFRESH` seconds as a safety net.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

from portal.jobs.round_rows import ActiveJobRow, JobFixedRow, active_job_rows, job_fixed_rows, jobs_held_gpus
from scheduling.core.model import GpuSlot, JobView
from scheduling.core.states import JobState

#: Seconds after which the kept views are dropped and read again in full (monotonic clock, not the round's).
FULL_REFRESH = 600.0


@dataclass
class _Kept:
    fixed: dict[int, JobFixedRow] = field(default_factory=dict)
    views: dict[int, tuple[ActiveJobRow, JobView]] = field(default_factory=dict)
    since: float = field(default_factory=time.monotonic)


_kept = _Kept()
_lock = threading.Lock()


def _view(fixed: JobFixedRow, row: ActiveJobRow, slots: tuple[GpuSlot, ...]) -> JobView:
    pk, state, _, started_at, queued, attained, resize_to = row
    running = state == JobState.RUNNING.value
    started = started_at if running else None
    elastic = fixed.max_gpus is not None
    # An elastic job (issue #19) is as big as what it holds, or what its next attempt asks for.
    size = (len(slots) if running else resize_to) if elastic else None
    return JobView(
        id=pk,
        tenant=fixed.tenant,
        user=fixed.user,
        gpus=size or fixed.gpus,
        min_gpus=fixed.gpus if elastic else None,
        max_gpus=fixed.max_gpus,
        submit_time=fixed.submitted,
        state=JobState(state),
        allocation=slots if running else (),
        attained_service=attained,
        executed_time=attained / fixed.gpus,
        last_started=started,
        last_queued=queued if queued is not None else fixed.submitted,
        name=fixed.name,
        # A running job's service grows from the start of its run; with no start recorded, it is taken as of now.
        service_at=started,
        time_limit=float(fixed.time_limit) if fixed.time_limit is not None else None,
    )


def active_job_views() -> list[JobView]:
    """Every pending and running job as the core sees it, oldest submission first (the queue's order).

    Three queries at most: the changing columns of all active jobs, the fixed columns of jobs seen for the first
    time, and the GPUs running jobs hold.
    """
    global _kept
    with _lock:
        if time.monotonic() - _kept.since > FULL_REFRESH:
            _kept = _Kept()
        rows = active_job_rows()
        unknown = [row[0] for row in rows if row[0] not in _kept.fixed]
        if unknown:
            _kept.fixed.update((f.pk, f) for f in job_fixed_rows(job_ids=unknown))
        running = [row[0] for row in rows if row[1] == JobState.RUNNING.value]
        slots: dict[int, list[GpuSlot]] = defaultdict(list)
        for job_id, node_name, gpu_id in jobs_held_gpus(job_ids=running) if running else ():
            slots[job_id].append(GpuSlot(node=node_name, gpu=gpu_id))
        no_slots: tuple[GpuSlot, ...] = ()
        for row in rows:
            pk = row[0]
            held = tuple(sorted(slots[pk], key=lambda s: (s.node, s.gpu))) if pk in slots else no_slots
            kept = _kept.views.get(pk)
            if kept is None or kept[0] != row or kept[1].allocation != held:
                _kept.views[pk] = (row, _view(_kept.fixed[pk], row, held))
        active = {row[0] for row in rows}
        for gone in [pk for pk in _kept.views if pk not in active]:
            del _kept.views[gone]
            _kept.fixed.pop(gone, None)
        views = [_kept.views[row[0]][1] for row in rows]
    views.sort(key=lambda v: (v.submit_time, v.id))
    return views


def forget_job_views() -> None:
    """Drop the kept views (tests that rewrite rows behind the services' back)."""
    global _kept
    with _lock:
        _kept = _Kept()
