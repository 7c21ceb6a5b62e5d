"""Telemetry's read endpoints (the agents' ``POST /api/v1/agent/samples/`` is with the other agent calls, in
``portal.nodes.agent_api``).

- ``GET /api/v1/telemetry/gpus/``: every GPU's latest sample, health and predicted risk (``?node=``, ``?health=``).
- ``GET /api/v1/telemetry/alerts/``: drained and at-risk GPU alerts (``?active=true|false``, ``?node=``).

The list views' query parameters are declared once, in ``portal.telemetry.filters`` (a bad value is a 400 naming it).
"""

from __future__ import annotations

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics

from portal.nodes.models import Gpu
from portal.telemetry.filters import AlertFilter, GpuTelemetryFilter
from portal.telemetry.models import Alert
from portal.telemetry.selectors import alert_list, gpus_with_telemetry
from portal.telemetry.serializers import AlertSerializer, GpuTelemetrySerializer


@extend_schema(tags=["telemetry"])
class GpuTelemetryView(generics.ListAPIView[Gpu]):
    """Every present GPU with its latest sample, health and predicted failure risk. Any signed-in user."""

    serializer_class = GpuTelemetrySerializer
    filterset_class = GpuTelemetryFilter

    def get_queryset(self) -> QuerySet[Gpu]:
        return gpus_with_telemetry()


@extend_schema(tags=["telemetry"])
class AlertListView(generics.ListAPIView[Alert]):
    """Alerts raised for drained (critical) and predicted-to-fail (warning) GPUs, newest first."""

    serializer_class = AlertSerializer
    filterset_class = AlertFilter

    def get_queryset(self) -> QuerySet[Alert]:
        return alert_list()
