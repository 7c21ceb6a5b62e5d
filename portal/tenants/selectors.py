"""Reads of tenants' quotas and usage in the scheduling core's terms, for the live loop and for what-if replays."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F, FloatField, Q, Sum, Value
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce, Exp, Greatest, Least

from portal.db import EpochSeconds
from portal.jobs.models import Allocation
from portal.tenants.models import Quota, Tenant
from scheduling.core.model import TenantLimits, UsageHistory

#: Allocations released more than this many half-lives ago are not read: what is left of them counts for less
#: than a millionth of what they held.
USAGE_MEMORY_HALF_LIVES = 20
#: The most negative exponent handed to the database's exp(): PostgreSQL raises "underflow" below about -745
#: instead of returning 0, and e^-700 is already 0 for any sum of GPU-seconds.
MIN_EXPONENT = -700.0


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


def fair_share_half_life() -> float | None:
    """``CORRAL_FAIR_SHARE_HALF_LIFE_HOURS`` in seconds; None when fair share is off (0)."""
    hours = settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS
    return hours * 3600.0 if hours > 0 else None


def tenant_usage(*, now: datetime, half_life: float) -> dict[str, float]:
    """Each tenant's decayed usage as of ``now``: GPU-seconds held, each weighted by ``2 ** -(age / half_life)``.

    Every :class:`~portal.jobs.models.Allocation` is one GPU held from ``created_at`` to ``released_at`` (or now),
    so its part is the integral of the weight over that interval, ``(e^(-k(now - end)) - e^(-k(now - start))) / k``
    with ``k = ln 2 / half_life``: exact, whatever the rounds' cadence, and summed per tenant by the database in one
    query. Tenants that held nothing in the decay's memory are absent.
    """
    if not half_life > 0:
        raise ValueError(f"the usage half-life must be positive, not {half_life}")
    k = math.log(2) / half_life
    now_ts = now.timestamp()
    end = Least(Coalesce(EpochSeconds(F("released_at")), Value(now_ts)), Value(now_ts))
    start = Least(EpochSeconds(F("created_at")), Value(now_ts))
    # A share of a GPU (issue #17) counts as its fraction of the GPU-seconds it held; a whole GPU as 1.
    part = Coalesce(F("job__gpu_fraction"), Value(1.0), output_field=FloatField())
    weight = (_decayed(end, now_ts, k) - _decayed(start, now_ts, k)) * part
    forgotten = now - timedelta(seconds=half_life * USAGE_MEMORY_HALF_LIVES)
    rows = (
        Allocation.objects.filter(Q(released_at__isnull=True) | Q(released_at__gt=forgotten), created_at__lt=now)
        .values(slug=F("job__tenant__slug"))
        .annotate(weighted=Sum(weight, output_field=FloatField()))
        .order_by()
        .values_list("slug", "weighted")
    )
    return {slug: weighted / k for slug, weighted in rows if weighted}


def _decayed(moment: Combinable, now_ts: float, k: float) -> Exp:
    """``e^(-k (now - moment))`` in SQL, clipped at :data:`MIN_EXPONENT` (an allocation a job has held for more
    than a thousand half-lives would otherwise fail the whole query on PostgreSQL)."""
    return Exp(Greatest((moment - Value(now_ts)) * Value(k), Value(MIN_EXPONENT)))


def usage_history(*, now: datetime) -> UsageHistory | None:
    """Fair share's input for a live round or forecast at ``now``; None when fair share is off."""
    half_life = fair_share_half_life()
    if half_life is None:
        return None
    return UsageHistory(half_life, tenant_usage(now=now, half_life=half_life))
