"""The filtersets of telemetry's list endpoints (``GET /api/v1/telemetry/gpus/`` and ``/alerts/``).

Query parameters are parsed here, once, as the jobs API does with ``portal.api.filters.JobFilter``: a value that
does not parse is a 400 naming the parameter (``{"health": ["Select a valid choice. …"]}``), never a 500 and never
silently ignored, and drf-spectacular documents every parameter in the OpenAPI schema from these declarations.
"""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError

from portal.nodes.models import Gpu, GpuHealth
from telemetry.models import Alert


class StrictBooleanField(forms.Field):
    """``true``/``false`` (also ``1``/``0``, any case); empty means "not given". Anything else is an error, where
    django-filter's own boolean widget would quietly read it as "not given" and return the unfiltered list."""

    default_error_messages = {"invalid": "Enter true or false."}
    _VALUES = {"true": True, "1": True, "false": False, "0": False}

    def to_python(self, value: Any) -> bool | None:
        if value in self.empty_values:
            return None
        parsed = self._VALUES.get(str(value).strip().lower())
        if parsed is None:
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return parsed

    def validate(self, value: Any) -> None:
        """``None`` is a valid "not given" here; the base class would call it missing when required."""
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")


class StrictBooleanFilter(django_filters.BooleanFilter):
    """A boolean filter that refuses what it cannot read (see :class:`StrictBooleanField`)."""

    field_class = StrictBooleanField


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
