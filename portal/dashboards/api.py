"""``GET /api/v1/usage/``: the dashboard's per-tenant and per-user figures as JSON, for scripts (chargeback, reports).

Same selector, same definitions and same visibility as the ``/dashboard/`` page (docs/dashboards.md): a member
gets their tenants' rows, staff get every tenant's. The idle-GPU list (``idle``) follows the page's panel too
(``portal.dashboards.idle``): tenant admins get their tenants' jobs, staff every tenant's, anyone else ``null``.
Only the parameters differ in how they fail: the page falls back to the default window with a message, the API
answers 400 with the field's message.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import permissions, serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.dashboards.idle import IdlePanel, WastedByUser, idle_panel
from portal.dashboards.selectors import WINDOWS, dashboard_get, dashboard_tenants, default_window, window_of
from portal.dashboards.stats import GroupStats, Spread
from portal.telemetry.job_usage import IdleJob, WastedRow


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


class IdleNowSerializer(serializers.Serializer[IdleJob]):
    job_id = serializers.IntegerField()
    name = serializers.CharField()
    tenant = serializers.CharField()
    user = serializers.CharField()
    gpus = serializers.IntegerField(source="verdict.gpus", help_text="GPUs the job holds.")
    utilization = serializers.FloatField(
        source="verdict.util", help_text="Their mean measured utilization (percent) over the rule's window."
    )
    text = serializers.CharField(source="verdict.text", help_text='The job page\'s warning: "holds 4 GPUs and used …".')


class WastedJobSerializer(serializers.Serializer[WastedRow]):
    job_id = serializers.IntegerField()
    name = serializers.CharField()
    tenant = serializers.CharField()
    user = serializers.CharField()
    state = serializers.CharField()
    idle_gpu_hours = serializers.FloatField(source="gpu_hours")


class WastedUserSerializer(serializers.Serializer[WastedByUser]):
    user = serializers.CharField()
    tenant = serializers.CharField()
    jobs = serializers.IntegerField()
    idle_gpu_hours = serializers.FloatField(source="gpu_hours")


class IdleSerializer(serializers.Serializer[IdlePanel]):
    """The dashboard's "Idle GPUs" panel: what it lists is explained in docs/dashboards.md, "Idle GPUs"."""

    threshold = serializers.FloatField(
        source="rule.threshold", help_text="Utilization (percent) below which a GPU counts as idle."
    )
    rule_window_seconds = serializers.FloatField(
        source="rule.window", help_text="How far back `idle_now` looks (the job page's warning uses the same)."
    )
    min_coverage = serializers.FloatField(
        source="rule.min_coverage", help_text="Share (0 to 1) of that time telemetry must cover to call a job idle."
    )
    idle_now = IdleNowSerializer(many=True, help_text="Running jobs idle now.")
    idle_gpu_hours = serializers.FloatField(
        source="wasted_gpu_hours", help_text="GPU-hours held below the threshold in the window (readings only)."
    )
    users = WastedUserSerializer(many=True, source="wasted_users", help_text="Idle GPU-hours per user, most first.")
    jobs = WastedJobSerializer(
        many=True, source="wasted_jobs", help_text="Idle GPU-hours per job, most first (at most 20)."
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
    idle = serializers.SerializerMethodField()

    @extend_schema_field(
        IdleSerializer(
            allow_null=True,
            help_text="The idle-GPU list, as the dashboard shows it: tenant admins get their tenants' jobs, staff "
            "every tenant's (of `tenant`, when given); null for everyone else.",
        )
    )
    def get_idle(self, dashboard: Any) -> dict[str, Any] | None:
        panel: IdlePanel | None = self.context.get("idle")
        return None if panel is None else dict(IdleSerializer(panel).data)


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
        window = window_of(key, now=now)
        dashboard = dashboard_get(user=request.user, window=window, tenant=tenant)
        idle = idle_panel(user=request.user, window=window, now=now, tenant=tenant)
        return Response(UsageSerializer(dashboard, context={"idle": idle}).data)
