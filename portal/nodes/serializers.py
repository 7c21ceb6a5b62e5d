"""The nodes API's shapes, and the agent protocol's (docs/agent-protocol.md): input serializers check types
and ranges (400 with field errors); the node services decide the rest."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.api.serializers import BIGINT_MAX, INT_MAX
from portal.jobs.models import WorkloadClass
from portal.nodes.models import Gpu, Node


class GpuSerializer(serializers.ModelSerializer[Gpu]):
    job = serializers.SerializerMethodField()
    state = serializers.SerializerMethodField(
        help_text="free, allocated (one job holds it whole), shared (shares of it run now: see clients), stopping, "
        "or its health when not healthy."
    )
    clients = serializers.SerializerMethodField(help_text="Shares of this GPU running now (issue #17); 0: none.")

    class Meta:
        model = Gpu
        fields = [
            "index",
            "uuid",
            "model",
            "memory_mb",
            "health",
            "health_detail",
            "state",
            "job",
            "shared",
            "clients",
            "max_clients",
        ]

    def get_job(self, gpu: Gpu) -> int | None:
        """The job holding it whole; null for a free GPU and for a shared one, whose several jobs the node page
        lists (``clients`` counts them)."""
        if self.get_clients(gpu) > 0:
            return None
        busy: dict[int, int] = self.context.get("busy", {})  # GPU id -> job id, from NodeViewSet
        return busy.get(gpu.pk)

    def get_clients(self, gpu: Gpu) -> int:
        clients: dict[int, int] = self.context.get("clients", {})  # GPU id -> shares holding it, from NodeViewSet
        return clients.get(gpu.pk, 0)

    def get_state(self, gpu: Gpu) -> str:
        """``stopping``: held by an attempt that is over, until its processes are confirmed gone (issue #15).
        ``shared``: several jobs may hold it at once, each a share (issue #17), so it is not one job's."""
        if gpu.health != "healthy":
            return gpu.health
        if self.get_clients(gpu) > 0:
            return "shared"
        if gpu.pk in self.context.get("stopping", set()):
            return "stopping"
        return "allocated" if gpu.pk in self.context.get("busy", {}) else "free"


class NodeSerializer(serializers.ModelSerializer[Node]):
    gpus = serializers.SerializerMethodField()
    fenced_gpus = serializers.SerializerMethodField(
        help_text=(
            "GPUs held by this node's lost tasks, whose processes may still run: offered to no job until the agent "
            "registers again having killed them, or an admin releases them (POST .../release-fenced/)."
        )
    )

    class Meta:
        model = Node
        fields = [
            "name",
            "hostname",
            "address",
            "rack",
            "state",
            "state_reason",
            "power",
            "power_detail",
            "pool",
            "lent",
            "returning",
            "last_heartbeat",
            "agent_version",
            "fenced_gpus",
            "gpus",
        ]

    def get_fenced_gpus(self, node: Node) -> int:
        fenced: dict[int, int] = self.context.get("fenced", {})
        return fenced.get(node.pk, 0)

    @extend_schema_field(GpuSerializer(many=True))  # so the schema states each GPU's fields, ``clients`` included
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
    clean = serializers.BooleanField(
        required=False,
        default=False,
        help_text=(
            "True when the agent has confirmed that no process of any task from before this registration is alive "
            "(it SIGKILLed them and saw them gone): the GPUs those tasks held are freed. False or absent: they stay "
            "fenced until an admin releases them."
        ),
    )


class EvictionSerializer(serializers.Serializer[dict[str, Any]]):
    """The agent evicted this offline share to protect online work on its GPU (issue #17): requeue, never fail."""

    gpu = serializers.IntegerField(min_value=0, max_value=INT_MAX)
    reason = serializers.CharField(max_length=500, allow_blank=True, required=False, default="")
    cause = serializers.CharField(max_length=500, allow_blank=True, required=False, default="")


class MpsFaultSerializer(serializers.Serializer[dict[str, Any]]):
    """The MPS server of this share's GPU faulted while it was a client (issue #17)."""

    gpu = serializers.IntegerField(min_value=0, max_value=INT_MAX)
    detail = serializers.CharField(max_length=2000, allow_blank=True, required=False, default="")
    action = serializers.ChoiceField(choices=["restart", "requeue"], required=False, default="requeue")
    faults = serializers.IntegerField(min_value=0, max_value=INT_MAX, required=False, default=1)
    suspect = serializers.BooleanField(required=False, default=False)
    suspect_faults = serializers.IntegerField(min_value=0, max_value=INT_MAX, required=False, default=0)


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
    eviction = EvictionSerializer(required=False, allow_null=True, default=None)
    mps_fault = MpsFaultSerializer(required=False, allow_null=True, default=None)


class HeartbeatSerializer(serializers.Serializer[dict[str, Any]]):
    tasks = TaskReportSerializer(many=True, required=False, default=list)


# Replies, for the schema only: the agent views build these dicts themselves, from the node services' results.
class RegisterReplySerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField(help_text="The node's name, as the portal knows it.")
    heartbeat_interval = serializers.FloatField(help_text="Seconds between heartbeats.")
    sample_interval = serializers.FloatField(help_text="Seconds between telemetry samples.")
    lease_seconds = serializers.FloatField(
        help_text=(
            "After this long without a successful heartbeat (counted from when the last one was sent), the agent "
            "kills every task and registers again: by then the portal may be about to mark the node down and run "
            "its jobs elsewhere."
        )
    )


class TaskOrderSerializer(serializers.Serializer[dict[str, Any]]):
    """An order about one attempt of a job: it applies to all of the attempt's ranks on the node."""

    job = serializers.IntegerField()
    attempt = serializers.IntegerField()


class KillOrderSerializer(TaskOrderSerializer):
    grace_seconds = serializers.FloatField(help_text="SIGTERM now, SIGKILL after this many seconds.")


class SignalOrderSerializer(TaskOrderSerializer):
    signal = serializers.CharField(help_text="A signal name, to send once: SIGUSR1 asks the job to checkpoint.")


class ShareOrderSerializer(serializers.Serializer[dict[str, Any]]):
    compute_percent = serializers.IntegerField(help_text="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, 1 to 100.")
    memory_limit_bytes = serializers.IntegerField(required=False, help_text="CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, bytes.")
    workload_class = serializers.ChoiceField(choices=WorkloadClass.choices)
    latency_slo_ms = serializers.IntegerField(required=False, help_text="An online share's p99 target (ms).")


class StartOrderSerializer(serializers.Serializer[dict[str, Any]]):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    rank = serializers.IntegerField()
    command = serializers.CharField(help_text="A shell string, run by /bin/sh -c in the task's directory.")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="Indices of the node's GPUs to use.")
    env = serializers.DictField(
        child=serializers.CharField(), help_text="The task's environment, complete (CUDA_VISIBLE_DEVICES, RANK, ...)."
    )
    share = ShareOrderSerializer(
        required=False, help_text="Present only for a share of its one GPU, run under MPS (issue #17)."
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


class ReleaseFencedReplySerializer(serializers.Serializer[dict[str, Any]]):
    node = serializers.CharField()
    released = serializers.IntegerField(help_text="GPUs freed.")
