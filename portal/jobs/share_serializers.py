"""The jobs API's shapes for shares of a GPU (issue #17): ``gpus`` as a whole number or a fraction, what a
submission's share fields become, and where a running share runs. Kept apart from ``serializers`` so that module
stays readable; it imports these."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.jobs.models import WorkloadClass
from portal.jobs.share_selectors import JobShare
from portal.jobs.share_spec import (
    MAX_LATENCY_SLO_MS,
    MIN_LATENCY_SLO_MS,
    ShareSpec,
    parse_gpu_memory,
    parse_gpus,
    parse_latency_slo_ms,
)

#: The most GPUs one job may ask for (the submit serializer and the form check it).
MAX_GPUS_PER_JOB = 4096


def _sentence(exc: Exception) -> str:
    """A parser's message ("a job needs ...") as the API's field messages read: capitalised, with a full stop."""
    text = str(exc)
    return f"{text[:1].upper()}{text[1:]}."


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_GPUS_PER_JOB},
            # OpenAPI 3.0: the exclusive bounds are flags on minimum and maximum.
            {"type": "number", "minimum": 0, "exclusiveMinimum": True, "maximum": 1, "exclusiveMaximum": True},
        ]
    }
)
class GpusField(serializers.Field[tuple[int, float | None], object, object, object]):
    """``gpus`` as submitted: whole GPUs, or a share of one GPU (issue #17), parsed by the one rule
    (``portal.jobs.share_spec.parse_gpus``) into ``(gpus, fraction or None)``."""

    def to_internal_value(self, data: object) -> tuple[int, float | None]:
        try:
            gpus, fraction = parse_gpus(data)
        except ValueError as exc:
            raise serializers.ValidationError(_sentence(exc)) from None
        if gpus > MAX_GPUS_PER_JOB:
            raise serializers.ValidationError(f"Ensure this value is less than or equal to {MAX_GPUS_PER_JOB}.")
        return gpus, fraction

    def to_representation(self, value: tuple[int, float | None]) -> object:
        return value


def share_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """A fractional ``gpus`` becomes ``gpus`` 1 and a ``share`` (issue #17); the share's fields need a share."""
    gpus, fraction = attrs["gpus"]
    attrs["gpus"] = gpus
    memory_text = attrs.pop("gpu_memory", None)
    workload_class = attrs.pop("workload_class", None)
    latency_slo = attrs.pop("latency_slo_ms", None)
    if fraction is None:
        given_fields = (
            ("gpu_memory", memory_text),
            ("workload_class", workload_class),
            ("latency_slo_ms", latency_slo),
        )
        for name, given in given_fields:
            if given is not None:
                raise serializers.ValidationError({name: "Only a share (gpus between 0 and 1) takes this field."})
        return attrs
    if attrs.get("array") is not None:
        raise serializers.ValidationError({"gpus": "A job array's tasks take whole GPUs."})
    memory = None
    if memory_text is not None:
        try:
            memory = parse_gpu_memory(memory_text)
        except ValueError as exc:
            raise serializers.ValidationError({"gpu_memory": _sentence(exc)}) from None
    attrs["share"] = ShareSpec(fraction, memory, workload_class or WorkloadClass.OFFLINE.value, latency_slo)
    return attrs


class ShareSerializer(serializers.Serializer[JobShare]):
    node = serializers.CharField()
    gpu_index = serializers.IntegerField()
    compute_percent = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    neighbours = serializers.IntegerField(help_text="Other shares holding the same GPU now.")


class ShareSubmitFields(serializers.Serializer[dict[str, Any]]):
    """The submit serializer's GPU fields: ``gpus`` (whole GPUs or a share), and a share's memory and class."""

    gpus = GpusField(
        help_text="Whole GPUs (1 to 4096, gang-scheduled), or a share of one GPU: a number in (0, 1) such as 0.25, "
        "run under NVIDIA MPS on a GPU an admin marked shared (issue #17; docs/sharing.md)."
    )
    gpu_memory = serializers.CharField(
        required=False,
        max_length=40,
        help_text='A share\'s GPU memory limit, like "16G" or "512M" (binary units). Default: its fraction of the '
        "GPU's memory, less the driver's reserve. Shares only.",
    )
    workload_class = serializers.ChoiceField(
        choices=WorkloadClass.choices,
        required=False,
        help_text="A share's class: online (latency-critical, protected) or offline (the default; best-effort, may be "
        "evicted and is then requeued). Shares only.",
    )
    latency_slo_ms = serializers.IntegerField(
        min_value=MIN_LATENCY_SLO_MS,  # the bounds of share_spec's one rule, so the schema states them
        max_value=MAX_LATENCY_SLO_MS,
        required=False,
        help_text="An online share's p99 latency target in milliseconds: above it the node's agent evicts offline "
        "neighbours from its GPU (the job writes its latency to $CORRAL_LATENCY_FILE). Online shares only.",
    )

    def validate_latency_slo_ms(self, value: int) -> int:
        try:
            return parse_latency_slo_ms(value)
        except ValueError as exc:
            raise serializers.ValidationError(_sentence(exc)) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return share_attrs(attrs)
