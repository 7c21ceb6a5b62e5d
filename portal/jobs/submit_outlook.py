"""What the submit form shows before a job is sent: per tenant the reader may submit to, its GPU cap and per-user
cap and the GPUs it and the reader hold now, and the cluster's GPUs, present and free. The refusals themselves
are ``portal.jobs.validation.check_fits``' (the one rule for the form, the API and the CLI); this only lets a
researcher see them coming. A selector: reads only, four queries whatever the number of tenants.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db.models import Count

from portal.jobs.models import Allocation
from portal.nodes.models import Gpu, GpuHealth, NodeState
from portal.nodes.selectors import present_gpu_split
from portal.tenants.models import Quota, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True, slots=True)
class TenantStanding:
    """One tenant as the reader stands in it now (a cap of None: no cap)."""

    slug: str
    name: str
    gpu_cap: int | None
    user_cap: int | None
    tenant_gpus: int
    user_gpus: int


@dataclass(frozen=True, slots=True)
class SubmitOutlook:
    """The submit form's numbers: the reader's tenants, the GPUs that take whole-GPU jobs (``cluster_gpus``, what a
    job may at most ask for) and how many of them could take a job now (``free_gpus``: healthy, on a node that is
    up, held by no job)."""

    tenants: list[TenantStanding]
    cluster_gpus: int
    free_gpus: int
    shared_gpus: int = 0  # present GPUs an admin marked shared: they take shares only, never a whole-GPU job

    def largest_job(self, standing: TenantStanding) -> int:
        """The most GPUs one job may ask for in ``standing``'s tenant: what ``check_fits`` lets through."""
        limits = [self.cluster_gpus, *(cap for cap in (standing.gpu_cap, standing.user_cap) if cap is not None)]
        return min(limits)

    @property
    def rows(self) -> list[tuple[TenantStanding, int]]:
        return [(t, self.largest_job(t)) for t in self.tenants]


def submit_outlook(*, user: User, tenants: list[Tenant]) -> SubmitOutlook:
    """The outlook of ``user`` over ``tenants`` (those they may submit to)."""
    ids = [t.pk for t in tenants]
    quotas = {q.tenant_id: q for q in Quota.objects.filter(tenant_id__in=ids)}
    held = Counter[tuple[int, int]]()
    rows = (
        Allocation.objects.filter(released_at__isnull=True, job__tenant_id__in=ids)
        .values_list("job__tenant_id", "job__user_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for tenant_id, user_id, n in rows:
        held[(tenant_id, user_id)] += n
    standings = []
    for tenant in tenants:
        quota = quotas.get(tenant.pk)
        standings.append(
            TenantStanding(
                slug=tenant.slug,
                name=tenant.name,
                gpu_cap=quota.gpu_limit if quota is not None else None,
                user_cap=quota.user_gpu_limit if quota is not None else None,
                tenant_gpus=sum(n for (t, _), n in held.items() if t == tenant.pk),
                user_gpus=held[(tenant.pk, user.pk)],
            )
        )
    free = (
        Gpu.objects.filter(present=True, shared=False, health=GpuHealth.HEALTHY, node__state=NodeState.UP)
        .exclude(pk__in=Allocation.objects.filter(released_at__isnull=True).values("gpu_id"))
        .count()
    )
    whole, shared = present_gpu_split()
    return SubmitOutlook(tenants=standings, cluster_gpus=whole, free_gpus=free, shared_gpus=shared)
