"""Build the scheduling core's :class:`Snapshot` from the database, in a fixed number of queries.

It reads only through the selectors of the apps that own the rows (nodes, jobs, tenants). Only this module and
:mod:`portal.scheduler.apply` translate between Django rows and the core's frozen values; the core itself never
sees a model instance.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from portal.jobs.array_selectors import array_tasks_held_back
from portal.jobs.selectors import jobs_awaiting_previous_attempt, stopping_holds
from portal.jobs.share_selectors import gpu_use_by_user
from portal.nodes.models import GpuHealth, Node, NodePower
from portal.nodes.selectors import gpu_holders, gpus_present_on, nodes_not_down
from portal.scheduler.job_views import active_job_views
from portal.tenants.selectors import tenant_limits, usage_history
from scheduling.core.model import HeldGpus, NodeView, Snapshot


@dataclass(frozen=True, slots=True)
class LiveSnapshot:
    """The core's snapshot plus what the applier needs to turn ids back into rows."""

    snapshot: Snapshot
    nodes_by_name: dict[str, Node]
    gpu_index: dict[int, int]  # gpu pk -> NVML index on its node
    #: Pending jobs left out of the snapshot: a rank of their previous attempt may still be alive.
    awaiting: frozenset[int] = frozenset()
    #: GPUs being freed: held by attempts that are over, on nodes that are up (their processes are stopping).
    freeing: int = 0
    #: Pending array tasks left out of the snapshot by their array's %N limit, with the detail of their reason.
    held_back: Mapping[int, str] = field(default_factory=dict)
    #: GPUs of nodes waking up (energy saving powered them down; issue #19): offered to no job until their agents
    #: report again. Counted from the rows the snapshot reads anyway, so a round pays no query for it.
    waking: int = 0


def build_snapshot(*, now: datetime, fair_share: bool = False) -> LiveSnapshot:
    """Read nodes, free GPUs, pending and running jobs and tenant quotas as of ``now`` (the caller's clock).

    Soft-cordoned GPUs (predicted to fail) are offered as short-only: the placement built from
    ``CORRAL_CORDON_MAX_TIME_LIMIT`` gives them only to jobs with a time limit at most that long. Unhealthy GPUs
    are never offered. ``fair_share`` (for policies with the quota layer) adds the tenants' decayed usage, unless
    ``CORRAL_FAIR_SHARE_HALF_LIFE_HOURS`` is 0.

    The fence (issue #15): GPUs held by attempts that are over are not free and go into ``Snapshot.held``, so they
    count against caps and guarantees; a pending job whose previous attempt may still run on a node that is up is
    left out of the round (``LiveSnapshot.awaiting``), so it cannot start a second copy of itself.
    """
    nodes = nodes_not_down()
    taken = gpu_holders()
    free: dict[int, list[int]] = defaultdict(list)
    cordoned: dict[int, list[int]] = defaultdict(list)
    totals: dict[int, int] = defaultdict(int)
    gpu_index: dict[int, int] = {}
    waking_nodes = {n.pk for n in nodes if n.power == NodePower.WAKING}
    waking = 0
    for gpu in gpus_present_on(nodes=nodes):
        waking += gpu.node_id in waking_nodes
        totals[gpu.node_id] += not gpu.shared
        gpu_index[gpu.gpu_id] = gpu.index
        if gpu.health == GpuHealth.CORDONED:
            cordoned[gpu.node_id].append(gpu.gpu_id)
        elif gpu.health != GpuHealth.HEALTHY:
            continue
        if gpu.gpu_id not in taken and not gpu.shared:  # a shared GPU takes shares only (portal.scheduler.shares)
            free[gpu.node_id].append(gpu.gpu_id)
    node_views = tuple(
        NodeView(
            name=n.name,
            total_gpus=totals[n.pk],
            free_gpus=tuple(sorted(free[n.pk], key=gpu_index.__getitem__)),
            rack=n.rack,
            schedulable=n.takes_new_work,
            short_only=tuple(sorted(cordoned[n.pk])),
        )
        for n in nodes
    )
    holds = stopping_holds()
    awaiting = frozenset(jobs_awaiting_previous_attempt())
    held_back = array_tasks_held_back()
    job_views = tuple(view for view in active_job_views() if view.id not in awaiting and view.id not in held_back)
    return LiveSnapshot(
        snapshot=Snapshot(
            nodes=node_views,
            jobs=job_views,
            tenants=tenant_limits(),
            usage=usage_history(now=now) if fair_share else None,
            held=(
                *(HeldGpus(h.tenant, h.user, h.gpus) for h in holds),
                # Shares (issue #17) count against whole-GPU jobs' caps as their fractions summed, rounded up: the
                # core counts whole GPUs. The share round counts them exactly (portal.scheduler.shares).
                *(HeldGpus(t, u, math.ceil(n - 1e-9)) for (t, u), n in gpu_use_by_user(shares_only=True).items()),
            ),
        ),
        nodes_by_name={n.name: n for n in nodes},
        gpu_index=gpu_index,
        awaiting=awaiting,
        held_back=held_back,
        freeing=sum(h.gpus for h in holds if not h.fenced),
        waking=waking,
    )
