"""What the operator sees: the nodes page, the dashboard, /metrics, and the staff power API. Ref: #19"""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.energy.models import PowerAction
from portal.jobs.services import job_submit
from portal.nodes.models import Node, NodePower
from portal.scheduler.services import scheduling_round
from tests.factories import UserFactory
from tests.portal.energy.conftest import Cluster, Commands


def _staff_api() -> APIClient:
    admin = UserFactory(username="root", is_staff=True)
    client = APIClient()
    client.force_authenticate(admin)
    return client


def test_the_nodes_page_shows_powered_down_and_waking(cluster: Cluster) -> None:
    Node.objects.filter(name="n2").update(power=NodePower.OFF, power_detail="powered down (planner): demand falling")
    Node.objects.filter(name="n3").update(power=NodePower.WAKING)
    client = Client()
    client.force_login(cluster.user)
    page = client.get("/nodes/", HTTP_HX_REQUEST="true").content.decode()
    assert "powered down" in page and "waking" in page and "powered down (planner): demand falling" in page
    assert page.count('data-testid="node-power"') == 2
    detail = client.get("/nodes/n2/").content.decode()
    assert 'data-testid="node-power-line"' in detail and "powered down" in detail


def test_the_dashboard_shows_node_hours_saved_while_energy_saving_is_on(cluster: Cluster, energy_on: Commands) -> None:
    job_submit(user=cluster.user, command="train", gpus=1)
    scheduling_round()
    PowerAction.objects.create(
        node=cluster.nodes[4], at=timezone.now() - timedelta(hours=3), action="off", ok=True, by="planner"
    )
    client = Client()
    client.force_login(cluster.user)
    page = client.get("/dashboard/?window=24h").content.decode()
    assert 'data-testid="stat-node-hours-saved"' in page
    assert ">3.0<" in page


def test_metrics_count_nodes_down_hours_saved_and_failures(cluster: Cluster) -> None:
    Node.objects.filter(name="n2").update(power=NodePower.OFF)
    PowerAction.objects.create(
        node=cluster.nodes[1], at=timezone.now() - timedelta(hours=2), action="off", ok=True, by="planner"
    )
    PowerAction.objects.create(node=cluster.nodes[2], at=timezone.now(), action="off", ok=False, by="planner")
    text = Client().get("/metrics").content.decode()
    assert "corral_nodes_powered_down 1.0" in text
    assert "corral_power_command_failures_total 1.0" in text
    saved = next(line for line in text.splitlines() if line.startswith("corral_energy_node_hours_saved_total"))
    assert abs(float(saved.split()[-1]) - 2.0) < 0.01


def test_staff_power_a_node_down_and_up_by_hand(cluster: Cluster, energy_on: Commands) -> None:
    api = _staff_api()
    down = api.post("/api/v1/nodes/n2/power/", {"action": "off"}, format="json")
    assert down.status_code == 200 and down.json()["power"] == "off" and down.json()["ok"]
    assert api.get("/api/v1/nodes/n2/").json()["power"] == "off"
    up = api.post("/api/v1/nodes/n2/power/", {"action": "on"}, format="json")
    assert up.status_code == 200 and up.json()["power"] == "waking"
    assert energy_on.logged() == ["--off n2", "--on n2"]


def test_power_api_bad_input_and_refusals_are_clear(cluster: Cluster, energy_on: Commands, settings) -> None:  # noqa: ANN001
    api = _staff_api()
    assert api.post("/api/v1/nodes/n2/power/", {"action": "reboot"}, format="json").status_code == 400
    assert api.post("/api/v1/nodes/nope/power/", {"action": "off"}, format="json").status_code == 404
    refused = api.post("/api/v1/nodes/n2/power/", {"action": "on"}, format="json")
    assert refused.status_code == 409 and "not powered down" in str(refused.json())
    settings.CORRAL_POWER_OFF_COMMAND = energy_on.fail
    failed = api.post("/api/v1/nodes/n2/power/", {"action": "off"}, format="json")
    assert failed.status_code == 502 and not failed.json()["ok"] and "BMC of n2 unreachable" in failed.json()["detail"]
    assert Node.objects.get(name="n2").power == NodePower.ON
    member = APIClient()
    member.force_authenticate(cluster.user)
    assert member.post("/api/v1/nodes/n2/power/", {"action": "off"}, format="json").status_code == 403


def test_power_api_says_when_energy_saving_is_off(cluster: Cluster) -> None:
    refused = _staff_api().post("/api/v1/nodes/n2/power/", {"action": "off"}, format="json")
    assert refused.status_code == 409 and "energy saving is off" in str(refused.json())
