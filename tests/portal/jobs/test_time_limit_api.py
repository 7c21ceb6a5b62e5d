"""``time_limit`` over REST: integer seconds or a duration ("2h", as the form and the CLI take it) in, shown on every
job, refused with a field message, documented. Ref: #4, #18 (item 8)"""

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
        ("two hours", "whole number of seconds or a duration like 2h"),
        ("2h 1d", "whole number of seconds or a duration like 2h"),
        ("", "whole number of seconds or a duration like 2h"),
        ("0m", "at least 1 second"),
        ("31d", "at most 30 days"),
        ("9" * 41, "whole number of seconds or a duration like 2h"),
        (True, "whole number of seconds"),
        (1.5, "whole number of seconds"),
        ([60], "whole number of seconds"),
        ({"h": 2}, "whole number of seconds"),
    ],
)
def test_a_bad_time_limit_is_a_400_on_its_field(api: APIClient, world: World, time_limit: object, words: str) -> None:
    response = api.post("/api/v1/jobs/", {"command": "x", "gpus": 1, "time_limit": time_limit}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert list(body) == ["time_limit"] and words in body["time_limit"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("typed", "seconds"), [("2h", 7200), ("90m", 5400), ("1d 12h", 129_600), ("3600", 3600), (600.0, 600)]
)
def test_a_duration_means_what_it_means_in_the_form_and_the_cli(
    api: APIClient, world: World, typed: object, seconds: int
) -> None:
    response = api.post("/api/v1/jobs/", {"command": "train", "gpus": 1, "time_limit": typed}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["time_limit"] == seconds == Job.objects.get().time_limit


def test_the_schema_documents_the_field(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    submit = schema["components"]["schemas"]["JobSubmitRequest"]["properties"]["time_limit"]
    number, text = submit["oneOf"]
    assert number["type"] == "integer" and text["type"] == "string" and submit["nullable"] is True
    assert (number["minimum"], number["maximum"]) == (1, 2_592_000)
    assert '"2h"' in submit["description"] and "whole seconds" in submit["description"]
    shown = schema["components"]["schemas"]["Job"]["properties"]["time_limit"]
    assert shown["readOnly"] is True and "no limit" in shown["description"]
