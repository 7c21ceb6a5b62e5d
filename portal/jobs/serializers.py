"""The jobs API's shapes. Input serializers check types and ranges (400 with field errors); services decide the rest."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.jobs.array_selectors import COUNT_ORDER, ArrayCounts
from portal.jobs.array_spec import MAX_SPEC_CHARS
from portal.jobs.logs import OutputProgress, OutputState, job_output_progress
from portal.jobs.models import MAX_TIME_LIMIT, Job, JobArray, JobEvent, JobTask
from portal.jobs.selectors import StartEstimate, job_start_estimate
from portal.tenants.models import Tenant

MAX_GPUS_PER_JOB = 4096


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

    array = serializers.CharField(
        required=False,
        allow_null=True,
        allow_blank=True,
        default=None,
        max_length=MAX_SPEC_CHARS,
        trim_whitespace=False,
        help_text=(
            "Submit a job array instead of one job: its task indices in Slurm's syntax, e.g. `0-999`, `1,3,5-9`, "
            "`0-15:4`, with `%N` to run at most N tasks at once (`0-999%50`). Indices 0 to 4000000, at most "
            "CORRAL_MAX_ARRAY_TASKS (100000) tasks. The answer is then the array (201), not a job. Omit or null "
            "for one job."
        ),
    )

    def validate_command(self, value: str) -> str:
        if not value.strip():
            raise serializers.ValidationError("This field may not be blank.")
        return value

    def validate_env(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > 200:
            raise serializers.ValidationError("At most 200 variables.")
        return value


#: Formats datetimes as every DRF DateTimeField does (settings' format and time zone).
_DATETIME = serializers.DateTimeField()


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
    array = serializers.IntegerField(
        source="array_id", read_only=True, allow_null=True, help_text="The job array this job is a task of, or null."
    )
    array_index = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="This task's index in its array (CORRAL_ARRAY_TASK_ID), or null."
    )
    user = serializers.CharField(source="user.username", read_only=True)
    cancel_requested = serializers.SerializerMethodField()
    start_estimate = serializers.SerializerMethodField(
        help_text="Pending jobs only (null otherwise): when the job should start, from the latest forecast."
    )
    node = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    gpu_indices = serializers.SerializerMethodField()
    log_complete = serializers.SerializerMethodField(
        help_text="True once the portal holds the job's whole output: the job has finished and the last chunk of "
        "every task's log has landed. False while it runs, while output is still arriving, and when a lost node's "
        "output may be missing (see log_state)."
    )
    log_state = serializers.SerializerMethodField(
        help_text="live (the job runs), arriving (it has finished, output is still on its way), complete, or "
        "incomplete (finished; a lost node's output may be missing and will not come). Follow the log while live "
        "or arriving."
    )
    log_note = serializers.SerializerMethodField(
        help_text='What the log is waiting for, in words ("Output still arriving: rank 0 on gpu-07 has sent '
        '12.0 MiB of 50.0 MiB."); empty when there is nothing to say.'
    )

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
            "array",
            "array_index",
            "start_estimate",
            "log_complete",
            "log_state",
            "log_note",
            "submitted_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def _all_tasks(self, job: Job) -> list[JobTask]:
        # A job that never started (attempt 0) has no tasks: no query for a just-submitted job.
        return [] if job.attempt == 0 else list(job.tasks.all())

    def _tasks(self, job: Job) -> list[JobTask]:
        # The views prefetch ``tasks__node``. The latest attempt says where the job runs or ran; a pending job
        # (never started, or requeued) runs nowhere.
        if job.state == "pending":
            return []
        return [t for t in self._all_tasks(job) if t.attempt == job.attempt]

    @extend_schema_field(StartEstimateSerializer(allow_null=True))
    def get_start_estimate(self, job: Job) -> dict[str, Any] | None:
        estimate = job_start_estimate(job=job, now=timezone.now())
        if estimate is None:
            return None
        # StartEstimateSerializer's shape, built directly: a nested serializer per job cost a third of a list page.
        at = None if estimate.at is None else _DATETIME.to_representation(estimate.at)
        return {"outlook": estimate.outlook, "expected_start_at": at, "text": estimate.text}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._outputs: dict[int, OutputProgress] = {}

    def _output(self, job: Job) -> OutputProgress:
        # The three log fields from one computation, over the prefetched tasks: no query per job on a list page.
        if job.pk not in self._outputs:
            self._outputs[job.pk] = job_output_progress(job=job, tasks=self._all_tasks(job))
        return self._outputs[job.pk]

    def get_log_complete(self, job: Job) -> bool:
        return self._output(job).complete

    @extend_schema_field(serializers.ChoiceField(choices=[state.value for state in OutputState]))
    def get_log_state(self, job: Job) -> str:
        return self._output(job).state.value

    def get_log_note(self, job: Job) -> str:
        return self._output(job).text

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


class ArrayCountsSerializer(serializers.Serializer[dict[str, int]]):
    """Tasks of one array in each state."""

    running = serializers.IntegerField()
    pending = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class JobArraySerializer(serializers.ModelSerializer[JobArray]):
    """An array: what its tasks share, its spec and limit, and how many tasks are in each state.

    The counts come from ``context["counts"]`` (array id -> :class:`ArrayCounts`), read for a whole page in one
    query by the view; an array missing there counts as having no tasks."""

    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)
    limit = serializers.IntegerField(
        read_only=True, allow_null=True, help_text="At most this many tasks run at once (the spec's %N); null: none."
    )
    counts = serializers.SerializerMethodField(help_text="Tasks in each state.")
    tasks_url = serializers.SerializerMethodField(help_text="Where to page through its tasks: the job list, filtered.")

    class Meta:
        model = JobArray
        fields = [
            "id",
            "name",
            "command",
            "gpus",
            "tenant",
            "user",
            "env",
            "time_limit",
            "spec",
            "limit",
            "task_count",
            "index_min",
            "index_max",
            "counts",
            "tasks_url",
            "submitted_at",
        ]
        read_only_fields = fields

    @extend_schema_field(ArrayCountsSerializer)
    def get_counts(self, job_array: JobArray) -> dict[str, int]:
        counts: ArrayCounts | None = self.context.get("counts", {}).get(job_array.pk)
        return dict(counts.by_state) if counts is not None else dict.fromkeys(COUNT_ORDER, 0)

    def get_tasks_url(self, job_array: JobArray) -> str:
        return f"/api/v1/jobs/?array={job_array.pk}"
