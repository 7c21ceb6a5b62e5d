"""Jobs, their history, where they run, and their output.

Long on purpose: these tables are the GPU ledger, and their database constraints (one active allocation per GPU, a
share's range, an elastic job's range, the array columns) are what keeps a job from running twice or sharing a GPU
it was not given. Read together in one module, they can be checked against each other.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from portal.tenants.models import Membership
from scheduling.core.states import TERMINAL, JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User

JOB_STATE_CHOICES = [(s.value, s.value.capitalize()) for s in JobState]
#: The longest time limit a job may ask for: 30 days, in seconds.
MAX_TIME_LIMIT = 30 * 86_400
ACTIVE_STATES = [JobState.PENDING.value, JobState.RUNNING.value]
TERMINAL_STATES = sorted(s.value for s in TERMINAL)  # sorted: a frozenset's order changes between runs


class WorkloadClass(models.TextChoices):
    """A share's class (issue #17): online work is latency-critical and protected; offline work is best-effort and
    may be evicted (then requeued, never failed). The values are ``scheduling.core.sharing.WorkloadClass``'s."""

    ONLINE = "online", "Online"
    OFFLINE = "offline", "Offline"


class JobQuerySet(models.QuerySet["Job"]):
    def visible_to(self, user: User | AnonymousUser) -> JobQuerySet:
        """The one place that says who sees which job: a member sees every job of their tenants; staff see all.

        Used by the HTML views and the API alike, so a job of another tenant is a 404 everywhere.
        """
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        # A subquery, not a join: a join needs DISTINCT, and DISTINCT over every column made a page of 50 jobs
        # cost what the table costs (COUNT(*) over SELECT DISTINCT of all columns).
        return self.filter(tenant_id__in=Membership.objects.filter(user=user).values("tenant_id"))

    def active(self) -> JobQuerySet:
        return self.filter(state__in=ACTIVE_STATES)


class JobArrayQuerySet(models.QuerySet["JobArray"]):
    def visible_to(self, user: User | AnonymousUser) -> JobArrayQuerySet:
        """Who sees which array, by the rule of ``JobQuerySet.visible_to``: a member sees every array of their
        tenants; staff see all. A subquery, so no DISTINCT is needed."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(tenant_id__in=Membership.objects.filter(user=user).values("tenant_id"))


class JobArray(models.Model):
    """A Slurm-style job array: one submission of ``task_count`` copies of one command, each a :class:`Job` (its
    *task*) with its own ``array_index``. The tasks are scheduled, counted by quotas and fair share, cancelled and
    shown exactly as jobs are; the array holds what they share and the ``%N`` ``limit`` on how many run at once
    (None: no limit). ``spec`` is the index spec as submitted (``0-999%50``); ``index_min``/``index_max`` are kept
    for the environment each task gets (``CORRAL_ARRAY_TASK_MIN``/``MAX``) without parsing the spec again.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="job_arrays")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays")
    name = models.CharField(max_length=200)
    command = models.TextField()
    gpus = models.PositiveIntegerField(help_text="GPUs each task needs.")
    env = models.JSONField(default=dict, blank=True)
    time_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Seconds each task's attempt may run.")
    spec = models.TextField(help_text="The index spec as submitted, e.g. 0-999%50.")
    limit = models.PositiveIntegerField(null=True, blank=True, help_text="At most this many tasks run at once.")
    task_count = models.PositiveIntegerField()
    index_min = models.PositiveIntegerField()
    index_max = models.PositiveIntegerField()
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)

    objects = JobArrayQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="%(app_label)s_%(class)s_gpus_gte_1"),
            models.CheckConstraint(condition=Q(task_count__gte=1), name="%(app_label)s_%(class)s_task_count_gte_1"),
            models.CheckConstraint(
                condition=Q(limit__isnull=True) | Q(limit__gte=1), name="%(app_label)s_%(class)s_limit_gte_1"
            ),
            models.CheckConstraint(
                condition=Q(index_min__lte=F("index_max")), name="%(app_label)s_%(class)s_index_min_lte_max"
            ),
        ]

    def __str__(self) -> str:
        return f"array {self.pk} ({self.name})"


class Job(models.Model):
    """A command to run on ``gpus`` GPUs, gang-scheduled (all at once, or not at all).

    ``attempt`` counts starts: a requeue (lost node, hardware fault, preemption) starts a new attempt, and rows
    belonging to an older attempt (tasks, allocations, agent reports) are ignored from then on. ``time_limit``
    bounds each attempt (counted from ``started_at``): past it the job is stopped and fails. ``log_size`` counts
    every character the job printed and ``log_dropped`` those no longer stored (see ``job_log_append``), so the
    log's offsets never move when output is dropped.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.PROTECT, related_name="jobs")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=200)
    command = models.TextField()
    gpus = models.PositiveIntegerField()
    env = models.JSONField(default=dict, blank=True)
    state = models.CharField(max_length=16, choices=JOB_STATE_CHOICES, default=JobState.PENDING.value)
    reason_code = models.CharField(max_length=40, blank=True, help_text="Why a pending job waits (WaitReason).")
    reason = models.CharField(max_length=255, blank=True)
    attempt = models.PositiveIntegerField(default=0)
    exit_code = models.IntegerField(null=True, blank=True)
    hardware_retries = models.PositiveIntegerField(default=0)
    submitted_at = models.DateTimeField(auto_now_add=True, db_index=True)
    queued_at = models.DateTimeField(null=True, blank=True, help_text="When it last entered the queue.")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    attained_service = models.FloatField(default=0.0, help_text="GPU-seconds run in earlier attempts.")
    time_limit = models.PositiveIntegerField(
        null=True, blank=True, help_text="Seconds each attempt may run before it is stopped; empty: no limit."
    )
    log_size = models.PositiveBigIntegerField(
        default=0, help_text="Characters the job has printed so far: the end of its log, kept or not."
    )
    log_dropped = models.PositiveBigIntegerField(
        default=0, help_text="Characters of output deleted to keep the log within CORRAL_JOB_LOG_MAX_CHARS."
    )
    # The start forecast (portal.scheduler.services), refreshed for pending jobs every CORRAL_FORECAST_EVERY
    # seconds. Not a state change, so no event: read it through ``start_forecast``, which drops stale values.
    start_outlook = models.CharField(
        max_length=16, blank=True, help_text="A scheduling.core.forecast.StartOutlook; empty: not forecast yet."
    )
    expected_start_at = models.DateTimeField(null=True, blank=True)
    forecast_at = models.DateTimeField(null=True, blank=True, help_text="When the start forecast was made.")
    # A task of a job array, or None. PROTECT: jobs are history and hold GPUs in the ledger (Allocation cascades
    # from Job), so deleting an array must never delete its tasks, least of all running ones; the portal deletes
    # neither.
    array = models.ForeignKey(JobArray, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs")
    array_index = models.PositiveIntegerField(null=True, blank=True, help_text="This task's index in its array.")
    # A share of one GPU under MPS (issue #17): ``gpus`` stays 1 and ``gpu_fraction`` says how much of it; None is a
    # whole-GPU job. Shares are scheduled apart from whole-GPU jobs, on GPUs an admin marked shared.
    gpu_fraction = models.FloatField(
        null=True, blank=True, help_text="The part of one GPU a share asks for, in (0, 1); empty: whole GPUs."
    )
    gpu_memory_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="A share's GPU memory limit; empty: its fraction of the GPU's memory."
    )
    workload_class = models.CharField(max_length=8, choices=WorkloadClass.choices, default=WorkloadClass.OFFLINE)
    latency_slo_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="An online share's p99 latency target; above it the agent evicts neighbours."
    )
    evictions = models.PositiveIntegerField(default=0, help_text="Times a share was evicted to protect online work.")
    mps_suspect_faults = models.PositiveIntegerField(
        default=0, help_text="MPS server faults whose logs named this job's process."
    )
    mps_culprit = models.BooleanField(default=False, help_text="Named by MPS faults repeatedly: kept off shared GPUs.")
    # Elastic jobs (issue #19): ``gpus`` is the guaranteed minimum, ``max_gpus`` the most it may grow to when GPUs
    # are idle; None is an inelastic job. A resize restarts the job from its checkpoint at ``resize_to`` GPUs.
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text="An elastic job's largest size.")
    resize_to = models.PositiveIntegerField(
        null=True, blank=True, help_text="The size an elastic job's next attempt starts at; empty: its minimum."
    )
    # A stop with notice (a resize, a reclaimed node): the running attempt's processes were sent the checkpoint
    # signal and the attempt is requeued at ``stop_due_at`` (portal.jobs.elastic_services.jobs_stop_due).
    stop_due_at = models.DateTimeField(
        null=True, blank=True, help_text="When the running attempt is stopped, after its checkpoint signal."
    )
    stop_reason = models.CharField(max_length=255, blank=True, help_text="Why it is stopped at stop_due_at.")
    scaling = models.JSONField(
        null=True, blank=True, help_text='Measured speedups by size, e.g. {"1": 1, "4": 3.6}; empty: default curve.'
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        # Lists read one page in the list's order (newest first, id breaking ties), for everyone (staff), a state,
        # a tenant (what members see) or a user ("mine"): each has an index in that order, so a page costs what a
        # page costs, whatever the table holds (issue #16).
        indexes = [
            models.Index(fields=["state", "submitted_at", "id"], name="jobs_job_state_submitted"),
            models.Index(fields=["submitted_at", "id"], name="jobs_job_submitted_id"),
            models.Index(fields=["tenant", "submitted_at", "id"], name="jobs_job_tenant_submitted"),
            models.Index(fields=["user", "submitted_at", "id"], name="jobs_job_user_submitted"),
            # Counts by state of a page of arrays, and the %N limit's count of running tasks, read only this.
            models.Index(fields=["array", "state"], name="jobs_job_array_state", condition=Q(array__isnull=False)),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(gpus__gte=1), name="%(app_label)s_%(class)s_gpus_gte_1"),
            models.CheckConstraint(
                condition=Q(state__in=[s.value for s in JobState]), name="%(app_label)s_%(class)s_state_valid"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=TERMINAL_STATES) | Q(finished_at__isnull=False),
                name="%(app_label)s_%(class)s_finished_has_time",
            ),
            models.CheckConstraint(
                condition=Q(time_limit__isnull=True) | Q(time_limit__gte=1, time_limit__lte=MAX_TIME_LIMIT),
                name="%(app_label)s_%(class)s_time_limit_in_range",
            ),
            models.CheckConstraint(
                condition=Q(array__isnull=True, array_index__isnull=True)
                | Q(array__isnull=False, array_index__isnull=False),
                name="%(app_label)s_%(class)s_array_index_with_array",
            ),
            models.CheckConstraint(
                condition=Q(gpu_fraction__isnull=True) | Q(gpu_fraction__gt=0, gpu_fraction__lt=1, gpus=1),
                name="%(app_label)s_%(class)s_fraction_in_range",
            ),
            models.CheckConstraint(
                condition=Q(workload_class__in=WorkloadClass.values), name="%(app_label)s_%(class)s_class_valid"
            ),
            models.CheckConstraint(
                condition=Q(max_gpus__isnull=True)
                | Q(max_gpus__gte=F("gpus"), gpu_fraction__isnull=True, array__isnull=True),
                name="%(app_label)s_%(class)s_max_gpus_valid",
            ),
            models.CheckConstraint(
                condition=Q(resize_to__isnull=True)
                | Q(max_gpus__isnull=False, resize_to__gte=F("gpus"), resize_to__lte=F("max_gpus")),
                name="%(app_label)s_%(class)s_resize_within_range",
            ),
            # Also the index that ?array= lists and the %N limit read an array's tasks through, in index order.
            models.UniqueConstraint(
                fields=["array", "array_index"],
                condition=Q(array__isnull=False),
                name="%(app_label)s_%(class)s_unique_array_index",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name})"

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def start_forecast(self) -> tuple[str, datetime | None] | None:
        """``(outlook, expected start)`` for a pending job, from a forecast made since it last entered the queue;
        None when the job is not pending or no such forecast exists yet (a forecast made before a requeue is
        about an earlier wait)."""
        if self.state != JobState.PENDING.value or not self.start_outlook or self.forecast_at is None:
            return None
        if self.forecast_at < (self.queued_at or self.submitted_at):
            return None
        return self.start_outlook, self.expected_start_at

    @property
    def executed_seconds(self) -> float:
        """Seconds this job has held its GPUs over all its attempts (see :func:`executed_seconds`)."""
        return executed_seconds(self.gpus, self.attained_service, self.started_at, self.finished_at)


def executed_seconds(gpus: int, attained_service: float, started: datetime | None, finished: datetime | None) -> float:
    """Seconds a finished job held its GPUs over all attempts: its earlier attempts' GPU-seconds per GPU, plus the
    last attempt when it ended while running (a requeue clears ``started_at``). Read from columns so that a query
    returning plain values can use it as well as a model instance."""
    last_run = (finished - started).total_seconds() if started is not None and finished is not None else 0.0
    return attained_service / gpus + max(0.0, last_run)


class EventKind(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    STARTED = "started", "Placed and started"
    RUNNING = "running", "Processes running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCEL_REQUESTED = "cancel_requested", "Cancel requested"
    CANCELLED = "cancelled", "Cancelled"
    REQUEUED = "requeued", "Requeued"
    PREEMPTED = "preempted", "Preempted"
    STOP_SCHEDULED = "stop_scheduled", "Asked to checkpoint before a stop"
    RESIZED = "resized", "Stopped to resize"


class JobEvent(models.Model):
    """One recorded change of a job: every state change writes one, with who did it and why."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=24, choices=EventKind.choices)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16, blank=True)
    actor = models.CharField(max_length=150, help_text="A username, 'scheduler', or 'agent:<node>'.")
    reason = models.TextField(blank=True)

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id}: {self.kind} by {self.actor}"


class Allocation(models.Model):
    """A GPU given to one attempt of a job. While ``released_at`` is empty the GPU is taken; a partial unique
    constraint makes a second active whole-GPU allocation of the same GPU impossible, whatever the application does.

    A *share* (issue #17) records its MPS limits here: ``compute_percent`` (its thread percentage) and
    ``memory_limit_bytes``. Several shares may hold one shared GPU at once; the share round keeps them within the
    GPU (``scheduling.core.sharing.fits``) and never gives a shared GPU to a whole-GPU job or the reverse."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="allocations")
    attempt = models.PositiveIntegerField()
    gpu = models.ForeignKey("nodes.Gpu", on_delete=models.PROTECT, related_name="allocations")
    node = models.ForeignKey("nodes.Node", on_delete=models.PROTECT, related_name="allocations")
    rank = models.PositiveIntegerField(help_text="Node rank of the gang member that uses this GPU.")
    created_at = models.DateTimeField(auto_now_add=True)
    released_at = models.DateTimeField(null=True, blank=True)
    compute_percent = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="A share's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; empty: the whole GPU."
    )
    memory_limit_bytes = models.PositiveBigIntegerField(null=True, blank=True, help_text="A share's memory limit.")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(released_at__isnull=True, compute_percent__isnull=True),
                name="%(app_label)s_%(class)s_one_active_per_gpu",
            ),
            models.CheckConstraint(
                condition=Q(compute_percent__isnull=True) | Q(compute_percent__gte=1, compute_percent__lte=100),
                name="%(app_label)s_%(class)s_compute_percent_in_range",
            ),
            # One attempt holds a GPU once; and a GPU is released after it was given (issue #15's invariants).
            models.UniqueConstraint(fields=["job", "attempt", "gpu"], name="%(app_label)s_%(class)s_once_per_attempt"),
            models.CheckConstraint(
                condition=Q(released_at__isnull=True) | Q(released_at__gte=F("created_at")),
                name="%(app_label)s_%(class)s_released_after_created",
            ),
        ]
        # Fair share reads the allocations held now or released within its memory every round (tenant_usage).
        indexes = [models.Index(fields=["released_at"], name="jobs_allocation_released")]

    def __str__(self) -> str:
        return f"job {self.job_id} on gpu {self.gpu_id}"


class TaskState(models.TextChoices):
    ASSIGNED = "assigned", "Assigned"  # the agent has been told to start it
    RUNNING = "running", "Running"
    EXITED = "exited", "Exited"
    LOST = "lost", "Lost"  # its node died or restarted before it exited


class JobTask(models.Model):
    """One process of one attempt: a gang of N nodes has N tasks, one per node, ranked from 0."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="tasks")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField()
    node = models.ForeignKey("nodes.Node", on_delete=models.PROTECT, related_name="tasks")
    gpu_indices = models.JSONField(default=list)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.ASSIGNED)
    pid = models.IntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    kill_requested = models.BooleanField(default=False)
    checkpoint_requested_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when the task should checkpoint (e.g. its GPU is predicted to fail)."
    )
    checkpoint_signalled_at = models.DateTimeField(null=True, blank=True)
    log_received = models.PositiveBigIntegerField(default=0, help_text="Bytes of the agent's log file received.")
    log_final_size = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Bytes in the agent's log file when it reported the task's end; the output is whole once "
        "log_received reaches it (empty: no end reported).",
    )
    forgotten = models.BooleanField(default=False, help_text="The agent was told it may drop this task.")
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "attempt", "rank"]
        constraints = [
            models.UniqueConstraint(
                fields=["job", "attempt", "rank"], name="%(app_label)s_%(class)s_unique_job_attempt_rank"
            ),
            models.CheckConstraint(condition=Q(state__in=TaskState.values), name="%(app_label)s_%(class)s_state_valid"),
            # A task that is over says when: the ledger frees its GPUs only for such a task (or an admin's word).
            models.CheckConstraint(
                condition=~Q(state__in=[TaskState.EXITED, TaskState.LOST]) | Q(finished_at__isnull=False),
                name="%(app_label)s_%(class)s_finished_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} rank {self.rank}"


class JobLogChunk(models.Model):
    """A piece of a job's output, starting at character ``offset`` of the job's log.

    Chunks of one job never overlap; where one ends before the next begins, that output was dropped to keep the
    job within ``CORRAL_JOB_LOG_MAX_CHARS`` (offsets are the job's own, so readers and agents never renumber).
    """

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_chunks")
    offset = models.PositiveBigIntegerField()
    data = models.TextField()

    class Meta:
        ordering = ["job_id", "offset"]
        constraints = [
            models.UniqueConstraint(fields=["job", "offset"], name="%(app_label)s_%(class)s_unique_job_offset"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} log at {self.offset}"
