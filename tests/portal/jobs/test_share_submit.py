"""Submitting a share of a GPU (issue #17): `"gpus": 0.25` in the API, with `gpu_memory` and `workload_class`;
bad input is a 400 naming the field. Ref: #17"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.nodes.services import node_heartbeat
from portal.scheduler.services import scheduling_round
from tests.fixtures import World
from tests.portal.scheduler.test_share_round import share_gpus

GIB = 1 << 30


def _post(api: APIClient, **fields: object) -> tuple[int, dict[str, object]]:
    response = api.post("/api/v1/jobs/", {"command": "python serve.py", **fields}, format="json")
    return response.status_code, response.json()


def test_a_share_is_submitted_with_its_memory_and_class(world: World, api: APIClient) -> None:
    share_gpus(world.nodes[0], [0], memory_mb=40 * 1024)
    status, body = _post(api, gpus=0.25, gpu_memory="16G", workload_class="online")
    assert status == 201, body
    assert (body["gpus"], body["gpu_fraction"], body["gpu_memory_bytes"]) == (1, 0.25, 16 * GIB)
    assert body["workload_class"] == "online"
    job = Job.objects.get(pk=body["id"])
    assert (job.gpus, job.gpu_fraction, job.workload_class) == (1, 0.25, "online")


def test_whole_numbers_keep_their_meaning(world: World, api: APIClient) -> None:
    status, body = _post(api, gpus=2)
    assert status == 201 and body["gpus"] == 2 and body["gpu_fraction"] is None
    status, body = _post(api, gpus=1.0)
    assert status == 201 and body["gpus"] == 1 and body["gpu_fraction"] is None


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpus": 0}, "gpus"),
        ({"gpus": -0.5}, "gpus"),
        ({"gpus": 1e-9}, "gpus"),  # below MPS's whole percent: it could never be given compute
        ({"gpus": 1.5}, "gpus"),
        ({"gpus": "nan"}, "gpus"),
        ({"gpus": True}, "gpus"),
        ({"gpus": 0.25, "gpu_memory": "64G"}, "gpu_memory"),  # the largest shared GPU has 40 GiB
        ({"gpus": 0.25, "gpu_memory": "lots"}, "gpu_memory"),
        ({"gpus": 0.25, "workload_class": "x"}, "workload_class"),
        ({"gpus": 2, "workload_class": "online"}, "workload_class"),
        ({"gpus": 2, "gpu_memory": "1G"}, "gpu_memory"),
        ({"gpus": 0.5, "array": "0-3"}, "gpus"),
        ({"gpus": 0.25, "latency_slo_ms": 50}, "latency_slo_ms"),  # offline work has no latency target
        ({"gpus": 2, "latency_slo_ms": 50}, "latency_slo_ms"),
        ({"gpus": 0.25, "workload_class": "online", "latency_slo_ms": 0}, "latency_slo_ms"),
    ],
)
def test_bad_share_input_is_a_400_naming_the_field(
    world: World, api: APIClient, fields: dict[str, object], field: str
) -> None:
    share_gpus(world.nodes[0], [0], memory_mb=40 * 1024)
    status, body = _post(api, **fields)
    assert status == 400, body
    assert field in str(body), body
    assert not Job.objects.exists()


def test_a_share_on_a_cluster_without_shared_gpus_is_refused(world: World, api: APIClient) -> None:
    status, body = _post(api, gpus=0.5, workload_class="online")
    assert status == 400 and "gpus" in str(body) and "accepts shares" in str(body)


def test_the_form_takes_a_share_and_explains_bad_input(world: World, client: Client) -> None:
    share_gpus(world.nodes[0], [0], memory_mb=40 * 1024)
    assert client.login(username="alice", password="pw")
    for gpus, extra, words in [
        ("0", {}, "A job needs more than 0 GPUs"),
        ("-0.5", {}, "A job needs more than 0 GPUs"),
        ("0.001", {}, "A share is at least 0.01 of a GPU"),
        ("a quarter", {}, "Give a whole number of GPUs, or a fraction of one GPU like 0.25."),
        ("1.5", {}, "More than one GPU must be a whole number"),
        ("0.25", {"gpu_memory": "64G"}, "no shared GPU can give 64.0 GiB"),
        ("2", {"workload_class": "online"}, "Only a share (GPUs between 0 and 1) has a class."),
    ]:
        page = client.post("/jobs/new/", {"command": "x", "gpus": gpus, **extra})
        assert page.status_code == 200 and words in page.content.decode(), gpus
    assert not Job.objects.exists()
    response = client.post(
        "/jobs/new/", {"command": "python serve.py", "gpus": "0.5", "gpu_memory": "8G", "workload_class": "online"}
    )
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.gpus, job.gpu_fraction, job.gpu_memory_bytes, job.workload_class) == (1, 0.5, 8 * GIB, "online")


def test_an_online_shares_latency_target_reaches_the_agent(world: World, api: APIClient) -> None:
    share_gpus(world.nodes[0], [0], memory_mb=40 * 1024)
    status, body = _post(api, gpus=0.25, workload_class="online", latency_slo_ms=50)
    assert status == 201 and body["latency_slo_ms"] == 50, body
    scheduling_round()
    (order,) = node_heartbeat(node=world.nodes[0], reports=[]).start
    assert order["share"]["latency_slo_ms"] == 50 and order["share"]["workload_class"] == "online"
