"""A reclaim: a serving system taking back some of the nodes it lent to training (issue #19)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Reclaim(models.Model):
    """One ``POST /api/v1/pools/{pool}/reclaim/``: what was asked (``count`` nodes within ``deadline_seconds``), what
    Corral chose (``nodes``, the elastic jobs ``shrunk`` to a new size, the jobs ``preempted``) and what the plan
    said it costs (``cost_gpu_seconds``, the formula of ``scheduling.core.loan``), then how it went: each node's
    time of return (``returned``), the nodes handed back at the deadline with work still on them (``forced``), and
    ``finished_at`` once every chosen node is back. ``late``: not every node was empty by the deadline.

    The lists are copies of names and ids, not foreign keys: a reclaim is a record of what happened, and it must
    still read the same after a node is renamed or a job is purged."""

    pool = models.SlugField(max_length=50, db_index=True)
    count = models.PositiveIntegerField()
    deadline_seconds = models.FloatField()
    requested_at = models.DateTimeField()
    deadline_at = models.DateTimeField()
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="reclaims"
    )
    nodes = models.JSONField(default=list, help_text="The nodes chosen to give back, in the order chosen.")
    shrunk = models.JSONField(default=dict, blank=True, help_text="Elastic jobs shrunk: {job id: new size}.")
    preempted = models.JSONField(default=list, blank=True, help_text="Job ids preempted (checkpoint signal first).")
    cost_gpu_seconds = models.FloatField(default=0.0, help_text="GPU-seconds lost, by the server preemption cost.")
    returned = models.JSONField(default=dict, blank=True, help_text="{node: ISO time it was given back}.")
    forced = models.JSONField(
        default=list, blank=True, help_text="Nodes given back at the deadline while work was still on them."
    )
    finished_at = models.DateTimeField(null=True, blank=True)
    late = models.BooleanField(default=False, help_text="Some node was still busy at the deadline.")

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(count__gte=1), name="%(app_label)s_%(class)s_count_gte_1"),
            models.CheckConstraint(
                condition=Q(deadline_seconds__gte=0), name="%(app_label)s_%(class)s_deadline_not_negative"
            ),
        ]
        indexes = [models.Index(fields=["finished_at"], name="pools_reclaim_open")]

    def __str__(self) -> str:
        return f"reclaim {self.pk} of {self.count} node(s) from {self.pool}"

    @property
    def is_open(self) -> bool:
        return self.finished_at is None
