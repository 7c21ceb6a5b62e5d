"""The live side of energy saving: node demand per minute, every power command Corral ran, the trained forecaster."""

from __future__ import annotations

from django.db import models
from django.db.models import F, Q

from portal.nodes.models import Node


class DemandSample(models.Model):
    """Node demand in one minute, read from the live rows by the beat task: how many of the nodes energy saving
    manages held an active allocation (``in_use``), and how many it manages (``total``: the training pool's nodes
    that are up or draining, or powered down or waking by Corral). The forecaster learns from these rows; they are
    kept for ``CORRAL_ENERGY_SAMPLE_DAYS``."""

    time = models.DateTimeField(unique=True, help_text="The minute (UTC, seconds zero).")
    in_use = models.PositiveIntegerField()
    total = models.PositiveIntegerField()

    class Meta:
        ordering = ["time"]
        constraints = [
            models.CheckConstraint(condition=Q(in_use__lte=F("total")), name="%(app_label)s_%(class)s_in_use_lte_total")
        ]

    def __str__(self) -> str:
        return f"{self.time:%Y-%m-%d %H:%M}: {self.in_use}/{self.total}"


class PowerActionKind(models.TextChoices):
    OFF = "off", "Power down"
    ON = "on", "Power up"


class PowerAction(models.Model):
    """One power command run for a node (or, with ``by`` "agent", a node found back on by itself), whether it
    worked and what it said. Node-hours saved are read from this log: a node is off from a power-down that worked
    until the next power-up that worked (``portal.energy.selectors.node_hours_saved``)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="power_actions")
    at = models.DateTimeField(db_index=True)
    action = models.CharField(max_length=8, choices=PowerActionKind.choices)
    ok = models.BooleanField()
    detail = models.CharField(max_length=255, blank=True)
    by = models.CharField(max_length=150, help_text="planner, waiting jobs, admin:<user>, agent.")

    class Meta:
        ordering = ["-at", "-pk"]
        indexes = [models.Index(fields=["node", "at"], name="energy_action_node_at")]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=PowerActionKind.values), name="%(app_label)s_%(class)s_action_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.node_id} {self.action} at {self.at:%Y-%m-%d %H:%M} ({'ok' if self.ok else 'failed'})"


class DemandModel(models.Model):
    """One trained node-demand forecaster (``scheduling.energy.forecast.DemandForecaster``), pickled. The planner
    uses the newest whose scikit-learn version matches the running one; older rows are pruned at each training."""

    trained_at = models.DateTimeField(db_index=True)
    steps = models.PositiveIntegerField(help_text="10-minute steps of history it learnt from.")
    history_start = models.DateTimeField()
    history_end = models.DateTimeField()
    sklearn_version = models.CharField(max_length=32)
    artifact = models.BinaryField()

    class Meta:
        ordering = ["-trained_at", "-pk"]

    def __str__(self) -> str:
        return f"demand model of {self.trained_at:%Y-%m-%d %H:%M} ({self.steps} steps)"
