"""``GET /api/v1/history/trace/``: the cluster's finished jobs as a simulator trace, for admins.

The export is what makes "replay your own history under another policy before switching" work: its CSV is the
shared trace schema that ``corral simulate`` reads, including users, tenants and job names (which QSSF learns
from). Shares of one GPU (issue #17) fill its ``gpu_milli`` column (the share in 1/1000; empty for whole GPUs) and
``workload_class`` (``online``/``offline``), which ``corral simulate --sharing on`` reads; readers of whole-GPU
traces ignore both. Staff only, because it lists every tenant's jobs.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Iterator
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
from portal.jobs.selectors import HistoryRow, job_history_rows
from scheduling.sim.trace import COLUMNS, trace_lines

#: The columns of the export: ``trace_lines``' own, with the two a sharing replay reads after ``queue_delay``, where
#: the shared schema lists ``gpu_milli`` (``job_name`` stays last, as scripts that read it expect).
EXPORT_COLUMNS = (*COLUMNS[:8], "gpu_milli", "workload_class", *COLUMNS[8:])


def history_lines(rows: Iterable[HistoryRow], chunk: int = 1 << 16) -> Iterator[str]:
    """The export's CSV text in pieces of about ``chunk`` characters. Each job's row is the one ``trace_lines``
    writes (read back, so numbers are formatted by the one writer of trace files), with its share columns added."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for job, fraction, workload_class in rows:
        fields = next(csv.reader(io.StringIO("".join(trace_lines([job])).split("\n", 1)[1])))
        share = ("", "") if fraction is None else (str(round(fraction * 1000)), workload_class)
        writer.writerow([*fields[:8], *share, *fields[8:]])
        if out.tell() >= chunk:
            yield out.getvalue()
            out.seek(0)
            out.truncate()
    if out.tell():
        yield out.getvalue()


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
        """Finished jobs submitted in the window, oldest first, as CSV in the shared trace schema; a share of one GPU
        has `gpu_milli` (its part of the GPU in 1/1000, empty for whole GPUs) and `workload_class` (online or
        offline; empty for whole GPUs)."""
        window = HistoryWindow(data=request.query_params)
        window.is_valid(raise_exception=True)
        response = StreamingHttpResponse(
            history_lines(job_history_rows(**window.validated_data)), content_type="text/csv; charset=utf-8"
        )
        response["Content-Disposition"] = 'attachment; filename="corral-history.csv"'
        return response
