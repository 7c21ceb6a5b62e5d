"""The shape of a job's timeline in the API (``portal.jobs.timeline``): when it was submitted, each attempt's wait,
run and size, and how it ended."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class TimelineAttemptSerializer(serializers.Serializer[dict[str, Any]]):
    """One start of the job (``portal.jobs.timeline.Attempt``)."""

    number = serializers.IntegerField(help_text="1 for the first start; a requeue or preemption starts the next.")
    queued_from = serializers.DateTimeField(help_text="When the wait before this start began.")
    started_at = serializers.DateTimeField()
    queued_seconds = serializers.FloatField(help_text="Seconds it waited for this start.")
    ended_at = serializers.DateTimeField(allow_null=True, help_text="Null while this attempt runs.")
    ran_seconds = serializers.FloatField(help_text="Seconds this attempt ran (so far, while it runs).")
    outcome = serializers.CharField(
        allow_null=True, help_text="The state it left running for: pending (requeued, preempted) or a final state."
    )
    ended_by = serializers.CharField(
        allow_null=True, help_text="The event that ended it: requeued, preempted, resized, ..."
    )
    gpus = serializers.IntegerField(
        allow_null=True, help_text="Its size, for an elastic job (a resize starts a new attempt); null otherwise."
    )


class TimelineSerializer(serializers.Serializer[dict[str, Any]]):
    """A job's timeline, as its page shows it (``portal.jobs.timeline``)."""

    submitted_at = serializers.DateTimeField()
    waiting_since = serializers.DateTimeField(
        allow_null=True, help_text="A pending job: when it last entered the queue."
    )
    queued_seconds = serializers.FloatField(help_text="Seconds spent waiting over all attempts, so far.")
    ran_seconds = serializers.FloatField(help_text="Seconds run over all attempts, so far.")
    finished_at = serializers.DateTimeField(allow_null=True)
    outcome = serializers.CharField(allow_null=True, help_text="The final state, once the job is over.")
    attempts = TimelineAttemptSerializer(many=True)
