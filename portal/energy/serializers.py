"""Shapes of the staff power API (``POST /api/v1/nodes/{name}/power/``)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class PowerRequestSerializer(serializers.Serializer[dict[str, Any]]):
    action = serializers.ChoiceField(choices=["off", "on"], help_text="off: power the node down; on: wake it.")


class PowerReplySerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField()
    action = serializers.CharField()
    ok = serializers.BooleanField(help_text="Whether the site's power command exited 0 within its timeout.")
    detail = serializers.CharField(help_text="What the command said, or why it failed.")
    power = serializers.CharField(help_text="The node's power now: on, off or waking.")
