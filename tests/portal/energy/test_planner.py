"""The live planner against the real services: what it powers down, what it never touches, what wakes nodes, and
what a failing command leaves behind. Ref: #19"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from portal.energy.models import DemandSample, PowerAction
from portal.energy.selectors import nodes_powered_down, nodes_waking
from portal.energy.services import energy_plan, energy_reconcile, energy_tick, node_power_set
from portal.jobs.models import Allocation, Job
from portal.jobs.services import job_submit
from portal.nodes.models import Node, NodePower, NodeState
from portal.nodes.services import nodes_mark_stale_down
from portal.scheduler.services import scheduling_round
from tests.fixtures import register_node
from tests.portal.energy.conftest import Cluster, Commands


def _flat_history(now: datetime, *, in_use: int, total: int, hours: float = 2.0) -> None:
    start = now.replace(second=0, microsecond=0) - timedelta(hours=hours)
    minutes = int(hours * 60)
    DemandSample.objects.bulk_create(
        DemandSample(time=start + timedelta(minutes=m), in_use=in_use, total=total) for m in range(minutes)
    )


def _busy_node(cluster: Cluster) -> Node:
    job = job_submit(user=cluster.user, command="train", gpus=4)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running"
    return Allocation.objects.filter(job=job).first().node


def _power(name: str) -> str:
    return Node.objects.get(name=name).power


def test_a_round_powers_down_idle_nodes_above_the_floor_and_never_one_with_work(
    cluster: Cluster, energy_on: Commands, settings
) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_MIN_NODES_ON = 2
    busy = _busy_node(cluster)
    lent = register_node("inf1")[0]
    Node.objects.filter(pk=lent.pk).update(pool="inference", lent=True)
    now = timezone.now()
    _flat_history(now, in_use=1, total=5)

    result = energy_plan(now=now)

    assert result.enabled and result.target == 2, result  # demand 1, no buffer, floor 2
    assert len(result.powered_down) == 3 and busy.name not in result.powered_down
    assert _power(busy.name) == NodePower.ON and _power("inf1") == NodePower.ON
    assert sorted(line.split()[-1] for line in energy_on.logged()) == sorted(result.powered_down)
    assert all(line.startswith("--off ") for line in energy_on.logged())
    assert Node.objects.filter(power=NodePower.ON, pool="training").count() == 2
    assert PowerAction.objects.filter(action="off", ok=True, by="planner").count() == 3
    # A powered-down node takes no work, and the job on the busy one runs on.
    assert not any(n.takes_new_work for n in Node.objects.filter(power=NodePower.OFF))
    assert Job.objects.get().state == "running"


def test_never_below_the_floor(cluster: Cluster, energy_on: Commands, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_MIN_NODES_ON = 5
    now = timezone.now()
    _flat_history(now, in_use=0, total=5)
    result = energy_plan(now=now)
    assert result.powered_down == [] and energy_on.logged() == []
    settings.CORRAL_POWER_MIN_NODES_ON = 4
    assert len(energy_plan(now=now).powered_down) == 1


def test_a_node_that_just_finished_work_or_just_woke_stays_on(cluster: Cluster, energy_on: Commands, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_MIN_NODES_ON = 0
    Allocation.objects.create(
        job=job_submit(user=cluster.user, command="x", gpus=1),
        attempt=1,
        gpu=cluster.nodes[0].gpus.first(),
        node=cluster.nodes[0],
        rank=0,
        released_at=timezone.now() + timedelta(seconds=1),
    )
    now = timezone.now() + timedelta(minutes=2)
    Node.objects.filter(name="n2").update(power_changed_at=now - timedelta(minutes=1))
    Job.objects.update(state="cancelled", finished_at=timezone.now())
    _flat_history(now, in_use=0, total=5)
    result = energy_plan(now=now)
    assert sorted(result.powered_down) == ["n3", "n4", "n5"]


def test_without_recent_history_nothing_is_powered_down(cluster: Cluster, energy_on: Commands) -> None:
    now = timezone.now()
    _flat_history(now - timedelta(hours=3), in_use=0, total=5)  # the samples stopped three hours ago
    result = energy_plan(now=now)
    assert result.powered_down == [] and "holding" in result.reason


def test_off_by_default_nothing_is_powered(cluster: Cluster, commands: Commands) -> None:
    now = timezone.now()
    _flat_history(now, in_use=0, total=5)
    assert not energy_plan(now=now).enabled
    assert energy_tick(now=now) == []
    assert commands.logged() == [] and nodes_powered_down() == 0
    assert DemandSample.objects.filter(time=now.replace(second=0, microsecond=0)).exists()  # history still accrues


def test_a_waiting_job_wakes_a_node_and_starts_once_its_agent_is_back(
    cluster: Cluster, energy_on: Commands, settings
) -> None:  # noqa: ANN001
    now = timezone.now() - timedelta(minutes=5)
    Node.objects.update(last_heartbeat=now - timedelta(minutes=1))  # the agents of the nodes it powers down go quiet
    _flat_history(now, in_use=0, total=5)
    energy_plan(now=now)
    assert nodes_powered_down() == 4
    on = Node.objects.get(power=NodePower.ON)
    job = job_submit(user=cluster.user, command="big", gpus=8)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "pending" and job.reason_code == "not_enough_free_gpus"

    woken = energy_tick(now=timezone.now())

    assert [o.ok for o in woken] == [True]  # 4 free on the node that is on, 4 more needed: one node
    assert nodes_waking() == 1
    waking = Node.objects.get(power=NodePower.WAKING)
    assert energy_on.logged()[-1] == f"--on {waking.name}"
    assert energy_tick(now=timezone.now()) == []  # already on its way: not woken twice
    scheduling_round()
    assert Job.objects.get(pk=job.pk).state == "pending"  # a waking node takes no work yet
    register_node(waking.name)  # its agent starts and registers
    assert energy_reconcile(now=timezone.now()) == [waking.name]
    assert _power(waking.name) == NodePower.ON
    scheduling_round()
    assert Job.objects.get(pk=job.pk).state == "running"
    assert {a.node.name for a in Allocation.objects.filter(job=job)} == {on.name, waking.name}


def test_nothing_is_powered_down_while_a_job_waits_for_gpus(cluster: Cluster, energy_on: Commands) -> None:
    now = timezone.now()
    job_submit(user=cluster.user, command="huge", gpus=20)
    job_submit(user=cluster.user, command="big", gpus=8)
    scheduling_round()
    _flat_history(now, in_use=0, total=5)
    assert energy_plan(now=now).powered_down == []


def test_a_failed_power_off_leaves_the_node_on_and_says_why(cluster: Cluster, energy_on: Commands, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POWER_OFF_COMMAND = energy_on.fail
    busy = _busy_node(cluster)
    now = timezone.now()
    _flat_history(now, in_use=1, total=5)
    result = energy_plan(now=now)
    assert len(result.failed) == 4 and result.powered_down == []
    for node in Node.objects.exclude(pk=busy.pk):
        assert node.power == NodePower.ON and node.takes_new_work
        assert node.power_detail.startswith(f"power-off failed: exit 1: BMC of {node.name} unreachable")
    assert PowerAction.objects.filter(ok=False, action="off").count() == 4
    assert Job.objects.get().state == "running" and Allocation.objects.filter(released_at=None).count() == 4


def test_a_power_on_that_times_out_or_is_missing_leaves_the_node_off(
    cluster: Cluster, energy_on: Commands, settings
) -> None:  # noqa: ANN001
    now = timezone.now()
    _flat_history(now, in_use=0, total=5)
    energy_plan(now=now)
    settings.CORRAL_POWER_COMMAND_TIMEOUT = 0.5
    settings.CORRAL_POWER_ON_COMMAND = energy_on.slow
    job = job_submit(user=cluster.user, command="big", gpus=8)
    scheduling_round()
    outcomes = energy_tick(now=now + timedelta(minutes=1))
    assert [o.ok for o in outcomes] == [False]
    node = Node.objects.get(name=outcomes[0].node)
    assert node.power == NodePower.OFF and node.power_detail.startswith("power-on failed: timed out after 0.5 s")
    settings.CORRAL_POWER_ON_COMMAND = energy_on.missing
    outcomes = energy_tick(now=now + timedelta(minutes=2))
    assert not outcomes[0].ok and "No such file" in Node.objects.get(name=outcomes[0].node).power_detail
    assert nodes_powered_down() == 4 and Job.objects.get(pk=job.pk).state == "pending"  # waits, never lost
    assert PowerAction.objects.filter(ok=False, action="on").count() == 2


def test_a_powered_down_node_going_quiet_is_not_marked_down(cluster: Cluster, energy_on: Commands) -> None:
    """The liveness sweep marks silent nodes down and requeues their jobs as hardware failures; a node powered
    down (or waking) is silent on purpose and stays as it is."""
    now = timezone.now()
    _flat_history(now, in_use=0, total=5)
    energy_plan(now=now)
    on = Node.objects.get(power=NodePower.ON)
    later = timezone.now() + timedelta(minutes=10)
    assert nodes_mark_stale_down(now=later) == [on.name]  # the node that is on and silent: down, as ever
    assert set(Node.objects.filter(power=NodePower.OFF).values_list("state", flat=True)) == {NodeState.UP}


def test_a_node_that_does_not_come_back_is_given_up_and_shown_down(
    cluster: Cluster, energy_on: Commands, settings
) -> None:  # noqa: ANN001
    now = timezone.now()
    _flat_history(now, in_use=0, total=5)
    energy_plan(now=now)
    job_submit(user=cluster.user, command="big", gpus=8)
    scheduling_round()
    waking = energy_tick(now=now + timedelta(minutes=1))[0].node
    assert energy_reconcile(now=now + timedelta(minutes=20)) == []
    assert energy_reconcile(now=now + timedelta(minutes=32)) == [waking]
    node = Node.objects.get(name=waking)
    assert node.power == NodePower.ON and node.state == NodeState.DOWN
    assert "did not come back within 30 min" in node.state_reason
    assert PowerAction.objects.filter(node=node, action="on", ok=False).exists()


def test_an_admin_powers_a_node_by_hand_within_the_same_rules(cluster: Cluster, energy_on: Commands) -> None:
    from portal.errors import Conflict

    busy = _busy_node(cluster)
    now = timezone.now()
    try:
        node_power_set(node=busy, on=False, by="admin:root", now=now)
    except Conflict as exc:
        assert "has work" in str(exc)
    else:
        raise AssertionError("a node with work was powered down")
    idle = Node.objects.exclude(pk=busy.pk).first()
    assert node_power_set(node=idle, on=False, by="admin:root", now=now).ok
    assert _power(idle.name) == NodePower.OFF
    assert node_power_set(node=Node.objects.get(pk=idle.pk), on=True, by="admin:root", now=now).ok
    assert _power(idle.name) == NodePower.WAKING
    assert list(PowerAction.objects.order_by("pk").values_list("action", "by")) == [
        ("off", "admin:root"),
        ("on", "admin:root"),
    ]


def test_the_planner_wakes_nodes_when_demand_reaches_what_is_on(cluster: Cluster, energy_on: Commands) -> None:
    now = timezone.now()
    Node.objects.filter(name__in=["n3", "n4", "n5"]).update(power=NodePower.OFF, power_changed_at=now)
    _flat_history(now, in_use=3, total=5)  # three nodes busy in every recent step, two on now
    result = energy_plan(now=now)
    assert result.target == 3 and result.reason == "wake: demand above powered nodes"
    assert len(result.woken) == 1 and nodes_waking() == 1
    assert PowerAction.objects.get(action="on").by == "planner"
