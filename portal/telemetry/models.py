"""What the control plane keeps of GPU telemetry: raw samples for a retention window, 1-minute and 1-hour rollups,
the latest sample per GPU, XIDs, health actions, alerts and the failure predictor's models and scores.

The pure half (``telemetry.sample``, ``telemetry.health``, ``telemetry.predict``) never sees these rows; the
services in :mod:`portal.telemetry.services` translate between the two.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from portal.nodes.models import Gpu


class SampleFields(models.Model):
    """The readings of one :class:`telemetry.sample.GpuSample`, shared by the raw table and the latest row.
    ``NULL`` means the GPU cannot report the field, never zero (see ``telemetry/sample.py``).

    One column per :data:`telemetry.fields.METRICS` entry, in its order, of its column type and nullability. They
    are declared rather than added in a loop because django-stubs (and so mypy) and readers such as the /metrics
    collector see only declared fields; ``tests/portal/telemetry/test_fields.py`` fails when the two drift.
    """

    gpu_util = models.FloatField(null=True, blank=True)
    mem_used_mb = models.IntegerField(null=True, blank=True)
    mem_total_mb = models.IntegerField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.IntegerField(null=True, blank=True)
    throttle_reasons = models.BigIntegerField(null=True, blank=True)
    ecc_sbe_volatile = models.BigIntegerField(null=True, blank=True)
    ecc_dbe_volatile = models.BigIntegerField(null=True, blank=True)
    ecc_corrected_total = models.BigIntegerField(null=True, blank=True)
    ecc_uncorrected_total = models.BigIntegerField(null=True, blank=True)
    retired_pages = models.BigIntegerField(null=True, blank=True)
    remapped_rows = models.BigIntegerField(null=True, blank=True)
    remapped_rows_pending = models.BooleanField(null=True, blank=True)
    remapped_rows_failed = models.BooleanField(null=True, blank=True)
    pcie_replay = models.BigIntegerField(null=True, blank=True)
    xid = models.IntegerField(default=0)
    lost = models.BooleanField(default=False)

    class Meta:
        abstract = True


class Sample(SampleFields):
    """One raw GPU sample as an agent sent it. Kept for ``CORRAL_SAMPLE_RETENTION_DAYS`` (rollups outlive it).

    Written in bulk (PostgreSQL COPY), so it carries as few indexes as the reads allow: the unique (gpu, ts) pair
    serves per-GPU time ranges and refuses a batch stored twice; the ts index serves pruning and rollups.
    """

    id = models.BigAutoField(primary_key=True)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["gpu", "ts"], name="%(app_label)s_%(class)s_unique_gpu_ts")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} at {self.ts:%Y-%m-%d %H:%M:%S}"


class LatestSample(SampleFields):
    """The most recent sample of each GPU, upserted with every batch: what /metrics, the node page and the API
    show without touching the raw table. ``processes`` pairs pids with their GPU memory (MiB)."""

    gpu = models.OneToOneField(Gpu, on_delete=models.CASCADE, primary_key=True, related_name="latest_sample")
    ts = models.DateTimeField()
    processes = models.JSONField(default=list, blank=True)
    received_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"latest of gpu {self.gpu_id} ({self.ts:%H:%M:%S})"


class NodeTelemetry(models.Model):
    """Per-node ingest bookkeeping, so nothing is lost silently: what arrived, what was refused and why, and the
    agent's own count of samples its bounded buffer dropped while the portal was unreachable.

    Its row is also the lock that serialises the ingest of one node's batches (a retried POST racing the
    original cannot store a sample twice).
    """

    node = models.OneToOneField("nodes.Node", on_delete=models.CASCADE, primary_key=True, related_name="telemetry")
    agent_dropped = models.PositiveBigIntegerField(default=0, help_text="The agent's running count of dropped items.")
    samples_received = models.PositiveBigIntegerField(default=0)
    samples_duplicate = models.PositiveBigIntegerField(default=0, help_text="Already stored (a retried batch).")
    samples_rejected = models.PositiveBigIntegerField(
        default=0, help_text="For a GPU this node never registered, or stamped in the future."
    )
    xid_events_received = models.PositiveBigIntegerField(default=0)
    batches = models.PositiveBigIntegerField(default=0)
    last_batch_at = models.DateTimeField(null=True, blank=True)
    backfill_from = models.DateTimeField(
        null=True, blank=True, help_text="Oldest late sample not yet rolled up (an agent draining a backlog)."
    )

    class Meta:
        verbose_name_plural = "node telemetry"

    def __str__(self) -> str:
        return f"telemetry of node {self.node_id}"


class RollupPeriod(models.IntegerChoices):
    MINUTE = 60, "1 minute"
    HOUR = 3600, "1 hour"


class Rollup(models.Model):
    """One GPU over one bucket (``period`` seconds starting at ``bucket``), in the terms of the telemetry CSV
    schema: gauges are means, counters their last value, ``throttle_reasons`` the OR of the bits seen and ``xid``
    the most serious XID. Recomputed idempotently from raw samples (minutes) and from minutes (hours).

    Its reading columns are :data:`telemetry.fields.ROLLED_UP` (declared for the type checker, as in
    :class:`SampleFields`; a test checks them), with means held as floats whatever the raw column's type."""

    period = models.PositiveIntegerField(choices=RollupPeriod.choices)
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="+", db_index=False)
    bucket = models.DateTimeField()
    samples = models.PositiveIntegerField()
    lost_samples = models.PositiveIntegerField(default=0)
    gpu_util = models.FloatField(null=True, blank=True)
    gpu_util_max = models.FloatField(null=True, blank=True)
    mem_used_mb = models.FloatField(null=True, blank=True)
    mem_total_mb = models.FloatField(null=True, blank=True)
    temperature_c = models.FloatField(null=True, blank=True)
    temperature_max = models.FloatField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    sm_clock_mhz = models.FloatField(null=True, blank=True)
    throttle_reasons = models.BigIntegerField(null=True, blank=True)
    ecc_sbe_volatile = models.BigIntegerField(null=True, blank=True)
    ecc_dbe_volatile = models.BigIntegerField(null=True, blank=True)
    ecc_corrected_total = models.BigIntegerField(null=True, blank=True)
    ecc_uncorrected_total = models.BigIntegerField(null=True, blank=True)
    retired_pages = models.BigIntegerField(null=True, blank=True)
    remapped_rows = models.BigIntegerField(null=True, blank=True)
    pcie_replay = models.BigIntegerField(null=True, blank=True)
    xid = models.IntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["period", "gpu", "bucket"], name="%(app_label)s_%(class)s_unique_period_gpu_bucket"
            ),
            models.CheckConstraint(
                condition=Q(period__in=RollupPeriod.values), name="%(app_label)s_%(class)s_period_valid"
            ),
        ]
        indexes = [models.Index(fields=["period", "bucket"], name="telemetry_rollup_period_bucket")]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id} {self.get_period_display()} at {self.bucket:%Y-%m-%d %H:%M}"


class XidRecord(models.Model):
    """One XID the driver reported, with its class (fatal, application, precursor, unknown) at the time."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="xid_records")
    xid = models.PositiveIntegerField()
    at = models.DateTimeField()
    klass = models.CharField(max_length=16)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["gpu", "xid", "at"], name="%(app_label)s_%(class)s_unique_gpu_xid_at")
        ]
        indexes = [models.Index(fields=["gpu", "-at"], name="telemetry_xid_gpu_at")]

    def __str__(self) -> str:
        return f"XID {self.xid} on gpu {self.gpu_id}"


class HealthEventKind(models.TextChoices):
    UNHEALTHY = "unhealthy", "Marked unhealthy and drained"
    CORDONED = "cordoned", "Soft-cordoned (predicted to fail)"
    RESTORED = "restored", "Marked healthy again"


class GpuHealthEvent(models.Model):
    """A change of a GPU's health made by Corral or an admin, with the evidence and what was done about it
    (``requeued_jobs``, ``checkpoint_jobs``). The history behind ``Gpu.health``, and the labels the failure
    predictor trains on."""

    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, related_name="health_events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=16, choices=HealthEventKind.choices)
    cause = models.CharField(max_length=32, blank=True, help_text="A telemetry.health.HealthCause or 'predicted'.")
    xid = models.PositiveIntegerField(null=True, blank=True, help_text="The fatal XID behind it, if one was seen.")
    evidence_at = models.DateTimeField(null=True, blank=True, help_text="When the evidence was seen on the node.")
    message = models.CharField(max_length=255)
    actor = models.CharField(max_length=150, help_text="'health', 'predictor' or a username.")
    requeued_jobs = models.JSONField(default=list, blank=True)
    checkpoint_jobs = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=HealthEventKind.values), name="%(app_label)s_%(class)s_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id}: {self.kind} ({self.cause})"


class AlertSeverity(models.TextChoices):
    CRITICAL = "critical", "Critical"
    WARNING = "warning", "Warning"


class Alert(models.Model):
    """Something an admin should look at (a drained or at-risk GPU). Shown on the node page and in the API until
    resolved (the GPU is marked healthy again); admins are also mailed when it is raised."""

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    severity = models.CharField(max_length=16, choices=AlertSeverity.choices)
    node = models.ForeignKey("nodes.Node", on_delete=models.CASCADE, related_name="alerts")
    gpu = models.ForeignKey(Gpu, on_delete=models.CASCADE, null=True, blank=True, related_name="alerts")
    title = models.CharField(max_length=200)
    message = models.TextField(blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(severity__in=AlertSeverity.values), name="%(app_label)s_%(class)s_severity_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"[{self.severity}] {self.title}"

    @property
    def active(self) -> bool:
        return self.resolved_at is None


class FailureModel(models.Model):
    """One trained failure predictor: a version, the window of data it learnt from, its evaluation metrics and
    the serialised model. Exactly one version is active (the one ``score_gpus`` uses); older ones stay for
    comparison and rollback. ``source`` says whether it learnt from this site's history or, while the site has
    too few recorded failures, from a generated synthetic fleet."""

    version = models.PositiveIntegerField(unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    source = models.CharField(max_length=16, help_text="'stored' (this site's history) or 'synthetic'.")
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    horizon_s = models.FloatField(help_text="Predicts a fatal failure within this many seconds.")
    metrics = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    artifact = models.BinaryField()
    active = models.BooleanField(default=False)

    class Meta:
        ordering = ["-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["active"], condition=Q(active=True), name="%(app_label)s_%(class)s_one_active"
            ),
        ]

    def __str__(self) -> str:
        return f"failure model v{self.version} ({self.source})"


class GpuRisk(models.Model):
    """The latest predicted failure risk of a GPU (probability of a fatal failure within the model's horizon)."""

    gpu = models.OneToOneField(Gpu, on_delete=models.CASCADE, primary_key=True, related_name="risk")
    risk = models.FloatField()
    model = models.ForeignKey(FailureModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    scored_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"gpu {self.gpu_id}: risk {self.risk:.2f}"


class GpuHealthControl(Gpu):
    """A proxy of :class:`portal.nodes.models.Gpu` so the telemetry admin can offer health actions (mark healthy)
    without touching the nodes app's admin."""

    class Meta:
        proxy = True
        verbose_name = "GPU health"
        verbose_name_plural = "GPU health"
