"""Telemetry's REST endpoints.

- ``POST /api/v1/agent/samples/``: GPU telemetry batches from node agents (docs/agent-protocol.md). Validated
  with the wire format's own ``from_dict`` (the one definition shared with the agent); bad input is a 400 naming
  the field, never a 500.
- ``GET /api/v1/telemetry/gpus/``: every GPU's latest sample, health and predicted risk (``?node=``, ``?health=``).
- ``GET /api/v1/telemetry/alerts/``: drained and at-risk GPU alerts (``?active=true|false``, ``?node=``).

The list views' query parameters are declared once, in ``telemetry.filters`` (a bad value is a 400 naming it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.agent_views import AgentView
from portal.nodes.models import Gpu, Node
from telemetry.filters import AlertFilter, GpuTelemetryFilter
from telemetry.models import METRIC_FIELDS, Alert, LatestSample, Sample
from telemetry.sample import GpuSample, XidEvent
from telemetry.selectors import alert_list, gpus_with_telemetry
from telemetry.services import IngestResult, telemetry_ingest

#: Far above what an agent sends in one POST (500), low enough that one request cannot hold the node's lock long.
MAX_ITEMS_PER_BATCH = 10_000
#: Seconds since the epoch a timestamp may take: 1970 up to about 2514, well inside what the database stores.
TIMESTAMP_RANGE = (0.0, float(2**34))
_INT_RANGE = {"IntegerField": 2**31 - 1, "BigIntegerField": 2**63 - 1}
#: Each integer reading's column bound. ``from_dict`` checks types only; a value its column cannot hold must be a
#: 400 here, not a failed COPY (a 500) later.
_INT_LIMITS = {
    name: _INT_RANGE[Sample._meta.get_field(name).get_internal_type()]
    for name in METRIC_FIELDS
    if Sample._meta.get_field(name).get_internal_type() in _INT_RANGE
}

T = TypeVar("T")


def _check_time(value: float) -> None:
    if not TIMESTAMP_RANGE[0] < value < TIMESTAMP_RANGE[1]:
        raise ValueError("'timestamp' is out of range (seconds since 1970)")


def _check_uuid(value: str) -> None:
    # PostgreSQL text cannot hold NUL: looking such a uuid up fails in the database (a 500), so it is a 400 here.
    if "\x00" in value:
        raise ValueError("'gpu_uuid' must not contain NUL characters")


def _sample(item: Any) -> GpuSample:
    sample = GpuSample.from_dict(item)
    _check_uuid(sample.gpu_uuid)
    _check_time(sample.timestamp)
    for name, limit in _INT_LIMITS.items():
        value = getattr(sample, name)
        if value is not None and not -limit <= value <= limit:
            raise ValueError(f"{name!r} is out of range")
    if sample.xid < 0:
        raise ValueError("'xid' must be >= 0")
    return sample


def _event(item: Any) -> XidEvent:
    event = XidEvent.from_dict(item)
    _check_uuid(event.gpu_uuid)
    _check_time(event.timestamp)
    if not 0 <= event.xid <= _INT_RANGE["IntegerField"]:
        raise ValueError("'xid' is out of range")
    return event


def _parse_list(data: dict[str, Any], key: str, parse: Callable[[Any], T]) -> list[T]:
    items = data.get(key, [])
    if not isinstance(items, list):
        raise ValidationError({key: ["must be a list"]})
    if len(items) > MAX_ITEMS_PER_BATCH:
        raise ValidationError({key: [f"at most {MAX_ITEMS_PER_BATCH} items per request"]})
    parsed = []
    for i, item in enumerate(items):
        try:
            parsed.append(parse(item))
        except ValueError as exc:
            raise ValidationError({key: [f"item {i}: {exc}"]}) from None
    return parsed


# --- the samples body and answer, for the schema only: the view parses with from_dict and renders as_dict --------
def _number() -> serializers.FloatField:
    """A reading the GPU may be unable to report: ``null`` or absent then, never 0."""
    return serializers.FloatField(required=False, allow_null=True)


def _flag() -> serializers.BooleanField:
    return serializers.BooleanField(required=False, allow_null=True)


def _count(name: str) -> serializers.IntegerField:
    """An integer reading, within its column's range (``_INT_LIMITS``)."""
    return serializers.IntegerField(
        min_value=-_INT_LIMITS[name], max_value=_INT_LIMITS[name], required=False, allow_null=True
    )


_TIMESTAMP = (
    f"Seconds since the epoch (UTC), between {TIMESTAMP_RANGE[0]:.0f} and {TIMESTAMP_RANGE[1]:.0f} (exclusive)."
)
_UUID = "The GPU's uuid, without NUL characters."


class GpuSampleSerializer(serializers.Serializer[GpuSample]):
    """One GPU at one instant, as ``GpuSample.to_dict`` writes it (see telemetry/sample.py for each field)."""

    gpu_uuid = serializers.CharField(help_text=_UUID + " One the node never registered counts as rejected.")
    index = serializers.IntegerField()
    timestamp = serializers.FloatField(help_text=_TIMESTAMP)
    gpu_util = _number()
    mem_used_mb = _count("mem_used_mb")
    mem_total_mb = _count("mem_total_mb")
    temperature_c = _number()
    power_w = _number()
    sm_clock_mhz = _count("sm_clock_mhz")
    throttle_reasons = _count("throttle_reasons")
    ecc_sbe_volatile = _count("ecc_sbe_volatile")
    ecc_dbe_volatile = _count("ecc_dbe_volatile")
    ecc_corrected_total = _count("ecc_corrected_total")
    ecc_uncorrected_total = _count("ecc_uncorrected_total")
    retired_pages = _count("retired_pages")
    remapped_rows = _count("remapped_rows")
    remapped_rows_pending = _flag()
    remapped_rows_failed = _flag()
    pcie_replay = _count("pcie_replay")
    xid = serializers.IntegerField(
        min_value=0,
        max_value=_INT_LIMITS["xid"],
        required=False,
        allow_null=True,
        help_text="The last XID since the previous sample; 0 or null: none.",
    )
    lost = _flag()
    processes = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        required=False,
        help_text="[pid, used MiB] of each compute process on the GPU.",
    )


class XidEventSerializer(serializers.Serializer[XidEvent]):
    gpu_uuid = serializers.CharField(help_text=_UUID)
    xid = serializers.IntegerField(min_value=0, max_value=_INT_RANGE["IntegerField"])
    timestamp = serializers.FloatField(help_text=_TIMESTAMP)


class TelemetryBatchSerializer(serializers.Serializer[dict[str, Any]]):
    """One POST of a node agent's telemetry (docs/agent-protocol.md). Any field may be left out."""

    samples = GpuSampleSerializer(many=True, required=False, help_text=f"At most {MAX_ITEMS_PER_BATCH}.")
    xid_events = XidEventSerializer(many=True, required=False, help_text=f"At most {MAX_ITEMS_PER_BATCH}.")
    dropped = serializers.IntegerField(
        min_value=0,
        max_value=_INT_RANGE["BigIntegerField"],
        required=False,
        help_text="Samples and events the agent's buffer discarded since it started (0 if absent).",
    )


class IngestResultSerializer(serializers.Serializer[IngestResult]):
    """What became of the batch: each sample is counted in exactly one of the first three."""

    accepted = serializers.IntegerField(help_text="New samples stored.")
    duplicates = serializers.IntegerField(help_text="Samples already stored (a retried batch).")
    rejected = serializers.IntegerField(help_text="Samples for a GPU the node never registered, or from the future.")
    xid_events = serializers.IntegerField(help_text="New XID events recorded.")
    drained = serializers.ListField(
        child=serializers.CharField(), help_text="Uuids of the GPUs this batch drained (a fatal XID)."
    )


class SamplesView(AgentView):
    """Take one batch from the authenticated node's agent; answers what became of each sample."""

    @extend_schema(tags=["agent"], request=TelemetryBatchSerializer, responses={200: IngestResultSerializer})
    def post(self, request: Request) -> Response:
        data = request.data
        if not isinstance(data, dict):
            raise ValidationError({"detail": "the body must be a JSON object"})
        samples = _parse_list(data, "samples", _sample)
        events = _parse_list(data, "xid_events", _event)
        dropped = data.get("dropped", 0)
        if (
            isinstance(dropped, bool)
            or not isinstance(dropped, int)
            or not 0 <= dropped <= _INT_RANGE["BigIntegerField"]
        ):
            raise ValidationError({"dropped": [f"must be an integer from 0 to {_INT_RANGE['BigIntegerField']}"]})
        result = telemetry_ingest(node=cast(Node, request.auth), samples=samples, xid_events=events, dropped=dropped)
        return Response(result.as_dict())


class LatestSampleSerializer(serializers.Serializer[LatestSample]):
    def to_representation(self, instance: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": instance.ts.isoformat()}
        out.update({name: getattr(instance, name) for name in METRIC_FIELDS})
        out["processes"] = instance.processes
        return out


class GpuTelemetrySerializer(serializers.ModelSerializer[Gpu]):
    node = serializers.CharField(source="node.name")
    job = serializers.IntegerField(source="job_id", allow_null=True)
    risk = serializers.SerializerMethodField()
    risk_scored_at = serializers.SerializerMethodField()
    latest = serializers.SerializerMethodField()

    class Meta:
        model = Gpu
        fields = [
            "node",
            "index",
            "uuid",
            "model",
            "memory_mb",
            "health",
            "health_detail",
            "job",
            "risk",
            "risk_scored_at",
            "latest",
        ]

    def get_risk(self, gpu: Gpu) -> float | None:
        risk = getattr(gpu, "risk", None)
        return None if risk is None else round(risk.risk, 4)

    def get_risk_scored_at(self, gpu: Gpu) -> str | None:
        risk = getattr(gpu, "risk", None)
        return None if risk is None else risk.scored_at.isoformat()

    def get_latest(self, gpu: Gpu) -> dict[str, Any] | None:
        sample = getattr(gpu, "latest_sample", None)
        return None if sample is None else LatestSampleSerializer(sample).data


@extend_schema(tags=["telemetry"])
class GpuTelemetryView(generics.ListAPIView[Gpu]):
    """Every present GPU with its latest sample, health and predicted failure risk. Any signed-in user."""

    serializer_class = GpuTelemetrySerializer
    filterset_class = GpuTelemetryFilter

    def get_queryset(self) -> QuerySet[Gpu]:
        return gpus_with_telemetry()


class AlertSerializer(serializers.ModelSerializer[Alert]):
    node = serializers.CharField(source="node.name")
    gpu = serializers.CharField(source="gpu.uuid", allow_null=True, default=None)
    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = Alert
        fields = ["id", "at", "severity", "node", "gpu", "title", "message", "active", "resolved_at", "resolved_by"]


@extend_schema(tags=["telemetry"])
class AlertListView(generics.ListAPIView[Alert]):
    """Alerts raised for drained (critical) and predicted-to-fail (warning) GPUs, newest first."""

    serializer_class = AlertSerializer
    filterset_class = AlertFilter

    def get_queryset(self) -> QuerySet[Alert]:
        return alert_list()
