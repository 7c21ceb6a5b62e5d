"""The telemetry API's shapes: the agents' sample batches and their answer (for the schema only: the batch is
parsed by ``portal.telemetry.batch`` and the answer rendered with ``IngestResult.as_dict``), and what the read
endpoints return."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.nodes.models import Gpu
from portal.telemetry.batch import INT_LIMITS, INT_RANGE, MAX_ITEMS_PER_BATCH, TIMESTAMP_RANGE
from portal.telemetry.models import Alert, LatestSample
from portal.telemetry.services.ingest import IngestResult
from telemetry.fields import METRIC_NAMES, METRICS, Column, Kind, MetricField
from telemetry.sample import GpuSample, XidEvent


def _number() -> serializers.FloatField:
    """A reading the GPU may be unable to report: ``null`` or absent then, never 0."""
    return serializers.FloatField(required=False, allow_null=True)


def _flag() -> serializers.BooleanField:
    return serializers.BooleanField(required=False, allow_null=True)


def _count(name: str) -> serializers.IntegerField:
    """An integer reading, within its column's range (``INT_LIMITS``)."""
    return serializers.IntegerField(
        min_value=-INT_LIMITS[name], max_value=INT_LIMITS[name], required=False, allow_null=True
    )


_TIMESTAMP = (
    f"Seconds since the epoch (UTC), between {TIMESTAMP_RANGE[0]:.0f} and {TIMESTAMP_RANGE[1]:.0f} (exclusive)."
)
_UUID = "The GPU's uuid, without NUL characters."


def _reading(metric: MetricField) -> serializers.Field[Any, Any, Any, Any]:
    """The field of one reading, by its column; ``xid`` (a code, never negative) says what its values mean."""
    if metric.kind is Kind.XID:
        return serializers.IntegerField(
            min_value=0,
            max_value=INT_LIMITS[metric.name],
            required=False,
            allow_null=True,
            help_text="The last XID since the previous sample; 0 or null: none.",
        )
    if metric.column is Column.FLOAT:
        return _number()
    if metric.column is Column.BOOL:
        return _flag()
    return _count(metric.name)


class GpuSampleSerializer(serializers.Serializer[GpuSample]):
    """One GPU at one instant, as ``GpuSample.to_dict`` writes it (see telemetry/sample.py for each field)."""

    # The docstring above is the OpenAPI description. The readings are not declared here: get_fields builds them
    # from their one definition, telemetry.fields.METRICS.

    gpu_uuid = serializers.CharField(help_text=_UUID + " One the node never registered counts as rejected.")
    index = serializers.IntegerField()
    timestamp = serializers.FloatField(help_text=_TIMESTAMP)
    processes = serializers.ListField(
        child=serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2),
        required=False,
        help_text="[pid, used MiB] of each compute process on the GPU.",
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        """The declared fields with one per reading (:data:`telemetry.fields.METRICS`, in its order) inserted before
        ``processes``, the order ``GpuSample.to_dict`` writes. DRF's hook for fields not declared in the class body;
        each call builds fresh instances, as it does for declared ones."""
        fields = super().get_fields()
        processes = fields.pop("processes")
        return {**fields, **{metric.name: _reading(metric) for metric in METRICS}, "processes": processes}


class XidEventSerializer(serializers.Serializer[XidEvent]):
    gpu_uuid = serializers.CharField(help_text=_UUID)
    xid = serializers.IntegerField(min_value=0, max_value=INT_RANGE["IntegerField"])
    timestamp = serializers.FloatField(help_text=_TIMESTAMP)


class TelemetryBatchSerializer(serializers.Serializer[dict[str, Any]]):
    """One POST of a node agent's telemetry (docs/agent-protocol.md). Any field may be left out."""

    samples = GpuSampleSerializer(many=True, required=False, help_text=f"At most {MAX_ITEMS_PER_BATCH}.")
    xid_events = XidEventSerializer(many=True, required=False, help_text=f"At most {MAX_ITEMS_PER_BATCH}.")
    dropped = serializers.IntegerField(
        min_value=0,
        max_value=INT_RANGE["BigIntegerField"],
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


class LatestSampleSerializer(serializers.Serializer[LatestSample]):
    def to_representation(self, instance: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"ts": instance.ts.isoformat()}
        out.update({name: getattr(instance, name) for name in METRIC_NAMES})
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


class AlertSerializer(serializers.ModelSerializer[Alert]):
    node = serializers.CharField(source="node.name")
    gpu = serializers.CharField(source="gpu.uuid", allow_null=True, default=None)
    active = serializers.BooleanField(read_only=True)

    class Meta:
        model = Alert
        fields = ["id", "at", "severity", "node", "gpu", "title", "message", "active", "resolved_at", "resolved_by"]
