"""API shapes. Input serializers check types and ranges (400 with field errors); services decide the rest."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.jobs.models import MAX_TIME_LIMIT, Job, JobEvent, JobTask
from portal.jobs.selectors import StartEstimate, job_start_estimate
from portal.nodes.models import Gpu, Node
from portal.tenants.models import Tenant

MAX_GPUS_PER_JOB = 4096
#: Column bounds (integer, bigint). A number its column cannot hold must be a 400 on its field here, not a database
#: error (a 500) when it is stored or compared. Ref: schema fuzzing, tests/portal/api/test_schema_fuzz.py
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1


class JobSubmitSerializer(serializers.Serializer[dict[str, Any]]):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    command = serializers.CharField(max_length=16_000, trim_whitespace=False)
    gpus = serializers.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB)
    tenant = serializers.SlugField(required=False, allow_null=True, default=None)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=8192), required=False)
    time_limit = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=1,
        max_value=MAX_TIME_LIMIT,
        help_text=(
            "Seconds each attempt may run, 1 to 2592000 (30 days); past it the job is stopped (SIGTERM, then "
            "SIGKILL) and fails. Omit or null for no limit. Only jobs with a limit of at most "
            "CORRAL_CORDON_MAX_TIME_LIMIT (7200 by default) may run on soft-cordoned GPUs."
        ),
        error_messages={
            "invalid": "Give the time limit as a whole number of seconds.",
            "min_value": "The time limit must be at least 1 second.",
            "max_value": f"The time limit may be at most 30 days ({MAX_TIME_LIMIT} seconds).",
        },
    )

    def validate_command(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 200:
            raise serializers.ValidationError("At most 200 variables.")
        return value


class StartEstimateSerializer(serializers.Serializer[StartEstimate]):
    outlook = serializers.CharField(
        help_text=(
            "estimated (expected_start_at is set), unknown_end (it waits on jobs whose end cannot be estimated), "
            "beyond_horizon (not within CORRAL_FORECAST_HORIZON), no_capacity (the nodes up now cannot hold it), "
            "or empty before the first forecast."
        )
    )
    expected_start_at = serializers.DateTimeField(source="at", allow_null=True)
    text = serializers.CharField(help_text="The same answer in words, as the job page shows it.")


class JobSerializer(serializers.ModelSerializer[Job]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    cancel_requested = serializers.SerializerMethodField()
    start_estimate = serializers.SerializerMethodField(
        help_text="Pending jobs only (null otherwise): when the job should start, from the latest forecast."
    )
    node = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    gpu_indices = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "command",
            "gpus",
            "tenant",
            "user",
            "env",
            "state",
            "reason",
            "reason_code",
            "exit_code",
            "attempt",
            "node",
            "nodes",
            "gpu_indices",
            "cancel_requested",
            "hardware_retries",
            "time_limit",
            "start_estimate",
            "submitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def _tasks(self, job: Job) -> list[JobTask]:
        # The views prefetch ``tasks__node``. The latest attempt says where the job runs or ran; a pending job
        # (never started, or requeued) runs nowhere.
        if job.state == "pending":
            return []
        return [t for t in job.tasks.all() if t.attempt == job.attempt]

    @extend_schema_field(StartEstimateSerializer(allow_null=True))
    def get_start_estimate(self, job: Job) -> dict[str, Any] | None:
        estimate = job_start_estimate(job=job, now=timezone.now())
        return None if estimate is None else dict(StartEstimateSerializer(estimate).data)

    def get_cancel_requested(self, job: Job) -> bool:
        return job.cancel_requested_at is not None

    def get_node(self, job: Job) -> str | None:
        tasks = self._tasks(job)
        return tasks[0].node.name if tasks else None

    def get_nodes(self, job: Job) -> list[str]:
        return [t.node.name for t in self._tasks(job)]

    def get_gpu_indices(self, job: Job) -> list[int]:
        tasks = self._tasks(job)
        return list(tasks[0].gpu_indices) if len(tasks) == 1 else [i for t in tasks for i in t.gpu_indices]


class JobEventSerializer(serializers.ModelSerializer[JobEvent]):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "from_state", "to_state", "actor", "reason"]


class GpuSerializer(serializers.ModelSerializer[Gpu]):
    job = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField()

    class Meta:
        model = Gpu
        fields = ["index", "uuid", "model", "memory_mb", "health", "health_detail", "state", "job"]

    def get_job(self, gpu: Gpu) -> int | None:
        busy: dict[int, int] = self.context.get("busy", {})  # GPU id -> job id, from NodeViewSet
        return busy.get(gpu.pk)

    def get_state(self, gpu: Gpu) -> str:
        if gpu.health != "healthy":
            return gpu.health
        return "allocated" if gpu.pk in self.context.get("busy", {}) else "free"


class NodeSerializer(serializers.ModelSerializer[Node]):
    gpus = serializers.SerializerMethodField()

    class Meta:
        model = Node
        fields = [
            "name",
            "hostname",
            "address",
            "rack",
            "state",
            "state_reason",
            "last_heartbeat",
            "agent_version",
            "gpus",
        ]

    def get_gpus(self, node: Node) -> list[dict[str, Any]]:
        gpus = [g for g in node.gpus.all() if g.present]
        # many=True makes a ListSerializer, whose .data is a list; the stubs type every .data as ReturnDict.
        return GpuSerializer(gpus, many=True, context=self.context).data  # type: ignore[return-value]


# --- agent protocol (docs/agent-protocol.md) ---------------------------------------------------------------------
class GpuReportSerializer(serializers.Serializer[dict[str, Any]]):
    index = serializers.IntegerField(min_value=0, max_value=1023)
    uuid = serializers.CharField(max_length=100)
    model = serializers.CharField(max_length=100, allow_blank=True, required=False, default="")
    memory_mb = serializers.IntegerField(min_value=0, max_value=INT_MAX, required=False, default=0)


class RegisterSerializer(serializers.Serializer[dict[str, Any]]):
    hostname = serializers.CharField(max_length=255, allow_blank=True, required=False, default="")
    address = serializers.CharField(max_length=255, allow_blank=True, required=False, default="")
    agent_version = serializers.CharField(max_length=50, allow_blank=True, required=False, default="")
    gpus = GpuReportSerializer(many=True)


class TaskReportSerializer(serializers.Serializer[dict[str, Any]]):
    job = serializers.IntegerField(min_value=1, max_value=BIGINT_MAX)
    attempt = serializers.IntegerField(min_value=0, max_value=INT_MAX)
    rank = serializers.IntegerField(min_value=0, max_value=INT_MAX, required=False, default=0)
    state = serializers.ChoiceField(choices=["running", "exited", "failed_to_start"])
    pid = serializers.IntegerField(
        min_value=-INT_MAX - 1, max_value=INT_MAX, allow_null=True, required=False, default=None
    )
    exit_code = serializers.IntegerField(
        min_value=-INT_MAX - 1, max_value=INT_MAX, allow_null=True, required=False, default=None
    )
    log_offset = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False, default=0)
    log = serializers.CharField(
        allow_blank=True, required=False, default="", trim_whitespace=False, max_length=1_000_000
    )
    log_end = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, allow_null=True, required=False, default=None)
    log_size = serializers.IntegerField(min_value=0, max_value=BIGINT_MAX, required=False, default=0)


class HeartbeatSerializer(serializers.Serializer[dict[str, Any]]):
    tasks = TaskReportSerializer(many=True, required=False, default=list)


# Replies, for the schema only: the agent views build these dicts themselves, from the node services' results.
class RegisterReplySerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField(help_text="The node's name, as the portal knows it.")
    heartbeat_interval = serializers.FloatField(help_text="Seconds between heartbeats.")
    sample_interval = serializers.FloatField(help_text="Seconds between telemetry samples.")


class TaskOrderSerializer(serializers.Serializer[dict[str, Any]]):
    """An order about one attempt of a job: it applies to all of the attempt's ranks on the node."""

    job = serializers.IntegerField()
    attempt = serializers.IntegerField()


class KillOrderSerializer(TaskOrderSerializer):
    grace_seconds = serializers.FloatField(help_text="SIGTERM now, SIGKILL after this many seconds.")


class SignalOrderSerializer(TaskOrderSerializer):
    signal = serializers.CharField(help_text="A signal name, to send once: SIGUSR1 asks the job to checkpoint.")


class StartOrderSerializer(serializers.Serializer[dict[str, Any]]):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    rank = serializers.IntegerField()
    command = serializers.CharField(help_text="A shell string, run by /bin/sh -c in the task's directory.")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="Indices of the node's GPUs to use.")
    env = serializers.DictField(
        child=serializers.CharField(), help_text="The task's environment, complete (CUDA_VISIBLE_DEVICES, RANK, ...)."
    )


class HeartbeatReplySerializer(serializers.Serializer[dict[str, Any]]):
    start = StartOrderSerializer(many=True, help_text="Tasks to start; repeated until a heartbeat reports them.")
    kill = KillOrderSerializer(many=True, help_text="Tasks to stop; keep reporting them until they exit.")
    forget = TaskOrderSerializer(many=True, help_text="Tasks whose exit and whole log the portal holds.")
    signal = SignalOrderSerializer(many=True, help_text="Signals to deliver once, without stopping the task.")
    log_offsets = serializers.DictField(
        child=serializers.IntegerField(),
        help_text='Bytes of each reported task\'s log the portal holds, by "job:attempt:rank".',
    )
    heartbeat_interval = serializers.FloatField(help_text="Seconds until the next heartbeat.")


# --- error answers, for the schema only: portal.api.exceptions renders them, portal.api.schema documents them ---------
class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """A refusal that names no field at fault: DRF's own (401, 403, 404, 415, ...) and the domain's."""

    detail = serializers.CharField(help_text="What went wrong, in words.")
    code = serializers.CharField(
        required=False,
        help_text=(
            "Only on domain refusals: permission_denied, not_found, conflict, quota_exceeded, invalid_transition, "
            "invalid."
        ),
    )


class ValidationErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """Field errors: ``{"gpus": ["..."]}``. Its keys are the input's own, so ``portal.api.schema`` gives its schema."""
