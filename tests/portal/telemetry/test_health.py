"""Reactive health checks end to end through ingest: fatal faults drain the GPU and requeue its job elsewhere;
application XIDs do not. Ref: #4"""

from __future__ import annotations

import time

import pytest

from portal.jobs.models import Allocation, EventKind, Job, JobEvent
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.telemetry.models import Alert, GpuHealthEvent, XidRecord
from portal.telemetry.services.health import gpu_mark_healthy
from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, running_job, sample, xid


def _assert_drained_and_requeued(world: World, job: Job, bad: Gpu, *, cause: str) -> None:
    bad.refresh_from_db()
    job.refresh_from_db()
    assert bad.health == "unhealthy" and bad.health_detail
    assert job.state == "pending" and job.hardware_retries == 1
    assert JobEvent.objects.filter(job=job, kind=EventKind.REQUEUED, actor="health").exists()
    event = GpuHealthEvent.objects.get(gpu=bad)
    assert (event.kind, event.cause, event.requeued_jobs) == ("unhealthy", cause, [job.pk])
    alert = Alert.objects.get(gpu=bad)
    assert alert.severity == "critical" and alert.active


def _next_round_places_it_elsewhere(job: Job, bad: Gpu, task_node, eve) -> None:  # noqa: ANN001
    # The agent is told to kill the old process; until it reports the exit, the old allocation stays held.
    reply = node_heartbeat(node=task_node, reports=[TaskReport(job.pk, 1, 0, "running", pid=4242)])
    assert reply.kill == [{"job": job.pk, "attempt": 1, "grace_seconds": 10.0}]
    # Nor does the job start again while that process lives: it would run twice. Ref: #15
    scheduling_round()
    job.refresh_from_db()
    assert (job.state, job.attempt, job.reason_code) == ("pending", 1, "previous_attempt_stopping")
    node_heartbeat(node=task_node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=-15)])
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2
    (placed,) = Allocation.objects.filter(job=job, attempt=2)
    assert placed.gpu_id != bad.pk
    # Even once the old process has exited and freed the bad GPU, nothing is placed there: fill the cluster and look.
    fillers = [job_submit(user=eve, command="fill", gpus=1) for _ in range(7)]
    scheduling_round()
    assert Job.objects.filter(pk__in=[f.pk for f in fillers], state="running").count() == 6  # 8 GPUs - bad - job
    assert not Allocation.objects.filter(gpu=bad, released_at__isnull=True).exists()


def test_a_fatal_xid_drains_the_gpu_requeues_its_job_and_the_next_round_avoids_it(world: World) -> None:
    job, task, (bad,) = running_job(world)
    response = post_batch(world, bad.node.name, [sample(bad.uuid)], [xid(bad.uuid, 79)])
    assert response.json()["drained"] == [bad.uuid]
    _assert_drained_and_requeued(world, job, bad, cause="fatal_xid")
    assert GpuHealthEvent.objects.get(gpu=bad).xid == 79
    _next_round_places_it_elsewhere(job, bad, task.node, world.eve)


def test_an_application_xid_does_not_drain(world: World) -> None:
    job, _, (gpu,) = running_job(world)
    response = post_batch(world, gpu.node.name, [sample(gpu.uuid, xid=13)], [xid(gpu.uuid, 13)])
    assert response.json()["drained"] == []
    gpu.refresh_from_db()
    job.refresh_from_db()
    assert gpu.health == "healthy" and job.state == "running"
    assert XidRecord.objects.get(gpu=gpu).klass == "application"
    assert not Alert.objects.exists()


@pytest.mark.parametrize(
    ("reading", "cause"),
    [
        ({"ecc_dbe_volatile": 1}, "uncorrectable_ecc"),
        ({"lost": True}, "gpu_lost"),
        ({"remapped_rows_failed": True}, "row_remap_failure"),
    ],
)
def test_uncorrectable_ecc_a_lost_gpu_and_remap_failure_drain(world: World, reading: dict, cause: str) -> None:
    job, task, (bad,) = running_job(world)
    if reading.get("lost"):
        fields = {"gpu_uuid": bad.uuid, "index": bad.index, "timestamp": time.time(), "lost": True}
        body = [fields]
    else:
        body = [sample(bad.uuid, **reading)]
    assert post_batch(world, bad.node.name, body).json()["drained"] == [bad.uuid]
    _assert_drained_and_requeued(world, job, bad, cause=cause)


def test_growth_of_the_aggregate_uncorrectable_count_across_batches_drains(world: World) -> None:
    post_batch(world, "n1", [sample("GPU-n1-3", time.time() - 10, ecc_uncorrected_total=2)])
    assert Gpu.objects.get(uuid="GPU-n1-3").health == "healthy"
    post_batch(world, "n1", [sample("GPU-n1-3", ecc_uncorrected_total=3)])
    assert Gpu.objects.get(uuid="GPU-n1-3").health == "unhealthy"


def test_an_unhealthy_gpu_is_drained_once_and_an_admin_can_restore_it(world: World) -> None:
    post_batch(world, "n1", [sample("GPU-n1-0")], [xid("GPU-n1-0", 48)])
    post_batch(world, "n1", [sample("GPU-n1-0")], [xid("GPU-n1-0", 48, time.time() + 1)])
    assert GpuHealthEvent.objects.filter(kind="unhealthy").count() == 1
    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    assert gpu_mark_healthy(gpu_id=gpu.pk, by="labadmin")
    gpu.refresh_from_db()
    assert gpu.health == "healthy" and not Alert.objects.filter(resolved_at__isnull=True).exists()
    assert GpuHealthEvent.objects.filter(gpu=gpu, kind="restored").count() == 1
    # Judged afresh: a later, clean batch keeps it healthy (the old XID is not held against it).
    post_batch(world, "n1", [sample("GPU-n1-0", time.time() + 5)])
    gpu.refresh_from_db()
    assert gpu.health == "healthy"


def test_a_drain_mails_admins_after_commit_and_logs(
    world: World,
    settings,
    monkeypatch,
    django_capture_on_commit_callbacks,
    caplog,  # noqa: ANN001
) -> None:
    from django.core import mail

    from portal.scheduler import tasks as scheduling_tasks
    from portal.telemetry import tasks

    settings.ADMINS = [("Ops", "ops@example.org")]
    monkeypatch.setattr(
        tasks.notify_admins, "apply_async", lambda args, kwargs, **_: tasks.notify_admins(*args)
    )  # inline
    monkeypatch.setattr(scheduling_tasks.schedule_round, "apply_async", lambda *a, **k: None)
    with (
        django_capture_on_commit_callbacks(execute=True),
        caplog.at_level("WARNING", logger="portal.telemetry.services"),
    ):
        post_batch(world, "n2", [sample("GPU-n2-1", ecc_dbe_volatile=2)])
    (message,) = mail.outbox
    assert "GPU-n2-1" in message.subject and "critical" in message.subject
    assert "uncorrectable" in message.body.lower()
    assert any("GPU-n2-1" in r.getMessage() for r in caplog.records)


def test_the_admin_action_marks_a_gpu_healthy(world: World) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    post_batch(world, "n1", [], [xid("GPU-n1-2", 79)])
    gpu = Gpu.objects.get(uuid="GPU-n1-2")
    assert gpu.health == "unhealthy"
    root = get_user_model().objects.create_superuser("root", "root@example.org", "pw")
    client = Client()
    client.force_login(root)
    response = client.post(
        "/admin/telemetry/gpuhealthcontrol/", {"action": "mark_healthy", "_selected_action": [gpu.pk]}
    )
    assert response.status_code == 302
    gpu.refresh_from_db()
    assert gpu.health == "healthy"
    assert GpuHealthEvent.objects.filter(gpu=gpu, kind="restored", actor="root").exists()
    assert client.get("/admin/telemetry/gpuhealthcontrol/").status_code == 200
    assert client.get("/admin/telemetry/failuremodel/").status_code == 200
