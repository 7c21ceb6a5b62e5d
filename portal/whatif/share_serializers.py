"""The sharing replay's results in the what-if API (issue #17), as ``corral simulate --sharing on --json`` gives
them, and what a request asks of it; ``portal.whatif.serializers`` builds on both."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from scheduling.core.share_placement import PLACERS
from scheduling.sim.replay_rules import MAX_SHARED_GPUS


class ShareRequestFields(serializers.Serializer[dict[str, Any]]):
    """What a what-if request says about sharing; ``WhatIfRequestSerializer`` has these besides its own."""

    sharing = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also replay the window's shares of a GPU (issue #17): a GPU each first (the "
        "whole-GPU baseline), then shares placed by each of `share_placers`. Default: false.",
    )
    share_placers = serializers.ListField(
        child=serializers.CharField(max_length=40),
        required=False,
        default=list,
        max_length=10,
        help_text=f"Share placers to compare, with `sharing`: {', '.join(PLACERS)}. Default: all of them.",
    )
    shared_gpus = serializers.IntegerField(
        min_value=1,
        max_value=MAX_SHARED_GPUS,
        required=False,
        allow_null=True,
        help_text="With `sharing`, replay the shares on this many 80 GiB GPUs. Default: a copy of the live GPUs "
        "marked shared (a 400 when there is none).",
    )


class ShareModeSerializer(serializers.Serializer[dict[str, Any]]):
    """One mode of the sharing replay, as ``corral simulate --sharing on --json`` summarises it. Shares 0 to 1,
    times in seconds."""

    mode = serializers.CharField(help_text="`whole-gpu` (the baseline: a GPU each) or the share placer's name.")
    tasks = serializers.IntegerField()
    allocation = serializers.FloatField(help_text="Part of the shared GPUs held by at least one task, over time.")
    utilization = serializers.FloatField(help_text="Part of their compute kept busy, over time.")
    utilization_allocated = serializers.FloatField(help_text="The same, over the GPUs held only.")
    fragmented_gpus = serializers.FloatField(help_text="GPUs whose room fits no typical share, on average.")
    offline_jct_mean = serializers.FloatField()
    offline_jct_p50 = serializers.FloatField()
    offline_jct_p95 = serializers.FloatField()
    offline_queue_mean = serializers.FloatField()
    online_queue_mean = serializers.FloatField()
    online_slowdown_mean = serializers.FloatField(help_text="Online tasks' time-averaged slowdown, mean over tasks.")
    online_slowdown_p99 = serializers.FloatField()
    online_slowdown_max = serializers.FloatField()
    evictions = serializers.IntegerField()
    evicted_tasks = serializers.IntegerField()
    span = serializers.FloatField()


class ShareResultsSerializer(serializers.Serializer[dict[str, Any]]):
    gpus = serializers.IntegerField(help_text="The shared GPUs replayed on.")
    shares = serializers.IntegerField(help_text="Of them, shares of a GPU; 0: nothing to compare (`modes` empty).")
    modes = ShareModeSerializer(many=True, help_text="The whole-GPU baseline, then each share placer asked for.")
