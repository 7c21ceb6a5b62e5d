"""The share round (issue #17): place pending shares on shared GPUs, after the whole-GPU decision, in the same
transaction and under the same lease.

Shares never enter ``decide``'s snapshot and shared GPUs are never among its free GPUs, so the two kinds of work
never meet on a GPU. This module reads the shared GPUs and their clients through the jobs and nodes selectors,
turns them into the core's frozen values (:mod:`scheduling.core.sharing`), runs the placer named by
``CORRAL_SHARE_PLACER`` (:mod:`scheduling.core.share_placement`: matching by default), and writes the starts and
every waiting share's reason through the jobs' share services.

Caps count a share as its fraction: a tenant with a cap of 2 GPUs runs eight 0.25 shares, or one whole GPU and
four. Shares that a cap holds back, culprits of MPS faults, and a previous attempt still stopping are left out
before placement; the rest go to the placer in queue order.

Dynamic SM allocation: on a GPU with an online client, the GPU's measured utilization since that client started
(mean over ``CORRAL_SHARE_LOAD_WINDOW``, telemetry's :func:`~portal.telemetry.selectors.recent_gpu_util`) is
passed as the client's load, so a lightly loaded online job leaves its offline neighbours more compute (up to what
the slowdown budget allows) and the matching's benefit weighs the real load. Without a reading in the window
(no telemetry, a silent agent, a client that just started) the online client counts as its whole share: the safe
side.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings

from portal.jobs.share_selectors import PendingShare, gpu_use_by_user, pending_shares, share_holds, whole_gpu_holders
from portal.jobs.share_services import ShareWait, gib, job_start_share, jobs_set_share_wait_reasons
from portal.nodes.models import GpuHealth, Node
from portal.nodes.selectors import GpuInventoryRow, gpus_present_on
from portal.scheduler.selectors import LiveSnapshot
from portal.telemetry.selectors import recent_gpu_util
from scheduling.core.model import TenantLimits
from scheduling.core.share_placement import resolve_placer
from scheduling.core.sharing import (
    DEFAULT_POLICY,
    MIB,
    ShareDemand,
    SharedGpu,
    SharedGpuState,
    ShareRefusal,
    ShareTenant,
    WorkloadClass,
    why_not,
)

ACTOR = "scheduler"
_EPS = 1e-9
#: Waiting shares whose reason names the refusals GPU by GPU (the rest of a long queue hear the short reason).
DETAILED_REASONS = 200

_REFUSAL_WORDS = {
    ShareRefusal.SHARING_OFF: "not shared",
    ShareRefusal.WHOLE_GPU_HELD: "held by a whole-GPU job",
    ShareRefusal.TOO_MANY_CLIENTS: "at their client limit",
    ShareRefusal.NO_MEMORY: "short of memory",
    ShareRefusal.ONLINE_TAKEN: "already running an online share",
    ShareRefusal.NO_GUARANTEED_COMPUTE: "short of guaranteed compute",
    ShareRefusal.NO_COMPUTE: "short of compute",
    ShareRefusal.ONLINE_PROTECTED: "protecting their online share",
}


@dataclass(frozen=True, slots=True)
class _Slot:
    """What the applier needs about a shared GPU the placer saw."""

    row: GpuInventoryRow
    node: Node


def shared_gpu_states(live: LiveSnapshot, now: float) -> tuple[list[SharedGpuState], list[_Slot]]:
    """The shared GPUs that may take a new share now (healthy, on a node that is up), with their clients and, on a
    GPU with an online client, that client's measured load (:func:`_online_loads`)."""
    nodes = {n.pk: n for n in live.nodes_by_name.values()}
    holds = defaultdict(list)
    for hold in share_holds():
        holds[hold.gpu_id].append(hold)
    whole = whole_gpu_holders()
    found: list[tuple[SharedGpu, tuple[ShareTenant, ...], _Slot]] = []
    for row in gpus_present_on(nodes=list(nodes.values())):
        node = nodes[row.node_id]
        if not row.shared or row.health != GpuHealth.HEALTHY or not node.takes_new_work:
            continue
        try:
            gpu = SharedGpu(
                node=node.name, gpu=row.gpu_id, memory_bytes=row.memory_mb * MIB, max_clients=row.max_clients
            )
        except ValueError:  # memory unknown or below the driver's reserve; max_clients outside MPS's range
            continue
        tenants = tuple(
            ShareTenant(
                job_id=h.job_id,
                workload_class=WorkloadClass(h.workload_class),
                fraction=h.fraction,
                grant=h.compute_percent / 100,
                memory_bytes=h.memory_bytes,
                started=h.started,
            )
            for h in holds[row.gpu_id]
        )
        found.append((gpu, tenants, _Slot(row, node)))
    loads = _online_loads({slot.row.gpu_id: tenants for _, tenants, slot in found}, now)
    states = [
        SharedGpuState(
            gpu=gpu, tenants=tenants, whole_holder=whole.get(slot.row.gpu_id), online_load=loads.get(slot.row.gpu_id)
        )
        for gpu, tenants, slot in found
    ]
    return states, [slot for _, _, slot in found]


def share_demand(share: PendingShare) -> ShareDemand:
    """The core's view of a pending share."""
    return ShareDemand(
        job_id=share.job_id,
        gpu_fraction=share.fraction,
        workload_class=WorkloadClass(share.workload_class),
        gpu_memory_bytes=share.memory_bytes,
        evictions=share.evictions,
    )


def _online_loads(tenants_by_gpu: dict[int, tuple[ShareTenant, ...]], now: float) -> dict[int, float]:
    """GPU id -> its online client's measured load, a fraction of the whole GPU as the core's rule takes it, for
    the GPUs with an online client and a reading since it started (the others are left out: None, its whole share).

    The reading is the GPU's mean utilization over ``CORRAL_SHARE_LOAD_WINDOW``, which overstates the online
    client's own load on both counts it can be wrong: it includes the offline neighbours' work, and NVML's
    utilization is the time some kernel ran, not the part of the SMs it used. Both errors hold more compute back
    for the online client, never less, so offline work never gets room the online side actually needs. One query."""
    since = {
        gpu_id: datetime.fromtimestamp(online.started, tz=UTC)
        for gpu_id, tenants in tenants_by_gpu.items()
        if (online := next((t for t in tenants if t.is_online), None)) is not None
    }
    if not since:
        return {}
    util = recent_gpu_util(gpu_ids=since, now=datetime.fromtimestamp(now, tz=UTC), not_before=since)
    return {gpu_id: min(1.0, max(0.0, u / 100.0)) for gpu_id, u in util.items() if u is not None}


def _cap_reason(
    share: PendingShare, limits: TenantLimits, tenant_use: float, user_use: float
) -> tuple[ShareWait, str] | None:
    if limits.gpu_cap is not None and tenant_use + share.fraction > limits.gpu_cap + _EPS:
        left = max(0.0, limits.gpu_cap - tenant_use)
        detail = f"needs {share.fraction:g} GPU; tenant {share.tenant} has {left:g} of its cap of {limits.gpu_cap} left"
        return ShareWait.TENANT_CAP_REACHED, detail
    if limits.user_cap is not None and user_use + share.fraction > limits.user_cap + _EPS:
        left = max(0.0, limits.user_cap - user_use)
        detail = f"needs {share.fraction:g} GPU; user {share.user} has {left:g} of their cap of {limits.user_cap} left"
        return ShareWait.USER_CAP_REACHED, detail
    return None


def _no_room(states: list[SharedGpuState], demand: ShareDemand) -> str:
    """Why no shared GPU takes ``demand`` now, counted per refusal: "2 GPUs short of memory, 1 at their ..."."""
    counts = Counter(why_not(state, demand, DEFAULT_POLICY) for state in states)
    counts.pop(None, None)  # fits now: placed next round, or passed over by the placer for a better pair
    if not counts:
        return "other shares were placed first"
    parts = [f"{n} {'GPU' if n == 1 else 'GPUs'} {_REFUSAL_WORDS[r]}" for r, n in counts.most_common() if r is not None]
    return ", ".join(parts)


def share_round(*, live: LiveSnapshot, now: float) -> int:
    """Place pending shares on shared GPUs and write why the others wait; returns how many started.

    Precondition: inside the round's transaction, holding the scheduler lease, after the whole-GPU decision was
    applied (its starts count against the caps here)."""
    pending = [p for p in pending_shares() if p.job_id not in live.awaiting]
    if not pending:
        return 0
    reasons: dict[int, tuple[ShareWait, str]] = {}
    use = gpu_use_by_user()
    tenant_use: dict[str, float] = defaultdict(float)
    for (tenant, _), n in use.items():
        tenant_use[tenant] += n
    no_limits = TenantLimits()
    admitted: list[PendingShare] = []
    for share in pending:
        if share.culprit:
            reasons[share.job_id] = (ShareWait.MPS_CULPRIT, f"{share.suspect_faults} faults named it")
            continue
        key = (share.tenant, share.user)
        capped = _cap_reason(
            share, live.snapshot.tenants.get(share.tenant, no_limits), tenant_use[share.tenant], use.get(key, 0.0)
        )
        if capped is not None:
            reasons[share.job_id] = capped
            continue
        admitted.append(share)
        tenant_use[share.tenant] += share.fraction
        use[key] = use.get(key, 0.0) + share.fraction
    states, slots = shared_gpu_states(live, now)
    started = 0
    if not states:
        reasons.update((s.job_id, (ShareWait.NO_SHARED_GPU, "")) for s in admitted)
    else:
        demands = [share_demand(s) for s in admitted]
        placer = resolve_placer(settings.CORRAL_SHARE_PLACER)
        result = placer(states, demands, now, DEFAULT_POLICY)
        placed: set[int] = set()
        for p in result.placements:
            slot = slots[p.index]
            ok = job_start_share(
                job_id=int(p.job_id),
                node=slot.node,
                gpu_id=slot.row.gpu_id,
                index=slot.row.index,
                compute_percent=max(1, round(p.grant * 100)),
                memory_bytes=p.memory_bytes,
                actor=ACTOR,
            )
            if ok:
                placed.add(int(p.job_id))
                started += 1
        after = list(result.gpus)
        for n, demand in enumerate(d for d in demands if int(d.job_id) not in placed):
            detail = _no_room(after, demand) if n < DETAILED_REASONS else ""
            if demand.gpu_memory_bytes is not None and detail == "":
                detail = f"asks for {gib(demand.gpu_memory_bytes)}"
            reasons[int(demand.job_id)] = (ShareWait.NO_ROOM, detail)
    jobs_set_share_wait_reasons(reasons=reasons)
    return started
