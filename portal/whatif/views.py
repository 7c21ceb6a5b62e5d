"""The what-if pages: ask for a replay of the cluster's history under other policies, and read what it found.

Staff only (a replay reads every tenant's jobs): a signed-in member gets 403, a visitor the login page. The views
only validate and call ``portal.whatif``; the replay runs in a worker and the run's page polls its status.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from portal.errors import ServiceError
from portal.tenants.selectors import tenant_limits
from portal.web.htmx import is_htmx
from portal.whatif.describe import cluster_brief, cluster_text, quota_rows
from portal.whatif.elastic_replay import elastic_rows
from portal.whatif.forms import WhatIfForm
from portal.whatif.models import WhatIfRun, WhatIfState
from portal.whatif.results import baseline, observed_row, share_rows, table_rows
from portal.whatif.selectors import whatif_get, whatif_list, whatif_live_cluster
from portal.whatif.services import whatif_create
from scheduling.core.policies import QUOTA_SUFFIX

if TYPE_CHECKING:
    from collections.abc import Iterable

    from portal.web.auth import AuthenticatedHttpRequest


@dataclass(frozen=True, slots=True)
class RunRow:
    """A past run in the list, with what it replayed on in words (the template only prints)."""

    run: WhatIfRun
    cluster: str
    quotas: str


def _require_staff(request: HttpRequest) -> None:
    if not request.user.is_staff:
        raise PermissionDenied("What-if replays are for admins: they read every tenant's history.")


@login_required
def whatif_list_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Past runs, and the form for a new one (pre-filled with the live policy, placement, cluster shape and
    today's quotas)."""
    _require_staff(request)
    form = WhatIfForm(
        request.POST or None,
        live_policy=settings.CORRAL_POLICY,
        live_placement=settings.CORRAL_PLACEMENT,
        cluster=whatif_live_cluster(),
        quotas=tenant_limits(),
        half_life_hours=settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS,
    )
    if request.method == "POST" and form.is_valid():
        try:
            run = whatif_create(user=request.user, **form.cleaned_data)
        except ServiceError as exc:
            form.add_refusal(exc.field, exc.message)
        else:
            return redirect("whatif-detail", run_id=run.pk)
    return render(request, "whatif/whatif_list.html", {"form": form, "runs": _run_rows(whatif_list())})


def _run_rows(runs: Iterable[WhatIfRun]) -> list[RunRow]:
    return [RunRow(run=run, cluster=cluster_brief(run), quotas=_quotas_brief(run)) for run in runs]


def _quotas_brief(run: WhatIfRun) -> str:
    """The list's column: whether the run applied quotas, and whether it tried other ones than the day's."""
    if run.quotas is None:
        return "none"
    edited = any(isinstance(limits, dict) and limits.get("edited") for limits in run.quotas.values())
    return "applied, edited" if edited else "applied"


@login_required
def whatif_detail_view(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run. While it is queued or running, htmx polls this view for the status fragment alone."""
    _require_staff(request)
    run = whatif_get(run_id=run_id)
    if run is None:
        raise Http404("No such what-if run.")
    context = _run_context(run)
    if is_htmx(request):
        return render(request, "whatif/partials/_whatif_run.html", context)
    return render(request, "whatif/whatif_detail.html", context)


def _run_context(run: WhatIfRun) -> dict[str, object]:
    results = run.results if run.state == WhatIfState.DONE else {}
    records = results.get("policies", [])
    observed = results.get("observed")
    quotas = quota_rows(run)
    sharing = results.get("sharing")
    elastic = run.elastic_results if run.state == WhatIfState.DONE else None
    return {
        "run": run,
        "cluster_text": cluster_text(run),
        "quotas": quotas,
        # The table lists only the tenants with a limit; say so when it left some out.
        "unlimited_tenants": quotas is not None and len(quotas) < len(run.quotas or {}),
        "quotas_edited": any(quota.edited for quota in quotas or ()),
        "rows": table_rows(records, live_policy=run.live_policy, observed=observed),
        "baseline": baseline(records, live_policy=run.live_policy),
        "live_replayed": any(r["policy"] == run.live_policy for r in records),
        # Guaranteed GPUs and fair share are read by +quota policies alone: the page says when none was replayed.
        "quota_replayed": any(name.endswith(QUOTA_SUFFIX) for name in run.policies),
        "fairness_over": records[0]["fairness_over"] if records else "",
        "observed": observed_row(observed, records=records),
        "skipped": results.get("skipped", 0),
        "figures": results.get("figures", []),
        "sharing": sharing,
        "share_rows": share_rows(sharing.get("modes", [])) if sharing else [],
        "elastic": elastic,
        "elastic_rows": elastic_rows(elastic.get("arms", [])) if elastic else [],
    }
