"""The submit form takes an online share's p99 latency target (``latency_slo_ms``) by the API's rule
(``portal.jobs.share_spec``): the same bounds, only for an online share, readable messages on the field. Ref: #17"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.jobs.share_spec import MAX_LATENCY_SLO_MS, parse_latency_slo_ms
from tests.fixtures import World
from tests.portal.scheduler.test_share_round import share_gpus

ONLINE = {"command": "python serve.py", "gpus": "0.25", "workload_class": "online"}


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({**ONLINE, "latency_slo_ms": "fast"}, "A valid integer is required."),
        ({**ONLINE, "latency_slo_ms": "0"}, "Ensure this value is greater than or equal to 1."),
        ({**ONLINE, "latency_slo_ms": "3600001"}, "Ensure this value is less than or equal to 3600000."),
        ({**ONLINE, "workload_class": "offline", "latency_slo_ms": "50"}, "only an online share has a latency target"),
        ({**ONLINE, "workload_class": "", "latency_slo_ms": "50"}, "only an online share has a latency target"),
        ({"command": "x", "gpus": "2", "latency_slo_ms": "50"}, "Only an online share (GPUs between 0 and 1) has a"),
    ],
)
def test_the_form_explains_a_bad_latency_target(
    world: World, client: Client, fields: dict[str, str], words: str
) -> None:
    share_gpus(world.nodes[0], [0])
    assert client.login(username="alice", password="pw")
    page = client.post("/jobs/new/", fields)
    assert page.status_code == 200 and words in page.content.decode(), page.content.decode()
    assert not Job.objects.exists()


def test_the_form_takes_an_online_shares_latency_target(world: World, client: Client) -> None:
    share_gpus(world.nodes[0], [0])
    assert client.login(username="alice", password="pw")
    page = client.get("/jobs/new/").content.decode()
    assert 'name="latency_slo_ms"' in page
    response = client.post("/jobs/new/", {**ONLINE, "latency_slo_ms": " 50 "})
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.gpu_fraction, job.workload_class, job.latency_slo_ms) == (0.25, "online", 50)


def test_the_api_and_the_form_share_one_rule(world: World, api: APIClient) -> None:
    """The API's bounds are share_spec's: the highest it takes is the rule's highest, one more is refused."""
    share_gpus(world.nodes[0], [0])
    assert parse_latency_slo_ms(MAX_LATENCY_SLO_MS) == MAX_LATENCY_SLO_MS
    ok = api.post("/api/v1/jobs/", {**ONLINE, "gpus": 0.25, "latency_slo_ms": MAX_LATENCY_SLO_MS}, format="json")
    assert ok.status_code == 201 and ok.json()["latency_slo_ms"] == MAX_LATENCY_SLO_MS, ok.json()
    bad = api.post("/api/v1/jobs/", {**ONLINE, "gpus": 0.25, "latency_slo_ms": MAX_LATENCY_SLO_MS + 1}, format="json")
    assert bad.status_code == 400 and "latency_slo_ms" in bad.json(), bad.json()
