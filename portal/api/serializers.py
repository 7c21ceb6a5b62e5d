"""The error answers every API shares, for the schema only: ``portal.api.exceptions`` renders them and
``portal.api.schema`` documents them."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

#: Column bounds (integer, bigint). A number its column cannot hold must be a 400 on its field, not a database
#: error (a 500) when it is stored or compared. Ref: schema fuzzing, tests/portal/api/test_schema_fuzz.py
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """A refusal that names no field at fault: DRF's own (401, 403, 404, 415, ...) and the domain's."""

    detail = serializers.CharField(help_text="What went wrong, in words.")
    code = serializers.CharField(
        required=False,
        help_text=(
            "Only on domain refusals: permission_denied, not_found, conflict, quota_exceeded, invalid_transition, "
            "invalid."
        ),
    )


class ValidationErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Field errors: ``{"gpus": ["..."]}``. Its keys are the input's own, so ``portal.api.schema`` gives its schema."""
