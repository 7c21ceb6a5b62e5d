"""GPU nodes and their GPUs, as registered by node agents."""

from __future__ import annotations

import hashlib

from django.db import models
from django.db.models import Q

from scheduling.core.loan import TRAINING, takes_work


class NodeState(models.TextChoices):
    UP = "up", "Up"
    DRAINING = "draining", "Draining"  # an admin asked for no new work; running jobs finish
    DOWN = "down", "Down"  # no heartbeat within the timeout (or never registered)


class NodePower(models.TextChoices):
    """Energy saving (issue #19): whether the site's power command has switched the node off."""

    ON = "on", "On"
    OFF = "off", "Powered down"  # switched off through CORRAL_POWER_OFF_COMMAND
    WAKING = "waking", "Waking"  # CORRAL_POWER_ON_COMMAND ran; on again once its agent registers


class Node(models.Model):
    """A machine running ``corral-agent``. The agent authenticates with a per-node token of which only a hash
    is stored, so a database leak does not hand out agent credentials."""

    name = models.SlugField(max_length=100, unique=True)
    hostname = models.CharField(max_length=255, blank=True)
    address = models.CharField(max_length=255, blank=True, help_text="Address other nodes reach (MASTER_ADDR).")
    rack = models.CharField(max_length=100, blank=True)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.DOWN)
    state_reason = models.CharField(max_length=255, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    registered_at = models.DateTimeField(null=True, blank=True)
    agent_version = models.CharField(max_length=50, blank=True)
    token_hash = models.CharField(max_length=64, blank=True, db_index=True, editable=False)
    share_new_gpus = models.BooleanField(
        default=False, help_text="GPUs this node registers for the first time take shares under MPS (issue #17)."
    )
    # Loanable pools (issue #19): a node of a pool other than "training" belongs to a serving system and takes
    # Corral's work only while lent, and not once a reclaim has chosen it (``returning``).
    pool = models.SlugField(max_length=50, default=TRAINING, db_index=True, help_text="training, or a loanable pool.")
    lent = models.BooleanField(default=False, help_text="A loanable pool's node lent to training now.")
    returning = models.BooleanField(default=False, help_text="Chosen by a reclaim: no new work, given back once empty.")
    power = models.CharField(max_length=8, choices=NodePower.choices, default=NodePower.ON)
    power_changed_at = models.DateTimeField(null=True, blank=True)
    power_detail = models.CharField(max_length=255, blank=True, help_text="Why, or what the power command said.")

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=NodeState.values), name="%(app_label)s_%(class)s_state_valid"),
            models.CheckConstraint(condition=Q(power__in=NodePower.values), name="%(app_label)s_%(class)s_power_valid"),
            # Corral's own nodes are never lent or reclaimed; a node is given back only while lent.
            models.CheckConstraint(
                condition=~Q(pool=TRAINING) | Q(lent=False, returning=False),
                name="%(app_label)s_%(class)s_own_not_lent",
            ),
            models.CheckConstraint(
                condition=Q(returning=False) | Q(lent=True), name="%(app_label)s_%(class)s_returning_is_lent"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def takes_new_work(self) -> bool:
        """The one rule for whether rounds may place work here: up, powered on, and Corral's own or lent (and not
        being given back)."""
        on_loan = takes_work(self.pool, self.name, [self.name] if self.lent and not self.returning else [])
        return self.state == NodeState.UP and self.power == NodePower.ON and on_loan

    @staticmethod
    def hash_token(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()


class GpuHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    CORDONED = "cordoned", "Cordoned"  # predicted to fail: no new long jobs, running jobs asked to checkpoint
    UNHEALTHY = "unhealthy", "Unhealthy"  # a fatal fault was seen: drained, jobs requeued elsewhere


class Gpu(models.Model):
    """One GPU of a node, identified by its NVML uuid (stable across reboots and re-registrations)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField(help_text="NVML index on the node (what CUDA_VISIBLE_DEVICES uses).")
    uuid = models.CharField(max_length=100, unique=True)
    model = models.CharField(max_length=100, blank=True)
    memory_mb = models.PositiveIntegerField(default=0)
    health = models.CharField(max_length=16, choices=GpuHealth.choices, default=GpuHealth.HEALTHY)
    health_detail = models.CharField(max_length=255, blank=True)
    present = models.BooleanField(default=True, help_text="False once the agent stops reporting this GPU.")
    # Space-sharing under MPS (issue #17), set by an admin: a shared GPU takes shares of jobs asking for part of a
    # GPU, up to ``max_clients`` at once, and never a whole-GPU job.
    shared = models.BooleanField(default=False, help_text="Accepts shares (jobs asking for part of a GPU) under MPS.")
    max_clients = models.PositiveSmallIntegerField(default=48, help_text="Most shares at once (MPS: 48 on Volta+).")

    class Meta:
        ordering = ["node__name", "index"]
        constraints = [
            # A replaced GPU keeps its old row (history points at it) but gives up its index.
            models.UniqueConstraint(
                fields=["node", "index"], condition=Q(present=True), name="%(app_label)s_%(class)s_unique_node_index"
            ),
            models.CheckConstraint(
                condition=Q(health__in=GpuHealth.values), name="%(app_label)s_%(class)s_health_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_clients__gte=1, max_clients__lte=48), name="%(app_label)s_%(class)s_max_clients_range"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"
