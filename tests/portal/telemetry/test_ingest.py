"""Telemetry ingest over HTTP: batches are stored whole or refused whole, nothing is lost silently. Ref: #4"""

from __future__ import annotations

import time

import pytest
from django.db import connection

from portal.nodes.models import Gpu
from portal.telemetry.models import LatestSample, NodeTelemetry, Sample, XidRecord
from tests.concurrency import run_together
from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, sample, xid


def test_a_batch_stores_raw_samples_the_latest_row_and_the_drop_count(world: World) -> None:
    t0 = time.time() - 20
    batch = [sample(f"GPU-n1-{i}", t0 + k * 10, gpu_util=float(10 * k + i)) for k in range(2) for i in range(4)]
    response = post_batch(world, "n1", batch, dropped=5)
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 8, "duplicates": 0, "rejected": 0, "xid_events": 0, "drained": []}
    assert Sample.objects.count() == 8
    latest = LatestSample.objects.get(gpu__uuid="GPU-n1-2")
    assert latest.ts.timestamp() == pytest.approx(t0 + 10) and latest.gpu_util == 12.0 and latest.mem_total_mb == 1000
    state = NodeTelemetry.objects.get(node__name="n1")
    assert (state.agent_dropped, state.samples_received, state.batches) == (5, 8, 1)


def test_a_retried_batch_is_not_stored_twice(world: World) -> None:
    batch = [sample(f"GPU-n1-{i}") for i in range(4)]
    assert post_batch(world, "n1", batch).json()["accepted"] == 4
    again = post_batch(world, "n1", batch, dropped=7).json()
    assert (again["accepted"], again["duplicates"]) == (0, 4)
    assert Sample.objects.count() == 4
    state = NodeTelemetry.objects.get(node__name="n1")
    assert (state.samples_duplicate, state.agent_dropped) == (4, 7)


def test_samples_for_another_nodes_gpu_or_from_the_future_are_rejected_and_counted(world: World) -> None:
    response = post_batch(world, "n1", [sample("GPU-n2-0"), sample("GPU-n1-0", time.time() + 3600), sample("GPU-n1-1")])
    assert response.json()["accepted"] == 1 and response.json()["rejected"] == 2
    assert NodeTelemetry.objects.get(node__name="n1").samples_rejected == 2
    assert not LatestSample.objects.filter(gpu__uuid="GPU-n2-0").exists()


def test_xid_events_and_sample_xids_are_recorded_once_with_their_class(world: World) -> None:
    now = time.time()
    post_batch(world, "n1", [sample("GPU-n1-0", now, xid=13)], [xid("GPU-n1-0", 13, now - 1), xid("GPU-n1-1", 63, now)])
    post_batch(world, "n1", [], [xid("GPU-n1-1", 63, now)])  # a resent event
    records = {(r.gpu.uuid, r.xid, r.klass) for r in XidRecord.objects.select_related("gpu")}
    assert records == {("GPU-n1-0", 13, "application"), ("GPU-n1-1", 63, "precursor")}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"samples": "lots"}, "samples"),
        ({"samples": [{"gpu_uuid": "GPU-n1-0", "timestamp": 1.0}]}, "samples"),  # no index
        ({"samples": [{"gpu_uuid": "GPU-n1-0", "index": 0, "timestamp": 1.0, "gpu_util": "hot"}]}, "samples"),
        ({"samples": [{"gpu_uuid": "GPU-n1-0", "index": 0, "timestamp": float("inf")}]}, None),
        ({"samples": [], "xid_events": [{"gpu_uuid": "GPU-n1-0", "xid": "79", "timestamp": 1.0}]}, "xid_events"),
        ({"samples": [sample("GPU-n1-0", mem_used_mb=2**40)]}, "samples"),  # does not fit its column
        ({"samples": [sample("GPU-n1-0", 1e20)]}, "samples"),
        ({"samples": [sample("GPU-n1-0", xid=-1)]}, "samples"),
        ({"samples": [], "xid_events": [xid("GPU-n1-0", 79, -5.0)]}, "xid_events"),
        ({"samples": [], "dropped": -1}, "dropped"),
        ({"samples": [], "dropped": True}, "dropped"),
        (["not", "an", "object"], "detail"),
    ],
)
def test_a_bad_payload_is_a_400_naming_the_field(world: World, body: object, field: str | None) -> None:
    from tests.fixtures import agent_client

    client = agent_client(world.tokens["n1"])
    if field is None:  # JSON cannot carry infinity: the client's encoder refuses or the parser does
        response = client.post(
            "/api/v1/agent/samples/",
            '{"samples": [{"gpu_uuid": "GPU-n1-0", "index": 0, "timestamp": Infinity}]}',
            content_type="application/json",
        )
    else:
        response = client.post("/api/v1/agent/samples/", body, format="json")
    assert response.status_code == 400, response.content
    if field is not None:
        assert field in response.json()
    assert Sample.objects.count() == 0


def test_a_user_token_cannot_post_samples(world: World, api) -> None:  # noqa: ANN001
    response = api.post("/api/v1/agent/samples/", {"samples": [sample("GPU-n1-0")]}, format="json")
    assert response.status_code in (401, 403)
    assert Gpu.objects.get(uuid="GPU-n1-0").health == "healthy" and Sample.objects.count() == 0


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL")
@pytest.mark.django_db(transaction=True)
def test_a_retry_racing_its_original_stores_each_sample_once(world: World) -> None:
    batch = [sample(f"GPU-n1-{i}", time.time() - 30 + k) for k in range(20) for i in range(4)]
    answers = run_together(lambda: post_batch(world, "n1", batch).json(), threads=2)
    assert all(isinstance(a, dict) for a in answers), answers
    assert sorted((a["accepted"], a["duplicates"]) for a in answers) == [(0, 80), (80, 0)]
    assert Sample.objects.count() == 80


@pytest.mark.parametrize(
    ("samples", "events", "dropped", "field"),
    [
        ([sample("GPU-n1-0") | {"gpu_uuid": "GPU-n1-0\x00"}], [], 0, "samples"),  # PostgreSQL text cannot hold NUL
        ([], [xid("GPU-n1-0", 79) | {"gpu_uuid": "GPU-n1-0\x00"}], 0, "xid_events"),
        ([], [], 2**63, "dropped"),  # does not fit its column
    ],
)
def test_input_the_database_cannot_take_is_a_400_naming_the_field(
    world: World, samples: list, events: list, dropped: int, field: str
) -> None:
    """Each was a 500 (on PostgreSQL; the dropped count on SQLite too). Ref: found by test_schema_fuzz.py"""
    response = post_batch(world, "n1", samples, events, dropped)
    assert response.status_code == 400, response.content
    assert list(response.json()) == [field]
    assert Sample.objects.count() == 0
