"""``GET /api/v1/usage/``: the dashboard's per-tenant and per-user figures as JSON, for scripts (chargeback, reports).

Same selector, same definitions and same visibility as the ``/dashboard/`` page (docs/dashboards.md): a member
gets their tenants' rows, staff get every tenant's. Only the parameters differ in how they fail: the page falls back
to the default window with a message, the API answers 400 with the field's message.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.dashboards.selectors import WINDOWS, dashboard_get, dashboard_tenants, default_window, window_of
from portal.dashboards.stats import GroupStats, Spread


class UsageQuery(serializers.Serializer[dict[str, Any]]):
    window = serializers.ChoiceField(
        choices=list(WINDOWS),
        required=False,
        help_text="Left out: the shortest window that holds every job you can see, at most 7d (24h without jobs).",
    )
    tenant = serializers.SlugField(required=False, help_text="One of your tenants; omit for all you can see.")


class SpreadSerializer(serializers.Serializer[Spread]):
    count = serializers.IntegerField()
    mean = serializers.FloatField()
    median = serializers.FloatField()
    p95 = serializers.FloatField()


class GroupSerializer(serializers.Serializer[GroupStats]):
    name = serializers.CharField(source="label", help_text="The tenant's slug, the username, or the whole scope.")
    jobs_finished = serializers.IntegerField(source="finished")
    jobs_never_ran = serializers.IntegerField(source="never_ran", help_text="Finished without starting: no JCT.")
    jct_seconds = SpreadSerializer(source="jct", allow_null=True, help_text="Finish minus submit, of jobs that ran.")
    queueing_seconds = SpreadSerializer(
        source="queue", allow_null=True, help_text="First start minus submit, of jobs that first started."
    )
    gpu_hours_allocated = serializers.FloatField(source="usage.allocated_hours")
    gpu_hours_used = serializers.FloatField(
        source="usage.used_hours", help_text="GPU-hours with telemetry, weighted by measured utilization."
    )
    gpu_hours_without_telemetry = serializers.FloatField(source="usage.uncovered_hours")
    efficiency = serializers.FloatField(
        source="usage.efficiency", allow_null=True, help_text="Used over GPU-hours with telemetry, 0 to 1."
    )


class UsageSerializer(serializers.Serializer[Any]):
    window = serializers.CharField(source="window.key")
    start = serializers.DateTimeField(source="window.start")
    end = serializers.DateTimeField(source="window.end")
    scope = serializers.CharField()
    total = GroupSerializer()
    tenants = GroupSerializer(many=True)
    users = GroupSerializer(many=True)
    cluster_gpus = serializers.IntegerField(source="cluster.gpus_present")
    cluster_utilization = serializers.FloatField(
        source="cluster.util", allow_null=True, help_text="Mean GPU utilization (percent) over the window."
    )


class UsageView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="Usage per tenant and user over the last 1h, 6h, 24h, 7d or 30d (what /dashboard/ shows)",
        parameters=[
            OpenApiParameter(
                "window",
                str,
                enum=list(WINDOWS),
                description="Left out: the shortest window that holds every job you can see (of `tenant`, when "
                "given), at most 7d; 24h when you can see none. The response's `window` says which.",
            ),
            OpenApiParameter("tenant", str, description="One of your tenants' slugs; omit for all you can see."),
        ],
        responses={200: UsageSerializer},  # 400 (field errors) and 401 are added by portal/api/schema.py
    )
    def get(self, request: Request) -> Response:
        query = UsageQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        tenants = dashboard_tenants(user=request.user)
        slug = query.validated_data.get("tenant")
        tenant = None
        if slug is not None:
            tenant = next((t for t in tenants if t.slug == slug), None)
            if tenant is None:  # another tenant's and a missing one read the same
                raise serializers.ValidationError({"tenant": [f"You have no tenant {slug!r}."]})
        now = timezone.now()
        key = query.validated_data.get("window") or default_window(user=request.user, tenant=tenant, now=now)
        dashboard = dashboard_get(user=request.user, window=window_of(key, now=now), tenant=tenant)
        return Response(UsageSerializer(dashboard).data)
