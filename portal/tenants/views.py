"""The tenants page: each visible tenant's quota, what it holds and borrows now, and its fair-share standing, in
words, so the scheduler's lending order explains itself.

The numbers come from one selector (``portal.tenants.overview``), the same as ``/api/v1/tenants/``; this module
only turns them into the sentences the template prints.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal.tenants.overview import TenantRow, tenant_overview
from portal.web.templatetags.numbers import gpu_hours, percent
from scheduling.core.policies import QUOTA_SUFFIX

HOURS_PER_WEEK = 168.0
HOURS_PER_DAY = 24.0


@dataclass(frozen=True, slots=True)
class TenantLine:
    """A tenant's row as the page prints it: the selector's row and the sentences about it."""

    row: TenantRow
    held: str
    jobs: str
    usage: str
    usage_detail: str
    share: str
    order: str
    order_detail: str


def ordinal(n: int) -> str:
    """``1`` -> ``1st``, ``2`` -> ``2nd``, ``11`` -> ``11th``, ``23`` -> ``23rd``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _count(n: float, unit: str) -> str:
    return f"{n:g} {unit}{'' if n == 1 else 's'}"


def half_life_words(hours: float) -> str:
    """The half-life as people say it: ``168`` -> ``a week``, ``48`` -> ``2 days``, ``12`` -> ``12 hours``."""
    for size, unit in ((HOURS_PER_WEEK, "week"), (HOURS_PER_DAY, "day"), (1.0, "hour")):
        if hours == size:
            return f"{'an' if unit == 'hour' else 'a'} {unit}"
        if hours > size and hours % size == 0:
            return _count(hours / size, unit)
    return _count(hours, "hour")


def _gpus(n: float) -> str:
    """``1 GPU``, ``3 GPUs``, ``0.25 GPU``: a share of a GPU counts as its fraction (issue #17)."""
    return f"{n:g} GPU" if n <= 1 else f"{n:g} GPUs"


def _held(row: TenantRow) -> str:
    if row.gpus_held == 0:
        return "no GPUs"
    if row.guaranteed_gpus == 0:
        return f"{_gpus(row.gpus_held)}, all borrowed"
    if row.borrowed == 0:
        return f"{_gpus(row.gpus_held)}, within its guarantee"
    return f"{_gpus(row.gpus_held)}: {row.in_guarantee:g} within its guarantee, borrows {row.borrowed:g}"


def _ratio(ratio: float) -> str:
    return f"{ratio:.2f}×" if ratio < 0.1 else f"{ratio:.1f}×"


def tenant_line(row: TenantRow, *, quota_layer: bool, half_life_hours: float | None) -> TenantLine:
    """``row`` in words. The fair-share sentences are empty when fair share is off (the page hides them); the
    borrowing order says "would borrow" when the live policy has no quota layer, as no tenant borrows then."""
    jobs = f"{row.running_jobs} running, {row.pending_jobs} pending"
    fair = row.fair_share
    if fair is None or half_life_hours is None:
        return TenantLine(row, _held(row), jobs, "", "", "", "", "")
    period = half_life_words(half_life_hours).removeprefix("an ").removeprefix("a ")
    usage = f"{gpu_hours(fair.usage_gpu_hours) if fair.usage_gpu_hours else 0} GPU-hours"
    usage_detail = f"{percent(fair.usage_share)} of all tenants' usage"
    if fair.ratio is None:
        share = "has no guaranteed GPUs, so no share"
    else:
        usage_detail += f"; its share is {percent(fair.entitled_share)}"
        if fair.usage_gpu_hours == 0:
            share = f"used no GPUs over the last {period}"
        else:
            share = f"used {_ratio(fair.ratio)} its share over the last {period}"
    verb = "borrows" if quota_layer else "would borrow"
    order = f"{verb} {ordinal(fair.borrow_order)} of {fair.tenant_count}"
    order_detail = "after every tenant with guaranteed GPUs" if fair.ratio is None else ""
    return TenantLine(row, _held(row), jobs, usage, usage_detail, share, order, order_detail)


@login_required
def tenant_list_view(request: HttpRequest) -> HttpResponse:
    overview = tenant_overview(user=request.user, now=timezone.now())
    half_life = overview.half_life_hours
    lines = [tenant_line(row, quota_layer=overview.quota_layer, half_life_hours=half_life) for row in overview.tenants]
    context = {
        "overview": overview,
        "lines": lines,
        "half_life": half_life_words(half_life) if half_life is not None else "",
        "quota_policy": f"{overview.policy}{QUOTA_SUFFIX}",
        "columns": 10 if half_life is not None else 7,
    }
    return render(request, "tenants/tenant_list.html", context)
