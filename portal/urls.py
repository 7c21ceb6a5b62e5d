"""The site's one URL map: every app's pages, and the REST API under ``/api/v1/``. Each app owns its views; this
module only puts them at their addresses, so it is the one place that imports every app's API and pages."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from portal.api.token import TokenView
from portal.dashboards import api as dashboards_api
from portal.energy import api as energy_api
from portal.jobs import api as jobs_api
from portal.jobs import history_api
from portal.nodes import agent_api, log_api
from portal.nodes import api as nodes_api
from portal.notifications import api as notifications_api
from portal.pools import api as pools_api
from portal.telemetry import api as telemetry_api
from portal.tenants import api as tenants_api
from portal.web import views as web_views
from portal.whatif import api as whatif_api

router = DefaultRouter()
router.register("jobs", jobs_api.JobViewSet, basename="job")
# Not "array": the browser's array pages are named array-detail and so on.
router.register("arrays", jobs_api.JobArrayViewSet, basename="api-array")
router.register("nodes", nodes_api.NodeViewSet, basename="node")
# Not "whatif": the browser's pages are named whatif and whatif-detail.
router.register("whatif", whatif_api.WhatIfViewSet, basename="api-whatif")

api_patterns: list[URLPattern | URLResolver] = [
    path("auth/token/", TokenView.as_view(), name="api-token"),
    path("agent/register/", agent_api.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat/", agent_api.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/samples/", agent_api.SamplesView.as_view(), name="agent-samples"),
    path("agent/logs/", log_api.LogChunkView.as_view(), name="agent-logs"),
    path("history/trace/", history_api.HistoryTraceView.as_view(), name="history-trace"),
    path("usage/", dashboards_api.UsageView.as_view(), name="usage"),
    path("tenants/", tenants_api.TenantListView.as_view(), name="tenant-list-api"),
    path("telemetry/gpus/", telemetry_api.GpuTelemetryView.as_view(), name="telemetry-gpus"),
    path("telemetry/alerts/", telemetry_api.AlertListView.as_view(), name="telemetry-alerts"),
    path("account/notifications/", notifications_api.NotificationSettingsView.as_view(), name="api-notifications"),
    path("account/notifications/test/", notifications_api.NotificationTestView.as_view(), name="api-notify-test"),
    path("pools/", pools_api.PoolListView.as_view(), name="api-pool-list"),
    path("pools/<slug:pool>/lend/", pools_api.PoolLendView.as_view(), name="api-pool-lend"),
    path("pools/<slug:pool>/reclaim/", pools_api.PoolReclaimView.as_view(), name="api-pool-reclaim"),
    path("pools/<slug:pool>/reclaims/<int:reclaim_id>/", pools_api.ReclaimDetailView.as_view(), name="api-reclaim"),
    path("nodes/<slug:name>/power/", energy_api.NodePowerView.as_view(), name="api-node-power"),
    path("schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include(router.urls)),
]

urlpatterns = [
    path("favicon.ico", web_views.favicon, name="favicon"),
    path("admin/", admin.site.urls),
    # The login page (with "Sign in with …" when single sign-on is on) and the OIDC flow: docs/oidc.md.
    path("", include("portal.accounts.urls")),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_patterns)),
    path("", RedirectView.as_view(pattern_name="job-list", permanent=False)),
    path("", include("portal.metrics.urls")),
    path("", include("portal.jobs.urls")),
    path("", include("portal.nodes.urls")),
    path("", include("portal.tenants.urls")),
    path("", include("portal.dashboards.urls")),
    path("", include("portal.whatif.urls")),
    path("", include("portal.notifications.urls")),
    path("", include("portal.pools.urls")),
]
