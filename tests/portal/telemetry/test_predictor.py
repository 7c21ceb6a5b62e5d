"""Proactive side: scoring cordons a GPU predicted to fail and asks its jobs to checkpoint; training stores a
versioned model with its metrics. Ref: #4"""

from __future__ import annotations

from django.utils import timezone

from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.telemetry import tasks
from portal.telemetry.models import Alert, FailureModel, GpuHealthEvent, GpuRisk
from tests.fixtures import World
from tests.portal.telemetry.helpers import hourly_history, running_job, stub_artifact


def _active_stub(**kwargs: object) -> FailureModel:
    return FailureModel.objects.create(
        version=1,
        source="synthetic",
        horizon_s=86_400,
        metrics={"threshold": 0.5, "target_met": True},
        artifact=stub_artifact(**kwargs),
        active=True,
    )


def test_a_gpu_scored_above_the_threshold_is_cordoned_and_its_job_gets_sigusr1(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_RISK_THRESHOLD = 0.5
    job, task, (hot,) = running_job(world)
    now = timezone.now()
    for gpu in Gpu.objects.filter(node=hot.node):
        hourly_history(gpu, hours=6, now=now, temperature_c=88.0 if gpu.pk == hot.pk else 55.0)
    model = _active_stub()

    result = tasks.score_gpus()
    assert result == {"model": 1, "scored": 4, "cordoned": [hot.uuid]}
    hot.refresh_from_db()
    assert hot.health == "cordoned" and "risk 0.90" in hot.health_detail
    risks = dict(GpuRisk.objects.values_list("gpu__uuid", "risk"))
    assert risks[hot.uuid] == 0.9 and sorted(risks.values()) == [0.1, 0.1, 0.1, 0.9]
    assert GpuRisk.objects.get(gpu=hot).model == model
    task.refresh_from_db()
    assert task.checkpoint_requested_at is not None
    event = GpuHealthEvent.objects.get(gpu=hot)
    assert (event.kind, event.checkpoint_jobs) == ("cordoned", [job.pk])
    assert Alert.objects.get(gpu=hot).severity == "warning"

    # The next heartbeat carries the signal, once; the job keeps running.
    reply = node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "running", pid=4242)])
    assert reply.signal == [{"job": job.pk, "attempt": 1, "signal": "SIGUSR1"}]
    assert node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "running", pid=4242)]).signal == []
    job.refresh_from_db()
    assert job.state == "running"

    # A cordoned GPU takes no new work, and a second scoring run does not alarm again.
    assert tasks.score_gpus()["cordoned"] == []
    other = job_submit(user=world.eve, command="x", gpus=4)
    scheduling_round()
    other.refresh_from_db()
    assert not other.allocations.filter(gpu=hot).exists()


def test_without_a_validated_threshold_scores_are_shown_but_nothing_is_cordoned(world: World) -> None:
    now = timezone.now()
    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    hourly_history(gpu, hours=6, now=now, temperature_c=90.0)
    FailureModel.objects.create(
        version=1,
        source="synthetic",
        horizon_s=86_400,
        metrics={"threshold": 1e-5, "target_met": False},
        artifact=stub_artifact(threshold=1e-5, target_met=False),
        active=True,
    )
    assert tasks.score_gpus() == {"model": 1, "scored": 1, "cordoned": []}
    assert GpuRisk.objects.get(gpu=gpu).risk == 0.9
    assert Gpu.objects.get(pk=gpu.pk).health == "healthy"


def test_young_gpus_are_scored_but_not_cordoned(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_RISK_THRESHOLD = 0.5
    gpu = Gpu.objects.get(uuid="GPU-n2-0")
    hourly_history(gpu, hours=2, now=timezone.now(), temperature_c=90.0)
    _active_stub()
    assert tasks.score_gpus() == {"model": 1, "scored": 1, "cordoned": []}
    assert GpuRisk.objects.get(gpu=gpu).risk == 0.9 and Gpu.objects.get(pk=gpu.pk).health == "healthy"


def test_no_model_no_scores_and_the_first_training_is_requested(world: World, monkeypatch) -> None:  # noqa: ANN001
    requested = []
    monkeypatch.setattr(tasks.train_failure_model, "apply_async", lambda *a, **k: requested.append(1))
    assert tasks.score_gpus() == {"model": None, "scored": 0, "cordoned": []}
    assert requested == [1]


def test_training_stores_a_versioned_active_model_with_metrics(world: World, settings) -> None:  # noqa: ANN001
    # No recorded failures here, so it falls back to a (tiny, for speed) synthetic fleet and says so.
    settings.CORRAL_FAILURE_SYNTHETIC_FLEET = {"gpus": 16, "days": 10, "failure_rate": 25.0}
    assert tasks.train_failure_model() == 1
    first = FailureModel.objects.get(version=1)
    assert first.active and first.source == "synthetic" and "synthetic fleet" in first.metadata["why_synthetic"]
    assert first.metrics["failures"] > 0 and "threshold" in first.metrics and "holdout" in first.metrics
    assert first.window_start < first.window_end and len(bytes(first.artifact)) > 1000
    assert tasks.train_failure_model() == 2
    assert list(FailureModel.objects.filter(active=True).values_list("version", flat=True)) == [2]
