"""The pools API's shapes: input serializers check types and ranges (400 with field errors); the pool services
decide the rest (an unknown pool, a node of another pool, more nodes than are lent)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.api.serializers import INT_MAX
from portal.pools.models import Reclaim

#: The longest deadline a reclaim may ask for: a week. A serving system wants its servers back in seconds or
#: minutes; the bound keeps the deadline's date representable whatever number arrives.
MAX_DEADLINE_SECONDS = 7 * 86_400.0


class PoolSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(help_text="The pool's slug.")
    nodes = serializers.ListField(child=serializers.CharField(), help_text="Every node of the pool, by name.")
    lent = serializers.ListField(
        child=serializers.CharField(), help_text="Nodes lent to training now (those being given back included)."
    )
    returning = serializers.ListField(
        child=serializers.CharField(), help_text="Nodes a reclaim chose: no new work, handed back once empty."
    )
    open_reclaims = serializers.ListField(
        child=serializers.IntegerField(), help_text="Ids of the reclaims still handing nodes back."
    )


class LendSerializer(serializers.Serializer[dict[str, Any]]):
    nodes = serializers.ListField(
        child=serializers.SlugField(max_length=100),
        min_length=1,
        max_length=10_000,
        help_text="Names of the pool's nodes to lend to training. Lending a lent node changes nothing.",
    )


class LendReplySerializer(serializers.Serializer[Any]):
    pool = serializers.CharField()
    newly_lent = serializers.ListField(child=serializers.CharField(), help_text="Nodes this call lent.")
    lent = serializers.ListField(child=serializers.CharField(), help_text="Every node of the pool lent now.")


class ReclaimRequestSerializer(serializers.Serializer[dict[str, Any]]):
    count = serializers.IntegerField(min_value=1, max_value=INT_MAX, help_text="How many lent nodes to take back.")
    deadline_seconds = serializers.FloatField(
        min_value=0,
        max_value=MAX_DEADLINE_SECONDS,
        help_text="Seconds within which the nodes must be back; at the deadline they are handed back anyway.",
    )


class ReclaimSerializer(serializers.ModelSerializer[Reclaim]):
    requested_by = serializers.SerializerMethodField()
    nodes = serializers.ListField(child=serializers.CharField(), help_text="The nodes Corral gives back.")
    shrunk = serializers.DictField(
        child=serializers.IntegerField(), help_text="Elastic jobs shrunk to leave them: {job id: new size}."
    )
    preempted = serializers.ListField(
        child=serializers.IntegerField(), help_text="Jobs preempted to empty them (checkpoint signal first)."
    )
    returned = serializers.DictField(
        child=serializers.DateTimeField(), help_text="Each node handed back so far, with when."
    )
    forced = serializers.ListField(
        child=serializers.CharField(), help_text="Nodes handed back at the deadline while work was still on them."
    )
    finished = serializers.SerializerMethodField(help_text="Every chosen node is back.")

    class Meta:
        model = Reclaim
        fields = [
            "id",
            "pool",
            "count",
            "deadline_seconds",
            "requested_at",
            "deadline_at",
            "requested_by",
            "nodes",
            "shrunk",
            "preempted",
            "cost_gpu_seconds",
            "returned",
            "forced",
            "late",
            "finished",
            "finished_at",
        ]

    def get_requested_by(self, reclaim: Reclaim) -> str | None:
        return reclaim.requested_by.get_username() if reclaim.requested_by is not None else None

    def get_finished(self, reclaim: Reclaim) -> bool:
        return reclaim.finished_at is not None
