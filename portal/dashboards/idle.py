"""The dashboard's idle-GPU list for tenant admins and staff: the running jobs that leave their GPUs idle now, and
the GPU-hours held idle in the dashboard's window, per job and per user.

What "idle" means is not decided here: ``portal.telemetry.job_usage`` applies the one rule (``telemetry.idle``)
that the job page's warning uses too. This room only chooses whose jobs a reader may see in the list: staff see
every tenant's, a tenant admin those of the tenants they administer (a list of other members' idle jobs is an
admin's business, not a member's), anyone else none (no list at all).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import QuerySet

from portal.dashboards.stats import Window
from portal.jobs.models import Job
from portal.telemetry.job_usage import IdleJob, WastedRow, idle_jobs, idle_rule, wasted_gpu_time
from portal.tenants.models import Membership, Role, Tenant
from telemetry.idle import IdleRule

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

#: The most jobs the wasted-time table lists (the users' table sums all of them).
TOP_JOBS = 20


@dataclass(frozen=True, slots=True)
class WastedByUser:
    user: str
    tenant: str
    jobs: int
    seconds: float

    @property
    def gpu_hours(self) -> float:
        return self.seconds / 3600.0


@dataclass(frozen=True, slots=True)
class IdlePanel:
    """What the idle list shows: the rule, the jobs idle now, and the GPU-hours held idle in ``window``."""

    rule: IdleRule
    window: Window
    idle_now: list[IdleJob]
    wasted_jobs: list[WastedRow]
    wasted_users: list[WastedByUser]
    wasted_seconds: float

    @property
    def wasted_gpu_hours(self) -> float:
        return self.wasted_seconds / 3600.0


def administered_jobs(*, user: User | AnonymousUser, tenant: Tenant | None = None) -> QuerySet[Job] | None:
    """The jobs whose idle time ``user`` may be shown (of ``tenant`` only, when given): every job for staff, the
    jobs of the tenants they administer for a tenant admin; None for anyone else."""
    if not user.is_authenticated:
        return None
    jobs = Job.objects.all()
    if not user.is_staff:
        administered = Membership.objects.filter(user=user, role=Role.ADMIN).values("tenant_id")
        if not administered.exists():
            return None
        jobs = jobs.filter(tenant_id__in=administered)
    return jobs.filter(tenant=tenant) if tenant is not None else jobs


def idle_panel(
    *, user: User | AnonymousUser, window: Window, now: datetime, tenant: Tenant | None = None
) -> IdlePanel | None:
    """The idle list for ``user`` (None: not theirs to see): the running jobs idle at ``now`` under the rule's own
    window, and the GPU-hours held idle in the dashboard's ``window`` (its rollup period: minutes up to a day,
    hours beyond). A fixed number of queries."""
    jobs = administered_jobs(user=user, tenant=tenant)
    if jobs is None:
        return None
    wasted = wasted_gpu_time(jobs=jobs, start=window.start, end=window.end, period=window.period)
    per_user: defaultdict[tuple[str, str], list[float]] = defaultdict(list)
    for row in wasted:
        per_user[(row.user, row.tenant)].append(row.seconds)
    users = sorted(
        (WastedByUser(user=u, tenant=t, jobs=len(s), seconds=sum(s)) for (u, t), s in per_user.items()),
        key=lambda w: (-w.seconds, w.user),
    )
    return IdlePanel(
        rule=idle_rule(),
        window=window,
        idle_now=idle_jobs(jobs=jobs, now=now),
        wasted_jobs=wasted[:TOP_JOBS],
        wasted_users=users,
        wasted_seconds=sum(r.seconds for r in wasted),
    )
