"""What the live scheduling loop keeps: a short history of its rounds, for dashboards and /metrics."""

from __future__ import annotations

from django.db import models


class SchedulerRound(models.Model):
    """One scheduling round: when, how long it took, and what it did. Pruned after a day by the node sweep."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    duration_ms = models.FloatField()
    policy = models.CharField(max_length=40)
    pending = models.PositiveIntegerField()
    started = models.PositiveIntegerField()
    preempted = models.PositiveIntegerField()

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"round at {self.at:%H:%M:%S}: {self.started} started"
