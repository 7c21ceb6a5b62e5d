"""GPU accounting per tenant and per user inside one round: hard caps and guaranteed shares.

Caps (``TenantLimits.gpu_cap``, ``user_cap``) are hard: a job that would push its tenant or user past one waits
with a cap reason and is *skipped*, never a head-of-line blocker, so one tenant at its cap cannot stall the others.
Guarantees (``guaranteed_gpus``) are used by the quota layer (:class:`~scheduling.core.policies.quota.Quota`):
GPUs a tenant is not using may be borrowed, and are reclaimed when the owner wants them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from scheduling.core.model import HeldGpus, JobView, TenantLimits, Wait, WaitReason, gpu_count

_NO_LIMITS = TenantLimits()


class Ledger:
    """GPUs held per tenant and per (tenant, user) as a round hands them out."""

    __slots__ = ("limits", "tenant_used", "user_used", "active", "held")

    def __init__(self, limits: Mapping[str, TenantLimits], held: Iterable[HeldGpus] = ()) -> None:
        self.limits = limits
        self.tenant_used: dict[str, int] = {}
        self.user_used: dict[tuple[str, str], int] = {}
        # With no caps configured the ledger needs no bookkeeping at all: the common case stays free.
        self.active = any(lim.gpu_cap is not None or lim.user_cap is not None for lim in limits.values())
        #: GPUs per tenant held by attempts that are over; they count against caps and guarantees until freed.
        self.held: dict[str, int] = {}
        for h in held:
            self.held[h.tenant] = self.held.get(h.tenant, 0) + h.gpus
            if self.active:
                self.tenant_used[h.tenant] = self.tenant_used.get(h.tenant, 0) + h.gpus
                key = (h.tenant, h.user)
                self.user_used[key] = self.user_used.get(key, 0) + h.gpus

    def add(self, job: JobView) -> None:
        if not self.active:
            return
        self.tenant_used[job.tenant] = self.tenant_used.get(job.tenant, 0) + job.gpus
        key = (job.tenant, job.user)
        self.user_used[key] = self.user_used.get(key, 0) + job.gpus

    def remove(self, job: JobView) -> None:
        if not self.active:
            return
        self.tenant_used[job.tenant] -= job.gpus
        self.user_used[(job.tenant, job.user)] -= job.gpus

    def cap_wait(self, job: JobView) -> Wait | None:
        """The cap reason that keeps ``job`` from starting now, or None."""
        if not self.active:
            return None
        lim = self.limits.get(job.tenant, _NO_LIMITS)
        if lim.gpu_cap is not None:
            room = lim.gpu_cap - self.tenant_used.get(job.tenant, 0)
            if job.gpus > room:
                return _cap_wait(WaitReason.TENANT_CAP_REACHED, f"tenant {job.tenant}", job.gpus, room, lim.gpu_cap)
        if lim.user_cap is not None:
            room = lim.user_cap - self.user_used.get((job.tenant, job.user), 0)
            if job.gpus > room:
                return _cap_wait(WaitReason.USER_CAP_REACHED, f"user {job.user}", job.gpus, room, lim.user_cap)
        return None


@lru_cache(maxsize=4096)
def _cap_wait(reason: WaitReason, who: str, need: int, room: int, cap: int) -> Wait:
    # Cached: a tenant with thousands of queued jobs at its cap would otherwise build thousands of equal values.
    return Wait(reason, f"needs {gpu_count(need)}; {who} has {max(room, 0)} of its cap of {cap} left")


class Guarantees:
    """Tracks how much of each tenant's guaranteed share is in use, to split jobs into owners and borrowers."""

    __slots__ = ("limits", "used")

    def __init__(self, limits: Mapping[str, TenantLimits], held: Mapping[str, int] | None = None) -> None:
        self.limits = limits
        # GPUs still held by a tenant's attempts that are over use up its guarantee like running jobs do.
        self.used: dict[str, int] = dict(held or {})

    def claim(self, job: JobView) -> bool:
        """Count ``job`` against its tenant's guarantee. True when it fits inside the guarantee (an owner),
        False when it would borrow idle quota from others."""
        lim = self.limits.get(job.tenant, _NO_LIMITS)
        used = self.used.get(job.tenant, 0) + job.gpus
        if used > lim.guaranteed_gpus:
            return False  # a borrower does not use up the guarantee: a smaller later job may still fit inside it
        self.used[job.tenant] = used
        return True
