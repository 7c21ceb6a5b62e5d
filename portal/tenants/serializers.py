"""Shapes of ``GET /api/v1/tenants/``: the tenants page as numbers (``portal.tenants.overview``).

A tenant's fair-share fields are null when fair share is off (``half_life_hours`` null); ``ratio`` is also null for
a tenant with no guaranteed GPUs, which holds no share. Quota limits are null where there is no limit.
"""

from __future__ import annotations

from rest_framework import serializers

from portal.tenants.overview import TenantOverview, TenantRow


class TenantRowSerializer(serializers.Serializer[TenantRow]):
    slug = serializers.SlugField()
    name = serializers.CharField()
    guaranteed_gpus = serializers.IntegerField(help_text="GPUs it can always reclaim (`+quota` policies); 0: none.")
    gpu_cap = serializers.IntegerField(allow_null=True, help_text="The most GPUs its jobs hold at once; null: no cap.")
    user_cap = serializers.IntegerField(allow_null=True, help_text="The most GPUs one member holds; null: no cap.")
    max_active_jobs = serializers.IntegerField(
        allow_null=True, help_text="The most jobs pending or running at once; null: no limit."
    )
    gpus_held = serializers.FloatField(
        help_text="GPUs its jobs hold now, a share of a GPU counted as its fraction (0.25), as the caps count it."
    )
    in_guarantee = serializers.FloatField(help_text="Of those, within its guarantee: min(held, guaranteed).")
    borrowed = serializers.FloatField(help_text="Of those, beyond its guarantee: max(0, held - guaranteed).")
    running_jobs = serializers.IntegerField()
    pending_jobs = serializers.IntegerField()
    # Null when fair share is off: a missing ``fair_share`` reads as null through ``allow_null``.
    usage_gpu_hours = serializers.FloatField(
        source="fair_share.usage_gpu_hours",
        allow_null=True,
        help_text="GPU-hours held, each weighted by 2^-(age / half-life).",
    )
    usage_share = serializers.FloatField(
        source="fair_share.usage_share", allow_null=True, help_text="Its part of all tenants' usage, 0 to 1."
    )
    entitled_share = serializers.FloatField(
        source="fair_share.entitled_share", allow_null=True, help_text="Its part of all guaranteed GPUs, 0 to 1."
    )
    ratio = serializers.FloatField(
        source="fair_share.ratio",
        allow_null=True,
        help_text="usage_share / entitled_share (1: used exactly its share); null: it has no guaranteed GPUs.",
    )
    borrow_order = serializers.IntegerField(
        source="fair_share.borrow_order",
        allow_null=True,
        help_text="Its place in the order idle GPUs are lent, among all tenants (1: first).",
    )
    tenant_count = serializers.IntegerField(
        source="fair_share.tenant_count", allow_null=True, help_text="How many tenants the order has (all of them)."
    )


class TenantOverviewSerializer(serializers.Serializer[TenantOverview]):
    policy = serializers.CharField(help_text="The live `CORRAL_POLICY`.")
    quota_layer = serializers.BooleanField(
        help_text="Whether the live policy has the `+quota` layer: without it, guarantees and fair share do nothing."
    )
    half_life_hours = serializers.FloatField(
        allow_null=True, help_text="Fair share's usage half-life in hours; null: fair share is off."
    )
    tenants = TenantRowSerializer(many=True, help_text="The tenants you may see: yours, or every one for staff.")
