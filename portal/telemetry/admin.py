"""Admin for telemetry: GPU health actions (mark healthy again after a reset or repair), alerts, health history and
failure-model versions. Raw samples and rollups are too many rows for the admin and are left out on purpose."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.nodes.models import GpuHealth
from portal.telemetry.models import Alert, FailureModel, GpuHealthControl, GpuHealthEvent, NodeTelemetry
from portal.telemetry.services.health import gpu_mark_healthy


@admin.register(GpuHealthControl)
class GpuHealthControlAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "health", "health_detail", "present"]
    list_filter = ["health", "present", "node"]
    search_fields = ["uuid", "node__name"]
    list_select_related = ["node"]
    readonly_fields = ["node", "index", "uuid", "model", "memory_mb", "health", "health_detail", "present"]
    actions = ["mark_healthy"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # GPUs come from agent registration

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Mark healthy (after a reset or repair): accept new jobs, resolve alerts")
    def mark_healthy(self, request: HttpRequest, queryset: QuerySet[GpuHealthControl]) -> None:
        changed = sum(
            gpu_mark_healthy(gpu_id=gpu.pk, by=request.user.get_username())
            for gpu in queryset.exclude(health=GpuHealth.HEALTHY)
        )
        messages.info(request, f"Marked {changed} GPU(s) healthy.")


@admin.register(Alert)
class AlertAdmin(admin.ModelAdmin):
    list_display = ["at", "severity", "node", "gpu", "title", "resolved_at"]
    list_filter = ["severity", "node", ("resolved_at", admin.EmptyFieldListFilter)]
    list_select_related = ["node", "gpu", "gpu__node"]
    readonly_fields = ["at", "severity", "node", "gpu", "title", "message", "resolved_at", "resolved_by"]


@admin.register(GpuHealthEvent)
class GpuHealthEventAdmin(admin.ModelAdmin):
    list_display = ["at", "gpu", "kind", "cause", "xid", "actor", "message"]
    list_filter = ["kind", "cause"]
    list_select_related = ["gpu", "gpu__node"]
    readonly_fields = [f.name for f in GpuHealthEvent._meta.fields]


@admin.register(FailureModel)
class FailureModelAdmin(admin.ModelAdmin):
    list_display = ["version", "created_at", "source", "active", "window_start", "window_end", "horizon_s"]
    exclude = ["artifact"]
    readonly_fields = [
        "version",
        "created_at",
        "source",
        "window_start",
        "window_end",
        "horizon_s",
        "metrics",
        "metadata",
        "active",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[FailureModel]:
        return super().get_queryset(request).defer("artifact")  # serialized models can be megabytes each


@admin.register(NodeTelemetry)
class NodeTelemetryAdmin(admin.ModelAdmin):
    list_display = [
        "node",
        "samples_received",
        "agent_dropped",
        "samples_duplicate",
        "samples_rejected",
        "last_batch_at",
    ]
    readonly_fields = [f.name for f in NodeTelemetry._meta.fields]
