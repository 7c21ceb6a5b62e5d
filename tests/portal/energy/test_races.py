"""Races on PostgreSQL: planners running at once never go below the floor, and a round placing work while a
planner powers nodes down never leaves a job on a powered-down node. Ref: #19"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.energy.models import DemandSample
from portal.energy.services import energy_plan
from portal.jobs.models import Allocation
from portal.jobs.services import job_submit
from portal.nodes.models import Node, NodePower
from portal.scheduler.services import scheduling_round
from tests.concurrency import run_together
from tests.portal.energy.conftest import Cluster, Commands

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and the lease need PostgreSQL"),
]


def _idle_history(now: datetime) -> None:
    start = now.replace(second=0, microsecond=0) - timedelta(hours=2)
    DemandSample.objects.bulk_create(
        DemandSample(time=start + timedelta(minutes=m), in_use=0, total=5) for m in range(120)
    )


def test_planners_at_once_never_go_below_the_floor(cluster: Cluster, energy_on: Commands, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_MIN_NODES_ON = 2
    now = timezone.now()
    _idle_history(now)
    run_together(lambda: energy_plan(now=now), 3)
    assert Node.objects.filter(power=NodePower.ON).count() == 2
    assert len(energy_on.logged()) == 3  # each node powered down once


def test_a_round_and_a_planner_at_once_never_leave_work_on_a_powered_down_node(
    cluster: Cluster, energy_on: Commands, settings
) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_MIN_NODES_ON = 0
    now = timezone.now()
    _idle_history(now)
    for _ in range(4):
        job_submit(user=cluster.user, command="train", gpus=4)

    calls = [scheduling_round, lambda: energy_plan(now=now)]
    lock = threading.Lock()

    def one_of_them() -> object:
        with lock:
            call = calls.pop()
        return call()

    run_together(one_of_them, 2)
    busy_off = Allocation.objects.filter(released_at=None, node__power=NodePower.OFF)
    assert not busy_off.exists()
