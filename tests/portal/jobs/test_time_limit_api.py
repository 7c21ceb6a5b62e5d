"""``time_limit`` over REST: integer seconds in, shown on every job, refused with a field message, documented.
Ref: #4"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.jobs.models import Job
from tests.fixtures import World


def test_submit_with_a_time_limit_and_read_it_back(api: APIClient, world: World) -> None:
    response = api.post("/api/v1/jobs/", {"command": "train", "gpus": 1, "time_limit": 7200}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["time_limit"] == 7200
    job_id = response.json()["id"]
    assert api.get(f"/api/v1/jobs/{job_id}/").json()["time_limit"] == 7200
    assert Job.objects.get(pk=job_id).time_limit == 7200
    unlimited = api.post("/api/v1/jobs/", {"command": "x", "gpus": 1, "time_limit": None}, format="json")
    assert unlimited.status_code == 201 and unlimited.json()["time_limit"] is None
    listed = api.get("/api/v1/jobs/").json()["results"]
    assert {j["time_limit"] for j in listed} == {7200, None}


@pytest.mark.parametrize(
    ("time_limit", "words"),
    [
        (0, "at least 1 second"),
        (-5, "at least 1 second"),
        (2_592_001, "at most 30 days"),
        ("2h", "whole number of seconds"),
        (1.5, "whole number of seconds"),
        ([60], "whole number of seconds"),
    ],
)
def test_a_bad_time_limit_is_a_400_on_its_field(api: APIClient, world: World, time_limit: object, words: str) -> None:
    response = api.post("/api/v1/jobs/", {"command": "x", "gpus": 1, "time_limit": time_limit}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body) == ["time_limit"] and words in body["time_limit"][0]
    assert not Job.objects.exists()


def test_the_schema_documents_the_field(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    submit = schema["components"]["schemas"]["JobSubmitRequest"]["properties"]["time_limit"]
    assert submit["type"] == "integer" and submit["nullable"] is True
    assert (submit["minimum"], submit["maximum"]) == (1, 2_592_000)
    assert "Seconds each attempt may run" in submit["description"]
    shown = schema["components"]["schemas"]["Job"]["properties"]["time_limit"]
    assert shown["readOnly"] is True and "no limit" in shown["description"]
