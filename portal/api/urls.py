from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from portal.api import agent_views, history_views, tenant_views, usage_views, views, whatif_views
from telemetry import api as telemetry_api

router = DefaultRouter()
router.register("jobs", views.JobViewSet, basename="job")
router.register("nodes", views.NodeViewSet, basename="node")
# Not "whatif": the browser's pages are named whatif and whatif-detail.
router.register("whatif", whatif_views.WhatIfViewSet, basename="api-whatif")

urlpatterns = [
    path("auth/token/", views.TokenView.as_view(), name="api-token"),
    path("agent/register/", agent_views.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", agent_views.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/samples/", telemetry_api.SamplesView.as_view(), name="agent-samples"),
    path("history/trace/", history_views.HistoryTraceView.as_view(), name="history-trace"),
    path("usage/", usage_views.UsageView.as_view(), name="usage"),
    path("tenants/", tenant_views.TenantListView.as_view(), name="tenant-list-api"),
    path("telemetry/gpus/", telemetry_api.GpuTelemetryView.as_view(), name="telemetry-gpus"),
    path("telemetry/alerts/", telemetry_api.AlertListView.as_view(), name="telemetry-alerts"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include(router.urls)),
]
