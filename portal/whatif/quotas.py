"""The tenants' quotas a what-if run replays with, as ``whatif_create`` copies them onto the run: today's, with the
admin's changes for this run laid over them. Apart from ``services`` so that module stays about asking for and
settling runs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from portal.errors import ValidationFailed
from portal.tenants.selectors import tenant_limits
from scheduling.core.model import TenantLimits
from scheduling.sim.replay_rules import quota_refusal


def run_quotas(apply: bool, changes: Mapping[str, TenantLimits]) -> dict[str, dict[str, Any]] | None:
    """Today's quotas with ``changes`` laid over them, as the run stores them; None when none apply. Refuses a
    change for an unknown tenant, or one the quota table itself would refuse (a guarantee above the cap)."""
    if not apply:
        if changes:
            raise ValidationFailed("quota changes need the tenants' quotas applied", field="quota_changes")
        return None
    today = tenant_limits()
    unknown = sorted(set(changes) - set(today))
    if unknown:
        raise ValidationFailed(f"no tenant {', '.join(unknown)}", field="quota_changes")
    for slug, limits in changes.items():
        refusal = quota_refusal(slug, limits)
        if refusal is not None:  # said under the one field that holds every change
            raise ValidationFailed(refusal.message, field="quota_changes")
    quotas: dict[str, dict[str, Any]] = {}
    for slug in sorted(today):
        limits = changes.get(slug, today[slug])
        quotas[slug] = asdict(limits) | ({"edited": True} if limits != today[slug] else {})
    return quotas
