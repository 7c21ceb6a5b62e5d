"""Job arrays over the REST API: submit with ``array``, bad specs as 400s naming the field, the arrays list and
detail with counts by state, cancel a whole array or one task, visibility, and ``GET /api/v1/jobs/?array=``.
Ref: #16"""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.jobs.array_services import job_array_submit
from portal.jobs.models import Job
from portal.scheduler.services import scheduling_round
from portal.tenants.models import Quota
from tests.fixtures import World


def _submit(api: APIClient, **payload: Any) -> Any:
    return api.post("/api/v1/jobs/", {"command": "python sweep.py", "gpus": 1, **payload}, format="json")


def test_submitting_an_array_answers_201_with_the_array(api: APIClient, world: World) -> None:
    response = _submit(api, name="sweep", array="0-999%50", env={"SEED": "3"}, time_limit=3600)
    assert response.status_code == 201, response.content
    body = response.json()
    assert {k: body[k] for k in body if k not in ("id", "submitted_at")} == {
        "name": "sweep",
        "command": "python sweep.py",
        "gpus": 1,
        "tenant": "lab",
        "user": "alice",
        "env": {"SEED": "3"},
        "time_limit": 3600,
        "spec": "0-999%50",
        "limit": 50,
        "task_count": 1000,
        "index_min": 0,
        "index_max": 999,
        "counts": {"running": 0, "pending": 1000, "succeeded": 0, "failed": 0, "cancelled": 0},
        "tasks_url": f"/api/v1/jobs/?array={body['id']}",
    }
    assert Job.objects.filter(array_id=body["id"]).count() == 1000


def test_without_array_or_with_null_it_is_one_job(api: APIClient, world: World) -> None:
    for payload in ({}, {"array": None}):
        body = _submit(api, **payload).json()
        assert body["state"] == "pending" and body["array"] is None and body["array_index"] is None


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("5-1", "goes down"),
        ("0-10000000", "at most 100,000"),
        ("a-b", "not an index"),
        ("0-9%0", "at least 1"),
        ("", "give the array's task indices"),
        ("   ", "give the array's task indices"),
        ("-1", "cannot be negative"),
        ("4000001", "largest allowed"),
        ("1,,2", "empty term"),
        ("0\x00-3", "Null characters"),  # DRF's own check, before the database could refuse it with a 500
        ("1," * 9000, "no more than 16000 characters"),  # the serializer's length cap, before any parsing
    ],
)
def test_a_bad_spec_is_a_400_naming_array(api: APIClient, world: World, spec: str, words: str) -> None:
    response = _submit(api, array=spec)
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(k for k in body if k != "code") == ["array"] and words in body["array"][0], body
    assert not Job.objects.exists()


def test_an_array_past_the_active_job_limit_is_a_409(api: APIClient, world: World) -> None:
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=10)
    response = _submit(api, array="0-10")
    assert response.status_code == 409 and response.json()["code"] == "quota_exceeded"
    assert _submit(api, array="0-9").status_code == 201


def test_tasks_are_jobs_with_their_array_and_index_and_can_be_filtered(api: APIClient, world: World) -> None:
    array_id = _submit(api, array="3,5,7").json()["id"]
    _submit(api)  # a job outside the array
    body = api.get(f"/api/v1/jobs/?array={array_id}").json()
    assert body["count"] == 3
    assert sorted((j["array"], j["array_index"], j["name"]) for j in body["results"]) == [
        (array_id, 3, "python sweep.py[3]"),
        (array_id, 5, "python sweep.py[5]"),
        (array_id, 7, "python sweep.py[7]"),
    ]
    for bad in ("abc", "1.5", "99999999999999999999999"):
        response = api.get(f"/api/v1/jobs/?array={bad}")
        assert response.status_code == 400 and "array" in response.json(), bad


def test_the_arrays_list_counts_states_with_one_query_per_page(
    api: APIClient,
    world: World,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    arrays = [job_array_submit(user=world.alice, command="x", gpus=1, array=f"0-{n}") for n in range(1, 6)]
    scheduling_round()  # lab may use 6 GPUs: some tasks start
    with django_assert_max_num_queries(5):  # auth, count, page, counts: never one per array
        body = api.get("/api/v1/arrays/").json()
    assert [a["id"] for a in body["results"]] == [a.pk for a in reversed(arrays)]  # newest first
    totals = {a["id"]: a["counts"] for a in body["results"]}
    assert sum(c["running"] for c in totals.values()) == 6
    for job_array in arrays:
        assert sum(totals[job_array.pk].values()) == job_array.task_count


def test_another_tenants_array_is_a_404(api: APIClient, world: World) -> None:
    theirs = job_array_submit(user=world.eve, command="x", gpus=1, array="0-3")
    assert api.get(f"/api/v1/arrays/{theirs.pk}/").status_code == 404
    assert api.post(f"/api/v1/arrays/{theirs.pk}/cancel/").status_code == 404
    assert api.get("/api/v1/arrays/").json()["count"] == 0
    assert api.get(f"/api/v1/jobs/?array={theirs.pk}").json()["count"] == 0
    assert api.get("/api/v1/arrays/abc/").status_code == 404


def test_cancel_a_whole_array_then_nothing_is_left(api: APIClient, world: World) -> None:
    array_id = _submit(api, array="0-9%2").json()["id"]
    scheduling_round()
    response = api.post(f"/api/v1/arrays/{array_id}/cancel/")
    assert response.status_code == 200, response.content
    counts = response.json()["counts"]
    assert counts == {"running": 2, "pending": 0, "succeeded": 0, "failed": 0, "cancelled": 8}
    running = Job.objects.filter(array_id=array_id, state="running")
    assert all(job.cancel_requested_at is not None for job in running)  # stopping: their processes are told to
    assert api.get(f"/api/v1/arrays/{array_id}/").json()["counts"] == counts


def test_cancel_one_task_with_the_job_endpoint(api: APIClient, world: World) -> None:
    array_id = _submit(api, array="0-2").json()["id"]
    task = Job.objects.get(array_id=array_id, array_index=1)
    assert api.post(f"/api/v1/jobs/{task.pk}/cancel/").json()["state"] == "cancelled"
    counts = api.get(f"/api/v1/arrays/{array_id}/").json()["counts"]
    assert (counts["pending"], counts["cancelled"]) == (2, 1)


def test_cancel_is_for_the_owner_or_a_tenant_admin_and_409_when_done(api: APIClient, world: World) -> None:
    bobs = job_array_submit(user=world.bob, command="x", gpus=1, array="0-2")
    response = api.post(f"/api/v1/arrays/{bobs.pk}/cancel/")  # alice is a member, not its owner
    assert response.status_code == 403 and response.json()["code"] == "permission_denied"
    mine = _submit(api, array="0-1").json()["id"]
    assert api.post(f"/api/v1/arrays/{mine}/cancel/").status_code == 200
    again = api.post(f"/api/v1/arrays/{mine}/cancel/")
    assert again.status_code == 409 and again.json()["code"] == "conflict"
