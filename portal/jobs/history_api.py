"""``GET /api/v1/history/trace/``: the cluster's finished jobs as a simulator trace, for admins.

The export is what makes "replay your own history under another policy before switching" work: its CSV is the
shared trace schema that ``corral simulate`` reads, including users, tenants and job names (which QSSF learns
from). Staff only, because it lists every tenant's jobs.
"""

from __future__ import annotations

from typing import Any

from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import permissions, serializers
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.api.renderers import CsvRenderer
from portal.api.serializers import ErrorSerializer
from portal.jobs.selectors import job_history_trace
from scheduling.sim.trace import trace_lines


class HistoryWindow(serializers.Serializer[dict[str, Any]]):
    """Which submissions to export: ``since`` (inclusive) to ``until`` (exclusive); dates or ISO date-times."""

    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and until <= since:
            raise serializers.ValidationError({"until": "must be later than since."})
        return attrs


class HistoryTraceView(APIView):
    permission_classes = [permissions.IsAdminUser]
    renderer_classes = [JSONRenderer, CsvRenderer]

    @extend_schema(
        operation_id="history_trace",
        parameters=[
            OpenApiParameter(
                "since", OpenApiTypes.STR, description="First submission time to include: a date or ISO 8601 date-time."
            ),
            OpenApiParameter(
                "until", OpenApiTypes.STR, description="Only submissions before this: a date or ISO 8601 date-time."
            ),
        ],
        responses={
            (200, "text/csv"): OpenApiTypes.STR,
            403: OpenApiResponse(ErrorSerializer, description="Not staff: the export lists every tenant's jobs."),
        },
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        """Finished jobs submitted in the window, oldest first, as CSV in the shared trace schema."""
        window = HistoryWindow(data=request.query_params)
        window.is_valid(raise_exception=True)
        response = StreamingHttpResponse(
            trace_lines(job_history_trace(**window.validated_data)), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="corral-history.csv"'
        return response
