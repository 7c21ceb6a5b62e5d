"""Filters every list endpoint may share (the per-model filtersets live with their apps)."""

from __future__ import annotations

from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError


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
