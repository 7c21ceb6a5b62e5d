"""The tenants page and ``/api/v1/tenants/``: each tenant's quota, what it holds now, what it borrows, and its
fair-share standing, so the scheduler's lending order can be read and checked.

Rows are only for the tenants ``user`` may see (``Tenant.objects.visible_to``), but the borrowing order is computed
over every tenant, as the scheduler computes it: a member sees their tenant's true place ("2nd of 4"), not its place
among the tenants they happen to belong to. Other tenants' slugs and usage are not shown, only how many there are.

A fixed number of queries whatever the number of tenants: one for the visible tenants and their quotas, two for
every tenant's limits (``tenant_limits``), one for decayed usage (when fair share is on), one for GPUs held (a share
as its fraction, as the caps count it) and one for job counts, both aggregated by the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count

from portal.jobs.models import ACTIVE_STATES, Job
from portal.jobs.share_selectors import gpu_use_by_user
from portal.tenants.models import Tenant
from portal.tenants.selectors import fair_share_half_life, tenant_limits, usage_history
from scheduling.core.fairshare import Standing, standings
from scheduling.core.policies import QUOTA_SUFFIX
from scheduling.core.states import JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class FairShareStanding:
    """A tenant's fair-share standing as shown (see :class:`scheduling.core.fairshare.Standing`).

    ``usage_share`` is its part of every tenant's decayed usage, ``entitled_share`` its part of every guaranteed
    GPU; ``ratio`` the first over the second (None: it has no guaranteed GPUs, so no share). ``borrow_order`` is its
    place among all ``tenant_count`` tenants in the order idle GPUs are lent (1: first).
    """

    usage_gpu_hours: float
    usage_share: float
    entitled_share: float
    ratio: float | None
    borrow_order: int
    tenant_count: int

    @classmethod
    def of(cls, standing: Standing, tenant_count: int) -> FairShareStanding:
        return cls(
            usage_gpu_hours=standing.usage / HOUR,
            usage_share=standing.usage_share,
            entitled_share=standing.entitled_share,
            ratio=standing.ratio,
            borrow_order=standing.order,
            tenant_count=tenant_count,
        )


@dataclass(frozen=True, slots=True)
class TenantRow:
    """One tenant: its quota (None: no limit), what its jobs hold and wait for now, and its fair-share standing
    (None when fair share is off)."""

    slug: str
    name: str
    guaranteed_gpus: int
    gpu_cap: int | None
    user_cap: int | None
    max_active_jobs: int | None
    gpus_held: float
    running_jobs: int
    pending_jobs: int
    fair_share: FairShareStanding | None

    @property
    def in_guarantee(self) -> float:
        """GPUs held within its guarantee: these it keeps whatever others want."""
        return min(self.gpus_held, self.guaranteed_gpus)

    @property
    def borrowed(self) -> float:
        """GPUs held beyond its guarantee: idle quota lent to it, which a tenant under its guarantee may reclaim."""
        return max(0, self.gpus_held - self.guaranteed_gpus)


@dataclass(frozen=True, slots=True)
class TenantOverview:
    """What the tenants page shows: the live policy, whether its quota layer (guarantees, borrowing, fair share)
    is in effect, the fair-share half-life in hours (None: fair share off), and the visible tenants' rows."""

    policy: str
    quota_layer: bool
    half_life_hours: float | None
    tenants: tuple[TenantRow, ...]


def tenant_overview(*, user: User | AnonymousUser, now: datetime) -> TenantOverview:
    """The tenants ``user`` may see, each with its quota, holdings and fair-share standing as of ``now``.

    Reads only; a fixed number of queries (see the module docstring). The standing is computed over every tenant
    with the same inputs as the live round (``tenant_limits`` and ``usage_history``), so the order shown is the one
    the scheduler lends by at ``now``.
    """
    policy = settings.CORRAL_POLICY
    half_life = fair_share_half_life()
    visible = list(
        Tenant.objects.visible_to(user)
        .order_by("slug")
        .values_list(
            "pk",
            "slug",
            "name",
            "quota__guaranteed_gpus",
            "quota__gpu_limit",
            "quota__user_gpu_limit",
            "quota__max_active_jobs",
        )
    )
    rows: tuple[TenantRow, ...] = ()
    if visible:
        ids = [pk for pk, *_ in visible]
        held = _gpus_held()
        jobs = {
            (tenant_id, state): n
            for tenant_id, state, n in Job.objects.filter(state__in=ACTIVE_STATES, tenant_id__in=ids)
            .values("tenant_id", "state")
            .annotate(n=Count("id"))
            .order_by()
            .values_list("tenant_id", "state", "n")
        }
        fair = _standings(now)
        rows = tuple(
            TenantRow(
                slug=slug,
                name=name,
                guaranteed_gpus=guaranteed or 0,
                gpu_cap=cap,
                user_cap=user_cap,
                max_active_jobs=max_active,
                gpus_held=held.get(slug, 0),
                running_jobs=jobs.get((pk, JobState.RUNNING.value), 0),
                pending_jobs=jobs.get((pk, JobState.PENDING.value), 0),
                fair_share=fair.get(slug) if fair is not None else None,
            )
            for pk, slug, name, guaranteed, cap, user_cap, max_active in visible
        )
    return TenantOverview(
        policy=policy,
        quota_layer=policy.endswith(QUOTA_SUFFIX),
        half_life_hours=half_life / HOUR if half_life is not None else None,
        tenants=rows,
    )


def _gpus_held() -> dict[str, float]:
    """GPUs each tenant's jobs hold now, by slug, counted as the caps count them (``gpu_use_by_user``): a share of a
    GPU (issue #17) as its fraction, a whole GPU as 1. Rounded to 1e-9 so four 0.25 shares read as 1, not 0.999..."""
    held: dict[str, float] = {}
    for (slug, _user), n in gpu_use_by_user().items():
        held[slug] = held.get(slug, 0.0) + n
    return {slug: round(n, 9) for slug, n in held.items()}


def _standings(now: datetime) -> dict[str, FairShareStanding] | None:
    """Every tenant's standing by slug; None when fair share is off."""
    history = usage_history(now=now)
    if history is None:
        return None
    ranked = standings(history, tenant_limits())
    return {s.tenant: FairShareStanding.of(s, len(ranked)) for s in ranked}
