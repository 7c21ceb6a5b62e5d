"""The jobs API's shapes. Input serializers check types and ranges (400 with field errors); services decide the rest."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.jobs.array_selectors import COUNT_ORDER, ArrayCounts
from portal.jobs.array_spec import MAX_SPEC_CHARS
from portal.jobs.elastic_serializers import ElasticSubmitFields
from portal.jobs.elastic_spec import elastic_size
from portal.jobs.logs import OutputProgress, OutputState, job_output_progress
from portal.jobs.models import MAX_TIME_LIMIT, Job, JobArray, JobEvent, JobTask
from portal.jobs.outcome import job_finish_reason
from portal.jobs.selectors import StartEstimate, job_start_estimate
from portal.jobs.share_selectors import job_share
from portal.jobs.share_serializers import MAX_GPUS_PER_JOB as MAX_GPUS_PER_JOB  # the form reads it from here
from portal.jobs.share_serializers import ShareSerializer, ShareSubmitFields
from portal.jobs.timeline import job_timeline
from portal.jobs.timeline_serializers import TimelineSerializer
from portal.tenants.models import Tenant
from scheduling.core.durations import parse_duration


@extend_schema_field(
    {
        "oneOf": [
            {"type": "integer", "minimum": 1, "maximum": MAX_TIME_LIMIT},
            {"type": "string", "minLength": 1, "maxLength": 40, "example": "2h"},
        ]
    }
)
class TimeLimitField(serializers.Field[int, object, int, object]):
    """A time limit in seconds, given as whole seconds or in the duration grammar every other way of submitting
    takes (``scheduling.core.durations``), so ``"2h"`` means the same in a REST call as in the form and the CLI."""

    default_error_messages = {
        "invalid": "Give the time limit as a whole number of seconds or a duration like 2h, 90m or 1d 12h.",
        "min_value": "The time limit must be at least 1 second.",
        "max_value": f"The time limit may be at most 30 days ({MAX_TIME_LIMIT} seconds).",
    }

    def to_internal_value(self, data: object) -> int:
        if isinstance(data, bool):
            self.fail("invalid")
        if isinstance(data, float) and data.is_integer():
            data = int(data)
        if isinstance(data, str):
            if len(data) > 40:
                self.fail("invalid")
            try:
                data = parse_duration(data)
            except ValueError:
                self.fail("invalid")
        if not isinstance(data, int):
            self.fail("invalid")
        if data < 1:
            self.fail("min_value")
        if data > MAX_TIME_LIMIT:
            self.fail("max_value")
        return data

    def to_representation(self, value: int) -> int:
        return value


class JobSubmitSerializer(ElasticSubmitFields, ShareSubmitFields):  # GPU fields: shares (#17), elastic jobs (#19)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    command = serializers.CharField(max_length=16_000, trim_whitespace=False)
    tenant = serializers.SlugField(required=False, allow_null=True, default=None)
    env = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=8192), required=False)
    time_limit = TimeLimitField(
        required=False,
        allow_null=True,
        default=None,
        help_text=(
            "How long each attempt may run: whole seconds (7200) or a duration as the form and `corral submit "
            '--time-limit` take it ("2h", "90m", "1d 12h"), 1 second to 30 days (2592000); past it the job '
            "is stopped (SIGTERM, then SIGKILL) and fails. Omit or null for no limit. Only jobs with a limit of at "
            "most CORRAL_CORDON_MAX_TIME_LIMIT (7200 by default) may run on soft-cordoned GPUs."
        ),
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
    earliest_start_at = serializers.DateTimeField(
        source="earliest",
        allow_null=True,
        help_text="The likely range's start: in replays of real traces 8 in 10 estimates came true between "
        "earliest_start_at and latest_start_at (docs/scheduling.md). Null without an expected start, or when the "
        "job should start at the next round.",
    )
    latest_start_at = serializers.DateTimeField(
        source="latest", allow_null=True, help_text="The likely range's end (see earliest_start_at)."
    )
    text = serializers.CharField(help_text="The same answer in words, as the job page shows it, with its range.")


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
    finish_reason = serializers.SerializerMethodField(
        help_text='Why a finished job ended, in words: "time limit of 20s exceeded", "cancelled by alice", "rank 1: '
        'exit code 3", "rank 0: killed by SIGKILL", a lost node; "exit code 0" once succeeded; empty until it ends.'
    )
    node = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    gpu_indices = serializers.SerializerMethodField()
    log_complete = serializers.SerializerMethodField(
        help_text="True once the portal holds the job's whole output: the job has finished and the last chunk of "
        "every task's log has landed. False while it runs, while output is still arriving, and when a lost node's "
        "output may be missing (see log_state)."
    )
    size = serializers.SerializerMethodField(
        help_text="GPUs the job holds now (running) or starts with next (pending): `gpus` unless it is elastic "
        "and was grown towards `max_gpus`."
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
            "gpu_fraction",
            "max_gpus",
            "size",
            "scaling",
            "gpu_memory_bytes",
            "workload_class",
            "latency_slo_ms",
            "tenant",
            "user",
            "env",
            "state",
            "reason",
            "reason_code",
            "exit_code",
            "finish_reason",
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
        at, earliest, latest = (
            None if t is None else _DATETIME.to_representation(t)
            for t in (estimate.at, estimate.earliest, estimate.latest)
        )
        return {
            "outlook": estimate.outlook,
            "expected_start_at": at,
            "earliest_start_at": earliest,
            "latest_start_at": latest,
            "text": estimate.text,
        }

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

    def get_finish_reason(self, job: Job) -> str:
        # From the events the views prefetch (with_finish_events); a job that has not ended costs no query.
        return job_finish_reason(job)

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

    def get_size(self, job: Job) -> int:
        return elastic_size(job, self._tasks(job))


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


class JobDetailSerializer(JobSerializer):
    """One job (``GET /api/v1/jobs/{id}/``): the list's fields and its timeline, which costs a query of its own and
    so is left out of lists."""

    timeline = serializers.SerializerMethodField(
        help_text="Submitted, queued for, started and ran for (per attempt when requeued), finished."
    )

    share = serializers.SerializerMethodField(
        help_text="A running share (issue #17): the node and GPU it shares, its MPS compute percent and memory limit, "
        "and how many other shares hold that GPU now; null otherwise."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "timeline", "share"]
        read_only_fields = fields

    @extend_schema_field(ShareSerializer(allow_null=True))
    def get_share(self, job: Job) -> dict[str, Any] | None:
        share = job_share(job=job)
        return None if share is None else dict(ShareSerializer(share).data)

    @extend_schema_field(TimelineSerializer)
    def get_timeline(self, job: Job) -> dict[str, Any]:
        timeline = job_timeline(job=job, now=timezone.now())
        return dict(TimelineSerializer(timeline.as_dict()).data)
