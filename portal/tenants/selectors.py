"""Reads of tenants' quotas in the scheduling core's terms, for the live loop and for what-if replays."""

from __future__ import annotations

from portal.tenants.models import Quota, Tenant
from scheduling.core.model import TenantLimits


def tenant_limits() -> dict[str, TenantLimits]:
    """Every tenant's GPU cap, guarantee and per-user cap, by slug (two queries). A tenant without a quota row gets
    no limits, so every tenant is listed: the core then never guesses about an unknown slug."""
    limits = {
        slug: TenantLimits(gpu_cap=cap, guaranteed_gpus=guaranteed, user_cap=user_cap)
        for slug, cap, guaranteed, user_cap in Quota.objects.values_list(
            "tenant__slug", "gpu_limit", "guaranteed_gpus", "user_gpu_limit"
        )
    }
    for slug in Tenant.objects.exclude(slug__in=limits).values_list("slug", flat=True):
        limits[slug] = TenantLimits()
    return limits
