"""The filtersets of telemetry's list endpoints (``GET /api/v1/telemetry/gpus/`` and ``/alerts/``).

Query parameters are parsed here, once, as the jobs API does with ``portal.jobs.filters.JobFilter``: a value that
does not parse is a 400 naming the parameter (``{"health": ["Select a valid choice. …"]}``), never a 500 and never
silently ignored, and drf-spectacular documents every parameter in the OpenAPI schema from these declarations.
"""

from __future__ import annotations

import django_filters

from portal.api.filters import StrictBooleanFilter
from portal.nodes.models import Gpu, GpuHealth
from portal.telemetry.models import Alert


class GpuTelemetryFilter(django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="node__name", help_text="Only this node's GPUs (the node's name).")
    health = django_filters.ChoiceFilter(
        choices=GpuHealth.choices, help_text="Only GPUs in this health state: healthy, cordoned or unhealthy."
    )

    class Meta:
        model = Gpu
        fields = ["node", "health"]


class AlertFilter(django_filters.FilterSet):
    active = StrictBooleanFilter(
        field_name="resolved_at",
        lookup_expr="isnull",
        help_text="true: only alerts not yet resolved; false: only resolved ones. Omitted: both.",
    )
    node = django_filters.CharFilter(field_name="node__name", help_text="Only this node's alerts (the node's name).")

    class Meta:
        model = Alert
        fields = ["active", "node"]
