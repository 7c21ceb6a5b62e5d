"""Demand samples, the forecaster's training on generated history, node-hours saved. Ref: #19"""

from __future__ import annotations

import math
from datetime import timedelta

from django.utils import timezone

from portal.energy import tasks
from portal.energy.models import DemandModel, DemandSample, PowerAction
from portal.energy.selectors import demand_forecaster, node_hours_saved
from portal.energy.services import energy_plan, energy_sample, energy_train
from portal.jobs.services import job_submit
from portal.nodes.models import Node, NodePower
from portal.scheduler.services import scheduling_round
from tests.portal.energy.conftest import Cluster, Commands


def test_the_sampling_task_writes_one_sample_a_minute_and_drops_old_ones(cluster: Cluster, settings) -> None:  # noqa: ANN001
    settings.CORRAL_ENERGY_SAMPLE_DAYS = 1
    old = DemandSample.objects.create(time=timezone.now() - timedelta(days=2), in_use=0, total=5)
    job_submit(user=cluster.user, command="train", gpus=6)  # two nodes
    scheduling_round()
    Node.objects.filter(name="n5").update(power=NodePower.OFF)  # powered down: still managed, counted in total

    tasks.tick()
    tasks.tick()  # twice in one minute: still one row

    sample = DemandSample.objects.get()
    assert (sample.in_use, sample.total) == (2, 5)
    assert not DemandSample.objects.filter(pk=old.pk).exists()


def test_a_lent_node_is_neither_demand_nor_total(cluster: Cluster) -> None:
    Node.objects.filter(name="n5").update(pool="inference", lent=True)
    sample = energy_sample(now=timezone.now())
    assert (sample.in_use, sample.total) == (0, 4)


def _daily_history(days: int) -> None:
    """Demand with a daily cycle: 1 node at night, 4 by day, one sample a minute."""
    end = timezone.now().replace(second=0, microsecond=0)
    start = end - timedelta(days=days)
    rows = []
    for m in range(days * 24 * 60):
        at = start + timedelta(minutes=m)
        hour = timezone.localtime(at).hour + timezone.localtime(at).minute / 60
        rows.append(DemandSample(time=at, in_use=round(2.5 - 1.5 * math.cos(2 * math.pi * hour / 24)), total=5))
    DemandSample.objects.bulk_create(rows, batch_size=2000)


def test_training_on_generated_history_stores_a_model_the_planner_uses(cluster: Cluster, energy_on: Commands) -> None:
    assert energy_train(now=timezone.now()) is None  # no history yet: the planner forecasts "no change"
    _daily_history(3)
    row = energy_train(now=timezone.now())
    assert row is not None and row.steps >= 3 * 144 - 1
    forecaster, stored = demand_forecaster()
    assert forecaster is not None and stored == row
    result = energy_plan(now=timezone.now())
    assert result.enabled and result.forecast.startswith("model of "), result
    assert result.target is not None and 1 <= result.target <= 5


def test_the_training_task_keeps_only_the_newest_models(cluster: Cluster, energy_on: Commands) -> None:
    _daily_history(2)
    for _ in range(5):
        tasks.train()
    assert DemandModel.objects.count() == 3


def test_the_training_task_does_nothing_while_energy_saving_is_off(cluster: Cluster) -> None:
    _daily_history(2)
    assert tasks.train() is None and not DemandModel.objects.exists()


def test_node_hours_saved_run_from_a_power_down_to_the_next_power_up(cluster: Cluster) -> None:
    n1, n2 = cluster.nodes[:2]
    t0 = timezone.now() - timedelta(hours=10)
    PowerAction.objects.create(node=n1, at=t0, action="off", ok=True, by="planner")
    PowerAction.objects.create(node=n1, at=t0 + timedelta(hours=1), action="on", ok=False, by="planner")  # failed
    PowerAction.objects.create(node=n1, at=t0 + timedelta(hours=3), action="on", ok=True, by="planner")
    PowerAction.objects.create(node=n2, at=t0 + timedelta(hours=2), action="off", ok=False, by="planner")  # failed
    PowerAction.objects.create(node=n2, at=t0 + timedelta(hours=8), action="off", ok=True, by="planner")
    end = t0 + timedelta(hours=10)
    assert node_hours_saved(end=end) == 3 + 2
    assert node_hours_saved(start=t0 + timedelta(hours=2), end=end) == 1 + 2
