"""The submit serializer's elastic fields (issue #19): ``max_gpus`` and a measured ``scaling`` curve. The job
services check them (``portal.jobs.elastic_spec``); here only their shape, and that an array takes neither."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class ElasticSubmitFields(serializers.Serializer[dict[str, Any]]):
    max_gpus = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        help_text="An elastic job (issue #19, docs/elastic.md): the most GPUs it may grow to when GPUs are idle; "
        "`gpus` is the size it is always given. It runs at `gpus` times a power of two, or at `max_gpus`. A resize "
        "restarts it from its checkpoint (SIGUSR1 first) with WORLD_SIZE and the ranks of the new size. Whole GPUs "
        "only, not with `array`. Omit or null: inelastic.",
    )
    scaling = serializers.DictField(
        child=serializers.FloatField(),
        required=False,
        allow_null=True,
        default=None,
        help_text='An elastic job\'s measured speedups over one GPU by size, e.g. {"1": 1, "4": 3.6, "8": 6.5}: '
        "the elastic step values each size by it. Omit for the default curve (Amdahl, 95 % parallel).",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)
        if attrs.get("array") is not None:  # job_array_submit takes neither
            for name in ("max_gpus", "scaling"):
                if attrs.pop(name, None) is not None:
                    raise serializers.ValidationError({name: "Array tasks cannot be elastic yet: omit this field."})
        return attrs
