"""The public REST contract of issue #2: token auth, submit, list/filter, detail, log, cancel, nodes."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.jobs.logs import job_log_append
from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.scheduler.services import scheduling_round
from tests.fixtures import World


def test_token_exchange_and_auth_required(world: World) -> None:
    client = APIClient()
    assert client.get("/api/v1/jobs/").status_code == 401
    bad = client.post("/api/v1/auth/token/", {"username": "alice", "password": "wrong"}, format="json")
    assert bad.status_code == 400 and "non_field_errors" in bad.json()
    good = client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw"}, format="json")
    assert good.status_code == 200 and good.json()["token"]


def test_submit_returns_the_job(api: APIClient, world: World) -> None:
    response = api.post(
        "/api/v1/jobs/", {"name": "t", "command": "echo hi", "gpus": 2, "env": {"A": "1"}}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert {k: body[k] for k in ("name", "command", "gpus", "tenant", "user", "state", "env", "exit_code")} == {
        "name": "t",
        "command": "echo hi",
        "gpus": 2,
        "tenant": "lab",
        "user": "alice",
        "state": "pending",
        "env": {"A": "1"},
        "exit_code": None,
    }
    assert {"id", "reason", "submitted_at", "started_at", "finished_at", "node", "gpu_indices"} <= body.keys()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"command": "x", "gpus": -1}, "gpus"),
        ({"command": "x", "gpus": 10**12}, "gpus"),
        ({"command": "x", "gpus": "two"}, "gpus"),
        ({"command": "x", "gpus": 1.5}, "gpus"),
        ({"command": "", "gpus": 1}, "command"),
        ({"command": "   ", "gpus": 1}, "command"),
        ({"gpus": 1}, "command"),
        ({"command": ["ls"], "gpus": 1}, "command"),
        ({"command": "x", "gpus": 1, "tenant": "nope"}, "tenant"),
        ({"command": "x", "gpus": 1, "tenant": "other"}, "tenant"),
        ({"command": "x", "gpus": 1, "env": "A=1"}, "env"),
        ({"command": "x", "gpus": 1, "env": {"RANK": "3"}}, "env"),
        ({"command": "x", "gpus": 7}, "gpus"),  # over the tenant cap of 6
        ({"command": "x", "gpus": 64}, "gpus"),  # over the cluster's 8
    ],
)
def test_bad_input_gets_400_with_field_errors(api: APIClient, payload: dict, field: str) -> None:
    response = api.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json(), response.json()
    assert not Job.objects.exists()


def test_malformed_json_is_a_400(api: APIClient) -> None:
    response = api.post("/api/v1/jobs/", "{not json", content_type="application/json")
    assert response.status_code == 400


def test_another_tenants_job_is_a_404(api: APIClient, world: World) -> None:
    theirs = job_submit(user=world.eve, command="x", gpus=1)
    assert api.get(f"/api/v1/jobs/{theirs.pk}/").status_code == 404
    assert api.post(f"/api/v1/jobs/{theirs.pk}/cancel/").status_code == 404
    assert api.get(f"/api/v1/jobs/{theirs.pk}/log/").status_code == 404
    assert theirs.pk not in [j["id"] for j in api.get("/api/v1/jobs/").json()["results"]]
    assert Job.objects.get(pk=theirs.pk).state == "pending"


def test_list_filters(api: APIClient, world: World) -> None:
    mine = job_submit(user=world.alice, command="a", gpus=1)
    bobs = job_submit(user=world.bob, command="b", gpus=1)
    api.post(f"/api/v1/jobs/{bobs.pk}/cancel/")  # alice may not: 403, state unchanged
    job_submit(user=world.eve, command="c", gpus=1)
    ids = lambda q: sorted(j["id"] for j in api.get(f"/api/v1/jobs/{q}").json()["results"])  # noqa: E731
    assert ids("") == sorted([mine.pk, bobs.pk])  # the whole tenant, not the other one
    assert ids("?user=bob") == [bobs.pk]
    assert ids("?state=pending&tenant=lab") == sorted([mine.pk, bobs.pk])
    assert ids("?state=running") == []
    assert api.get("/api/v1/jobs/?state=bogus").status_code == 400


def test_cancel_by_non_owner_is_403_and_finished_is_409(api: APIClient, world: World) -> None:
    bobs = job_submit(user=world.bob, command="b", gpus=1)
    assert api.post(f"/api/v1/jobs/{bobs.pk}/cancel/").status_code == 403
    mine = job_submit(user=world.alice, command="a", gpus=1)
    first = api.post(f"/api/v1/jobs/{mine.pk}/cancel/")
    assert first.status_code == 200 and first.json()["state"] == "cancelled"
    again = api.post(f"/api/v1/jobs/{mine.pk}/cancel/")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]


def test_pending_job_says_why_and_running_job_says_where(api: APIClient, world: World) -> None:
    first = api.post("/api/v1/jobs/", {"command": "a", "gpus": 4}, format="json").json()
    second = api.post("/api/v1/jobs/", {"command": "b", "gpus": 4}, format="json").json()
    scheduling_round()
    running = api.get(f"/api/v1/jobs/{first['id']}/").json()
    waiting = api.get(f"/api/v1/jobs/{second['id']}/").json()
    assert running["state"] == "running" and running["node"] in {"n1", "n2"}
    assert running["gpu_indices"] == [0, 1, 2, 3]
    assert waiting["state"] == "pending"
    assert waiting["reason_code"] == "tenant_cap_reached" and "quota" in waiting["reason"]
    events = api.get(f"/api/v1/jobs/{first['id']}/events/").json()
    assert [e["kind"] for e in events] == ["submitted", "started"]


def test_log_follows_with_an_offset(api: APIClient, world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=1)
    job_log_append(job=job, data="hello\n")
    job_log_append(job=job, data="world\n")
    full = api.get(f"/api/v1/jobs/{job.pk}/log/")
    assert full.status_code == 200 and full["Content-Type"].startswith("text/plain")
    assert full.content.decode() == "hello\nworld\n" and full["X-Log-Offset"] == "12"
    tail = api.get(f"/api/v1/jobs/{job.pk}/log/?offset=8")
    assert tail.content.decode() == "rld\n" and tail["X-Job-State"] == "pending"
    assert api.get(f"/api/v1/jobs/{job.pk}/log/?offset=12").content == b""
    assert api.get(f"/api/v1/jobs/{job.pk}/log/", HTTP_ACCEPT="text/plain").content == b"hello\nworld\n"
    assert api.get(f"/api/v1/jobs/{job.pk}/log/?offset=-3").status_code == 400
    assert api.get(f"/api/v1/jobs/{job.pk}/log/?offset=abc").status_code == 400


def test_log_of_a_job_that_printed_more_than_the_cap(api: APIClient, world: World, settings) -> None:  # noqa: ANN001
    """The dropped middle shows as one marker line; X-Log-Offset leads past it, so a follower keeps moving."""
    settings.CORRAL_JOB_LOG_MAX_CHARS = 40  # keeps the first 20 characters and the latest (at most) 20
    job = job_submit(user=world.alice, command="x", gpus=1)
    for i in range(10):
        job_log_append(job=job, data=f"line {i:02d}\n")
    full = api.get(f"/api/v1/jobs/{job.pk}/log/", HTTP_ACCEPT="text/plain")
    text = full.content.decode()
    assert full.status_code == 200 and full["X-Log-Offset"] == "80"
    assert text.startswith("line 00\nline 01\nline\n[... 44 characters of output dropped: this job printed more")
    assert text.endswith(" kept ...]\nline 08\nline 09\n") and text.count("output dropped") == 1
    inside = api.get(f"/api/v1/jobs/{job.pk}/log/?offset=50")  # a follower that was inside the dropped range
    assert (
        inside.content.decode().startswith("\n[... 14 characters of output dropped") and inside["X-Log-Offset"] == "80"
    )
    assert inside.content.decode().endswith("...]\nline 08\nline 09\n")
    after = api.get(f"/api/v1/jobs/{job.pk}/log/?offset=72")
    assert (after.content, after["X-Log-Offset"]) == (b"line 09\n", "80")
    assert api.get(f"/api/v1/jobs/{job.pk}/log/?offset=80").content == b""


def test_nodes_list_gpus_and_who_holds_them(api: APIClient, world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=2)
    scheduling_round()
    nodes = api.get("/api/v1/nodes/").json()["results"]
    assert [n["name"] for n in nodes] == ["n1", "n2"] and all(n["state"] == "up" for n in nodes)
    held = [(n["name"], g["index"]) for n in nodes for g in n["gpus"] if g["job"] == job.pk]
    assert len(held) == 2 and all(g["state"] in ("free", "allocated") for n in nodes for g in n["gpus"])


def test_job_list_has_a_query_budget(api: APIClient, world: World, django_assert_max_num_queries) -> None:  # noqa: ANN001
    for i in range(30):
        job_submit(user=world.alice, command=f"c{i}", gpus=1)
    scheduling_round()
    with django_assert_max_num_queries(8):
        assert api.get("/api/v1/jobs/").status_code == 200


def test_openapi_schema_and_docs_are_served(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/")
    assert schema.status_code == 200 and b"/api/v1/jobs/" in schema.content
    assert api.get("/api/v1/docs/").status_code == 200


@pytest.mark.parametrize("value", ["yes", "2", "null"])
def test_a_bad_mine_flag_is_a_400_naming_it(api: APIClient, world: World, value: str) -> None:
    """It was read as "not given" and listed the whole tenant's jobs. Ref: found by test_schema_fuzz.py"""
    job_submit(user=world.bob, command="b", gpus=1)
    response = api.get(f"/api/v1/jobs/?mine={value}")
    assert response.status_code == 400 and "mine" in response.json()
    assert api.get("/api/v1/jobs/?mine=true").json()["count"] == 0
    assert api.get("/api/v1/jobs/?mine=false").json()["count"] == 1


def test_the_schema_documents_events_as_the_list_they_are(api: APIClient, world: World) -> None:
    """It documented a paginated object (count, results). Ref: found by test_schema_fuzz.py"""
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    ok = schema["paths"]["/api/v1/jobs/{id}/events/"]["get"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"type": "array", "items": {"$ref": "#/components/schemas/JobEvent"}}
    job = job_submit(user=world.alice, command="a", gpus=1)
    assert isinstance(api.get(f"/api/v1/jobs/{job.pk}/events/").json(), list)
