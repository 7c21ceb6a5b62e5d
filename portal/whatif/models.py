"""A what-if run: the parameters an admin asked for, where the replay is, and what it found."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class WhatIfState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class WhatIfRun(models.Model):
    """One replay of the finished jobs submitted in ``[since, until)`` under each of ``policies``, on a copy of the
    live cluster's nodes (``layout``) or a uniform cluster of ``nodes`` x ``gpus_per_node`` GPUs, with the tenants'
    quotas of the day (``quotas``) or none, and fair share's usage half-life (``fair_share_half_life_hours``) or none.

    The layout and quotas are copied when the run is asked for, so a run replays what its page says it did even
    after nodes or quotas change. With a layout, ``nodes``, ``gpus_per_node`` and ``racks`` are the layout's count,
    largest node and racks named.

    ``queued`` until a worker takes it (``running``), then ``done`` with ``results`` or ``failed`` with a one-sentence
    ``error`` meant for the page. ``live_policy`` is ``CORRAL_POLICY`` when the run was asked for, so the page keeps
    comparing against the policy that produced the history even after the setting changes. ``results`` holds, per
    policy, the simulator's summary and a few small plotly figure dicts (see ``portal.whatif.results``).
    """

    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="whatif_runs")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    since = models.DateTimeField(null=True, blank=True, help_text="First submission replayed (inclusive).")
    until = models.DateTimeField(null=True, blank=True, help_text="Submissions before this (exclusive).")
    policies = models.JSONField(default=list)
    live_policy = models.CharField(max_length=60)
    placement = models.CharField(max_length=20)
    preemption_overhead = models.CharField(max_length=20, default="0", help_text="Seconds, or 'helios'.")
    nodes = models.PositiveIntegerField()
    gpus_per_node = models.PositiveIntegerField()
    racks = models.PositiveIntegerField(default=1)
    layout = models.JSONField(
        default=list,
        blank=True,
        help_text="The nodes replayed as [GPUs, rack] pairs, copied from the live cluster when the run was asked "
        "for; empty: a uniform cluster of nodes x gpus_per_node.",
    )
    quotas = models.JSONField(
        null=True,
        blank=True,
        help_text="The tenant quotas applied, {slug: {gpu_cap, guaranteed_gpus, user_cap}}, copied when the run was "
        "asked for; null: none applied.",
    )
    fair_share_half_life_hours = models.FloatField(
        null=True,
        blank=True,
        help_text="Half-life of the usage history fair share replayed with (+quota policies); null: no fair share.",
    )
    # Sharing (issue #17): the window's shares of a GPU also replayed, a GPU each and under each share placer,
    # on a copy of the live shared GPUs (``shared_layout``) or ``shared_gpus`` uniform 80 GiB ones.
    sharing = models.BooleanField(default=False, help_text="Also replay the window's shares of a GPU.")
    share_placers = models.JSONField(default=list, blank=True, help_text="The share placers replayed, in order.")
    shared_gpus = models.PositiveIntegerField(
        null=True, blank=True, help_text="The shared GPUs replayed on (the live copy's count, or a uniform count)."
    )
    shared_layout = models.JSONField(
        default=list,
        blank=True,
        help_text="The live shared GPUs as [node, index, memory bytes, max clients], copied when the run was asked "
        "for; empty: shared_gpus uniform 80 GiB GPUs.",
    )
    # Elastic capacity (issue #19): one policy also replayed with no loaning and no elasticity, then with elastic
    # jobs and a loaned inference pool (``portal.whatif.elastic_replay``).
    elastic = models.JSONField(
        null=True,
        blank=True,
        help_text="The elastic replay asked for: {policy, elastic_share, elastic_factor, loan_pool_servers, "
        "loan_pool_gpus, reclaim_deadline}; null: none.",
    )
    elastic_results = models.JSONField(
        null=True,
        blank=True,
        help_text="The elastic replay's arms, {policy, arms: [{arm, ...summary}]}; null until done, or none asked.",
    )

    state = models.CharField(max_length=16, choices=WhatIfState.choices, default=WhatIfState.QUEUED)
    jobs = models.PositiveIntegerField(default=0, help_text="Finished jobs replayed.")
    error = models.TextField(blank=True)
    results = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints = [
            models.CheckConstraint(
                condition=Q(state__in=WhatIfState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
            models.CheckConstraint(
                condition=Q(nodes__gte=1, gpus_per_node__gte=1, racks__gte=1),
                name="%(app_label)s_%(class)s_cluster_gte_1",
            ),
        ]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.state})"

    @property
    def is_finished(self) -> bool:
        return self.state in (WhatIfState.DONE, WhatIfState.FAILED)
