"""GPU-hours allocated and used, summed in the database per (tenant, user).

Each :class:`~portal.jobs.models.Allocation` row is one GPU held by one attempt of a job, from ``created_at`` to
``released_at`` (or now, while held). Allocated time is that interval clipped to the window. Used time weighs the
same interval by the GPU's measured utilization: every rollup of that GPU overlapping the interval contributes its
overlap times its mean ``gpu_util`` / 100, and the overlaps themselves are the *covered* time. Rollups, not samples:
a 30-day window reads at most one row per GPU-hour.

Interval arithmetic is done on seconds since the epoch (:class:`~portal.db.EpochSeconds`).
Each allocation's rollups are found by a correlated subquery that compares the raw ``bucket`` column, so both
databases walk the (period, gpu, bucket) unique index per allocation instead of pairing every rollup with every
allocation of its GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection, transaction
from django.db.models import DateTimeField, F, FloatField, OuterRef, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least

from portal.dashboards.stats import Usage, Window
from portal.db import EpochSeconds
from portal.jobs.models import Allocation, Job
from portal.telemetry.models import Rollup

#: Usage per (tenant id, user id) of the jobs a reader may see.
UsageByOwner = dict[tuple[int, int], Usage]


@contextmanager
def _without_jit() -> Iterator[None]:
    """Run the enclosed queries with PostgreSQL's JIT compiler off (``SET LOCAL``: this transaction only).

    The planner prices the per-allocation subqueries by their estimated count, which passes ``jit_above_cost`` on
    any real history, and compiling the plan then costs more than running it: measured on a month of 20k jobs
    (bench/dashboard.py), 480 ms of compilation for a query that runs in about 110 ms. SQLite has nothing to turn off.
    """
    if connection.vendor != "postgresql":
        yield
        return
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = off")
        yield


def _overlapping(window: Window) -> Q:
    """Allocations held at some moment of the window."""
    return Q(created_at__lt=window.end) & (Q(released_at__isnull=True) | Q(released_at__gt=window.start))


def usage_by_owner(*, jobs: QuerySet[Job], window: Window) -> UsageByOwner:
    """Allocated, covered and used GPU-seconds in ``window`` of the allocations of ``jobs``, per (tenant, user).

    One aggregate query whatever the number of allocations (``window.period`` says which rollups it reads: 1-minute
    for a day, 1-hour for longer windows).
    """
    allocations = (
        Allocation.objects.filter(_overlapping(window), job__in=jobs.values("pk"))
        .annotate(
            a_start=Greatest(EpochSeconds(F("created_at")), Value(window.start.timestamp())),
            a_end=Least(
                Coalesce(EpochSeconds(F("released_at")), Value(window.end.timestamp())),
                Value(window.end.timestamp()),
            ),
        )
        .annotate(covered=_measured(window, weighted=False), used=_measured(window, weighted=True))
    )
    query = (
        allocations.values(t=F("job__tenant_id"), u=F("job__user_id"))
        .annotate(
            allocated=Sum(F("a_end") - F("a_start"), output_field=FloatField()),
            covered_sum=Sum("covered", output_field=FloatField()),
            used_sum=Sum("used", output_field=FloatField()),
        )
        .order_by()
    )
    with _without_jit():
        rows = list(query)
    return {
        (r["t"], r["u"]): Usage(
            allocated=r["allocated"] or 0.0, covered=r["covered_sum"] or 0.0, used=r["used_sum"] or 0.0
        )
        for r in rows
    }


def _measured(window: Window, *, weighted: bool) -> Subquery:
    """For the allocation of the outer query: the seconds of its clipped interval that its GPU's rollups cover
    (``weighted``: each times the rollup's ``gpu_util`` / 100). Rollups without ``gpu_util`` cover nothing.

    A correlated subquery rather than a join, so that both databases look up each allocation's few rollups in the
    (period, gpu, bucket) unique index instead of pairing every rollup with every allocation of its GPU.
    """
    period = timedelta(seconds=window.period)
    b_start = EpochSeconds(F("bucket"))
    overlap = Least(b_start + Value(float(window.period)), OuterRef("a_end")) - Greatest(b_start, OuterRef("a_start"))
    # Buckets that end after the allocation starts and start before it ends (or before now, while it is held),
    # within the window: compared on the raw column, so the index serves the range.
    rollups = Rollup.objects.filter(
        period=window.period,
        gpu_id=OuterRef("gpu_id"),
        gpu_util__isnull=False,
        bucket__gt=OuterRef("created_at") - period,
        bucket__lt=Coalesce(OuterRef("released_at"), Value(window.end, output_field=DateTimeField())),
    ).filter(bucket__gt=window.start - period, bucket__lt=window.end)
    return Subquery(
        rollups.values("gpu_id")
        .annotate(total=Sum(overlap * F("gpu_util") / Value(100.0) if weighted else overlap, output_field=FloatField()))
        .values("total")
        .order_by(),
        output_field=FloatField(),
    )
