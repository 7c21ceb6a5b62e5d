"""The site's URLs plus the two telemetry API routes the lead adds to portal/api/urls.py, so these tests run before
and after that line lands (a duplicate route is harmless: the first match wins)."""

from django.urls import path

from portal.urls import urlpatterns as site
from telemetry import api

urlpatterns = [
    path("api/v1/telemetry/gpus/", api.GpuTelemetryView.as_view(), name="telemetry-gpus"),
    path("api/v1/telemetry/alerts/", api.AlertListView.as_view(), name="telemetry-alerts"),
    *site,
]
