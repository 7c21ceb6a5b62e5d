"""GPU space-sharing with MPS (issue #17): what a share asks for, what a shared GPU holds, and the one placement rule.

A *share* is a job that asks for part of one GPU: a compute fraction (an MPS thread limit,
``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``), a memory limit (``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``) and a class. *Online*
work (inference services, notebooks) is latency-critical and protected; *offline* work (training, evaluation) is
best-effort unless it is marked guaranteed: it may start with less compute than it asked for, and it is evicted
(and requeued, never failed) when the online side needs the room back.

**Guaranteed** work is every online share and every offline share marked ``guaranteed``: its compute fraction is
reserved whatever the neighbours do, so the guaranteed fractions on one GPU never add up to more than 100 %.
**Best-effort** offline work gets a *grant*, the thread limit it starts with: what it asked for, or less when that
is all the room there is (not below ``squeeze_floor`` of its ask). MPS fixes a client's limits when it starts, so a
grant never changes afterwards; when the online side's load rises, the offline clients that no longer fit are
evicted (:func:`evictions_for_load`).

Every placer (:mod:`scheduling.core.share_placement`), the simulator and the live loop decide whether a share may
go on a GPU through :func:`fits` (:func:`why_not` says why not), and nothing else: the rule exists once. It checks,
for the GPU with the new client added:

1. the GPU accepts shares, and no whole-GPU job holds it (:func:`free_for_whole` is the other direction);
2. clients ≤ the GPU's ``max_clients`` (48 on Volta and later);
3. every client's memory limit + the driver's reserve ≤ the GPU's memory (MPS enforces each limit, so the sum of
   limits is what can ever be allocated);
4. at most one online client;
5. guaranteed fractions ≤ 100 %;
6. compute in use ≤ 100 %, counting the online client at its measured load plus ``headroom`` (at most its share),
   guaranteed offline clients at their share and best-effort clients at their grant;
7. offline compute next to an online client ≤ what the interference model lets it cost the online client
   (``slowdown_budget``: 5 % by default, about 17.5 % of the GPU on the H100 calibration).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum

from scheduling.core.interference import H100, InterferenceModel
from scheduling.core.model import JobId

MIB = 1 << 20
GIB = 1 << 30
#: Memory a shared GPU keeps back for the driver and the MPS server itself (an admin may set another).
DEFAULT_RESERVE_BYTES = 1 * GIB
#: Clients one MPS server serves per GPU on Volta and later (NVIDIA's MPS documentation). Older GPUs have no
#: per-client compute or memory limit at all, so they never accept shares.
MAX_CLIENTS_VOLTA = 48
#: Compute grants are whole percent: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` is what the client is started with.
GRANT_STEP = 0.01
_EPS = 1e-9


class WorkloadClass(StrEnum):
    """Online work is protected; offline work may be squeezed or evicted (and is then requeued, never failed)."""

    ONLINE = "online"
    OFFLINE = "offline"


class ShareRefusal(StrEnum):
    """Why a share does not fit a GPU: each value names the rule (the module docstring's list) it would break."""

    SHARING_OFF = "sharing_off"
    WHOLE_GPU_HELD = "whole_gpu_held"
    TOO_MANY_CLIENTS = "too_many_clients"
    NO_MEMORY = "no_memory"
    ONLINE_TAKEN = "online_taken"
    NO_GUARANTEED_COMPUTE = "no_guaranteed_compute"
    NO_COMPUTE = "no_compute"
    ONLINE_PROTECTED = "online_protected"


@dataclass(frozen=True, slots=True)
class SharedGpu:
    """What an admin says about one GPU: its memory, whether it accepts shares and how many clients at most."""

    node: str
    gpu: int
    memory_bytes: int
    sharing: bool = True
    max_clients: int = MAX_CLIENTS_VOLTA
    reserve_bytes: int = DEFAULT_RESERVE_BYTES

    def __post_init__(self) -> None:
        if self.memory_bytes <= self.reserve_bytes:
            raise ValueError("a shared GPU needs more memory than its reserve")
        if not 1 <= self.max_clients <= MAX_CLIENTS_VOLTA:
            raise ValueError(f"max_clients must be 1..{MAX_CLIENTS_VOLTA}, not {self.max_clients}")

    @property
    def usable_bytes(self) -> int:
        """Memory the clients' limits may add up to."""
        return self.memory_bytes - self.reserve_bytes


@dataclass(frozen=True, slots=True)
class ShareDemand:
    """A job asking for part of one GPU. ``gpu_memory_bytes`` None means the default: the same fraction of the
    GPU's usable memory (:func:`memory_limit`). ``guaranteed`` only matters for offline work (online is always
    guaranteed). ``evictions`` is the job's history: how many times it was evicted before (placement keeps a
    job that keeps being evicted away from risky GPUs)."""

    job_id: JobId
    gpu_fraction: float
    workload_class: WorkloadClass = WorkloadClass.OFFLINE
    gpu_memory_bytes: int | None = None
    guaranteed: bool = False
    evictions: int = 0

    def __post_init__(self) -> None:
        if not (0 < self.gpu_fraction < 1):  # also refuses nan
            raise ValueError(f"gpu_fraction must be in (0, 1), not {self.gpu_fraction}")
        if self.gpu_memory_bytes is not None and self.gpu_memory_bytes <= 0:
            raise ValueError("gpu_memory_bytes must be positive")

    @property
    def is_guaranteed(self) -> bool:
        return self.workload_class == WorkloadClass.ONLINE or self.guaranteed


@dataclass(frozen=True, slots=True)
class ShareTenant:
    """A client running on a shared GPU, with the limits it was started with (they never change)."""

    job_id: JobId
    workload_class: WorkloadClass
    fraction: float  # what it asked for
    grant: float  # its MPS thread limit: ``fraction`` for guaranteed work, at most that for best-effort work
    memory_bytes: int
    guaranteed: bool = False
    started: float = 0.0

    @property
    def is_online(self) -> bool:
        return self.workload_class == WorkloadClass.ONLINE

    @property
    def is_guaranteed(self) -> bool:
        return self.is_online or self.guaranteed

    @property
    def thread_percentage(self) -> int:
        """``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` for this client."""
        return max(1, round(self.grant * 100))


@dataclass(frozen=True, slots=True)
class SharedGpuState:
    """One GPU as a sharing round sees it: its capacity, its clients, whether a whole-GPU job holds it, and the
    online client's measured load (a fraction of the whole GPU, from telemetry; None: not measured yet, which
    counts as its full share)."""

    gpu: SharedGpu
    tenants: tuple[ShareTenant, ...] = ()
    whole_holder: JobId | None = None
    online_load: float | None = None

    @property
    def online(self) -> ShareTenant | None:
        return next((t for t in self.tenants if t.is_online), None)

    @property
    def memory_used(self) -> int:
        return sum(t.memory_bytes for t in self.tenants)

    @property
    def guaranteed_compute(self) -> float:
        return sum(t.fraction for t in self.tenants if t.is_guaranteed)

    def with_tenant(self, tenant: ShareTenant) -> SharedGpuState:
        return replace(self, tenants=(*self.tenants, tenant))

    def without(self, job_ids: Iterable[JobId]) -> SharedGpuState:
        gone = set(job_ids)
        return replace(self, tenants=tuple(t for t in self.tenants if t.job_id not in gone))


@dataclass(frozen=True, slots=True)
class SharingPolicy:
    """The knobs of the rule. ``headroom``: compute kept free above the online client's measured load for its
    bursts. ``slowdown_budget``: how much slower, at most, offline neighbours may make an online client (by the
    interference ``model``). ``squeeze_floor``: the least part of its ask a best-effort client may start with."""

    headroom: float = 0.1
    slowdown_budget: float = 0.05
    squeeze_floor: float = 0.5
    model: InterferenceModel = field(default=H100)

    def __post_init__(self) -> None:
        for name in ("headroom", "slowdown_budget"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in [0, 1]")
        if not 0 < self.squeeze_floor <= 1:
            raise ValueError("squeeze_floor must be in (0, 1]")


DEFAULT_POLICY = SharingPolicy()


def memory_limit(demand: ShareDemand, gpu: SharedGpu) -> int:
    """The memory limit a share gets on ``gpu``: what it asked for, else its compute fraction of the usable
    memory (rounded down to a MiB, as ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` is written in MiB here)."""
    if demand.gpu_memory_bytes is not None:
        return demand.gpu_memory_bytes
    return int(demand.gpu_fraction * gpu.usable_bytes) // MIB * MIB


def online_reserved(state: SharedGpuState, policy: SharingPolicy = DEFAULT_POLICY) -> float:
    """Compute held for the online client: its measured load plus headroom, never more than its share (MPS caps
    it there); its whole share while unmeasured; 0 without an online client."""
    online = state.online
    if online is None:
        return 0.0
    if state.online_load is None:
        return online.fraction
    return min(online.fraction, max(0.0, state.online_load) + policy.headroom)


def offline_capacity(state: SharedGpuState, policy: SharingPolicy = DEFAULT_POLICY) -> float:
    """The compute all offline clients together may hold (guaranteed shares and best-effort grants): what the
    online client leaves (rule 6), and next to an online client no more than the slowdown budget allows (rule 7)."""
    cap = 1.0 - online_reserved(state, policy)
    if state.online is not None:
        cap = min(cap, policy.model.max_neighbour_load(policy.slowdown_budget))
    return max(0.0, cap)


def offline_in_use(state: SharedGpuState) -> float:
    return sum(t.grant for t in state.tenants if not t.is_online)


def offline_room(state: SharedGpuState, policy: SharingPolicy = DEFAULT_POLICY) -> float:
    """Compute a new offline client could be granted now (dynamic SM allocation follows the online load)."""
    return max(0.0, offline_capacity(state, policy) - offline_in_use(state))


def grant_for(state: SharedGpuState, demand: ShareDemand, policy: SharingPolicy = DEFAULT_POLICY) -> float:
    """The thread limit ``demand`` would start with on this GPU now: its whole ask for guaranteed work; for
    best-effort work its ask or the room there is, in whole percent, whichever is less (0: none)."""
    if demand.is_guaranteed:
        return demand.gpu_fraction
    room = offline_room(state, policy)
    return math.floor(min(demand.gpu_fraction, room) / GRANT_STEP + _EPS) * GRANT_STEP


def tenant_for(
    state: SharedGpuState, demand: ShareDemand, *, started: float = 0.0, policy: SharingPolicy = DEFAULT_POLICY
) -> ShareTenant:
    """The client ``demand`` becomes on this GPU (call :func:`fits` first)."""
    return ShareTenant(
        job_id=demand.job_id,
        workload_class=demand.workload_class,
        fraction=demand.gpu_fraction,
        grant=grant_for(state, demand, policy),
        memory_bytes=memory_limit(demand, state.gpu),
        guaranteed=demand.guaranteed and demand.workload_class == WorkloadClass.OFFLINE,
        started=started,
    )


def violations(state: SharedGpuState, policy: SharingPolicy = DEFAULT_POLICY) -> list[ShareRefusal]:
    """Every rule ``state`` breaks (an empty list: it is a legal arrangement). :func:`why_not` asks this of the
    GPU with the new client added, so the rule for placing and the invariant a GPU keeps are the same code."""
    bad: list[ShareRefusal] = []
    if not state.tenants:
        return bad
    if not state.gpu.sharing:
        bad.append(ShareRefusal.SHARING_OFF)
    if state.whole_holder is not None:
        bad.append(ShareRefusal.WHOLE_GPU_HELD)
    if len(state.tenants) > state.gpu.max_clients:
        bad.append(ShareRefusal.TOO_MANY_CLIENTS)
    if state.memory_used > state.gpu.usable_bytes:
        bad.append(ShareRefusal.NO_MEMORY)
    if sum(t.is_online for t in state.tenants) > 1:
        bad.append(ShareRefusal.ONLINE_TAKEN)
    if state.guaranteed_compute > 1.0 + _EPS:
        bad.append(ShareRefusal.NO_GUARANTEED_COMPUTE)
    offline = offline_in_use(state)
    if online_reserved(state, policy) + offline > 1.0 + _EPS:
        bad.append(ShareRefusal.NO_COMPUTE)
    if state.online is not None and offline > policy.model.max_neighbour_load(policy.slowdown_budget) + _EPS:
        bad.append(ShareRefusal.ONLINE_PROTECTED)
    return bad


def why_not(state: SharedGpuState, demand: ShareDemand, policy: SharingPolicy = DEFAULT_POLICY) -> ShareRefusal | None:
    """The first rule placing ``demand`` on this GPU would break, or None when it fits."""
    if not state.gpu.sharing:
        return ShareRefusal.SHARING_OFF
    if state.whole_holder is not None:
        return ShareRefusal.WHOLE_GPU_HELD
    if demand.workload_class == WorkloadClass.ONLINE and state.online is not None:
        return ShareRefusal.ONLINE_TAKEN
    # Cheap refusals first (placers ask this for every waiting share and GPU); the full check below decides.
    if len(state.tenants) >= state.gpu.max_clients:
        return ShareRefusal.TOO_MANY_CLIENTS
    if state.memory_used + memory_limit(demand, state.gpu) > state.gpu.usable_bytes:
        return ShareRefusal.NO_MEMORY
    if demand.is_guaranteed:
        if state.guaranteed_compute + demand.gpu_fraction > 1.0 + _EPS:
            return ShareRefusal.NO_GUARANTEED_COMPUTE
    elif grant_for(state, demand, policy) < max(GRANT_STEP, policy.squeeze_floor * demand.gpu_fraction) - _EPS:
        return ShareRefusal.NO_COMPUTE
    tenant = tenant_for(state, demand, policy=policy)
    bad = violations(state.with_tenant(tenant), policy)
    return bad[0] if bad else None


#: What :func:`fits` reads of a share: its fraction, memory limit, class and guarantee (:func:`share_shape`).
Shape = tuple[float, int | None, WorkloadClass, bool]


def share_shape(demand: ShareDemand) -> Shape:
    """Two shares of one shape fit the same GPUs. Placing a share only ever adds a client to a GPU, so a shape that
    fits no GPU now fits none until a client leaves: the placers and the start forecast skip it rather than ask
    again for every waiting share of that shape (with 5,000 waiting shares and every shared GPU full, a round went
    from 2-3 s to milliseconds, and the forecast from over five minutes to under a second)."""
    return (demand.gpu_fraction, demand.gpu_memory_bytes, demand.workload_class, demand.guaranteed)


def fits(state: SharedGpuState, demand: ShareDemand, policy: SharingPolicy = DEFAULT_POLICY) -> bool:
    """Whether ``demand`` may start on this GPU now: the one rule every placer uses."""
    return why_not(state, demand, policy) is None


def free_for_whole(state: SharedGpuState) -> bool:
    """Whether a whole-GPU job may take this GPU: no whole-GPU job and no share holds it."""
    return state.whole_holder is None and not state.tenants


def evictions_for_load(
    state: SharedGpuState, online_load: float, policy: SharingPolicy = DEFAULT_POLICY
) -> tuple[JobId, ...]:
    """Which best-effort offline clients to evict when the online client's measured load becomes ``online_load``.

    MPS fixes a client's thread limit at start, so a client whose grant no longer fits cannot be shrunk: it is
    evicted (and requeued). The most recently started go first (they lose the least work), until the rest fit
    the offline capacity at the new load. Guaranteed clients are never evicted for load: their share is reserved.
    """
    measured = replace(state, online_load=online_load)
    excess = offline_in_use(measured) - offline_capacity(measured, policy)
    if excess <= _EPS:
        return ()
    out: list[JobId] = []
    best_effort = sorted((t for t in state.tenants if not t.is_guaranteed), key=lambda t: t.started, reverse=True)
    for t in best_effort:
        if excess <= _EPS:
            break
        out.append(t.job_id)
        excess -= t.grant
    return tuple(out)


def neighbour_load(state: SharedGpuState, job_id: JobId) -> float:
    """How much of the GPU ``job_id``'s neighbours keep busy: the online client at its measured load (its share
    when unmeasured), offline clients at their grant (training keeps its SMs busy)."""
    total = 0.0
    for t in state.tenants:
        if t.job_id == job_id:
            continue
        if t.is_online and state.online_load is not None:
            total += min(t.fraction, state.online_load)
        else:
            total += t.grant
    return min(1.0, total)
