"""What the OpenAPI schema says about error answers and the agent calls, checked against the real answers.

``test_schema_fuzz.py`` checks every answer it gets against the schema (status, content type, body). These are the
answers it cannot reach from its seeded world (a quota, a node that never registered, a GPU on two nodes, a session
without its CSRF token), and the documentation itself. Ref: status_code_conformance, found by test_schema_fuzz.py
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.services import job_submit
from portal.nodes.services import node_token_issue
from portal.tenants.models import Quota
from telemetry.sample import GpuSample, XidEvent
from tests.fixtures import World, agent_client

SCHEMA_PATH = "/api/v1/schema/"


@pytest.fixture
def schema(db: None) -> dict[str, Any]:
    response = APIClient().get(SCHEMA_PATH, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def _conforms(schema: dict[str, Any], path: str, method: str, response: Any) -> None:
    """The answer's status and content type are documented for the operation, and its body fits their schema."""
    documented = schema["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code, list(documented))
    content = documented[str(response.status_code)]["content"][response["Content-Type"].split(";")[0]]
    jsonschema.validate(response.json(), {**content["schema"], "components": schema["components"]})


def test_the_schema_generates_without_a_warning_and_validates(tmp_path: Path) -> None:
    # What `manage.py spectacular --validate --fail-on-warn` does; it raises on any warning or error.
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(tmp_path / "schema.yml"))


def test_a_quota_refusal_is_the_documented_409(schema: dict[str, Any], api: APIClient, world: World) -> None:
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=1)
    job_submit(user=world.alice, command="a", gpus=1)
    response = api.post("/api/v1/jobs/", {"command": "b", "gpus": 1}, format="json")
    assert response.status_code == 409 and response.json()["code"] == "quota_exceeded"
    _conforms(schema, "/api/v1/jobs/", "post", response)


def test_a_session_call_without_its_csrf_token_is_the_documented_403(schema: dict[str, Any], world: World) -> None:
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(world.alice)
    response = browser.post("/api/v1/jobs/", {"command": "b", "gpus": 1}, content_type="application/json")
    assert response.status_code == 403 and "CSRF" in response.json()["detail"]
    _conforms(schema, "/api/v1/jobs/", "post", response)


def test_a_bad_token_is_a_401_even_where_none_is_needed(schema: dict[str, Any], world: World) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    response = client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw"}, format="json")
    assert response.status_code == 401
    _conforms(schema, "/api/v1/auth/token/", "post", response)
    assert "security" not in schema["paths"]["/api/v1/auth/token/"]["post"]  # it takes no credentials


def test_a_node_that_never_registered_gets_the_documented_409(schema: dict[str, Any], world: World) -> None:
    _, token = node_token_issue(name="n3")
    response = agent_client(token).post("/api/v1/agent/heartbeat/", {"tasks": []}, format="json")
    assert (response.status_code, response.json()) == (409, {"detail": "register again"})
    _conforms(schema, "/api/v1/agent/heartbeat/", "post", response)


def test_a_gpu_on_two_nodes_is_the_documented_409_with_field_errors(schema: dict[str, Any], world: World) -> None:
    stolen = {"gpus": [{"index": 0, "uuid": "GPU-n1-2"}]}
    response = agent_client(world.tokens["n2"]).post("/api/v1/agent/register/", stolen, format="json")
    assert response.status_code == 409 and set(response.json()) == {"gpus", "code"}
    _conforms(schema, "/api/v1/agent/register/", "post", response)


def test_agent_calls_document_their_token_their_bodies_and_their_replies(schema: dict[str, Any]) -> None:
    assert schema["components"]["securitySchemes"]["nodeTokenAuth"]["name"] == "Authorization"
    replies = {"register": "RegisterReply", "heartbeat": "HeartbeatReply", "samples": "IngestResult"}
    for name, reply in replies.items():
        operation = schema["paths"][f"/api/v1/agent/{name}/"]["post"]
        assert operation["security"] == [{"nodeTokenAuth": []}]
        assert list(operation["requestBody"]["content"]) == ["application/json"]
        ok = operation["responses"]["200"]["content"]["application/json"]["schema"]
        assert ok == {"$ref": f"#/components/schemas/{reply}"}
        assert {"400", "401", "415"} <= set(operation["responses"]) and "403" not in operation["responses"]


def test_every_samples_field_is_documented(schema: dict[str, Any]) -> None:
    documented = schema["components"]["schemas"]
    assert set(documented["GpuSampleRequest"]["properties"]) == set(GpuSample.__dataclass_fields__)
    assert set(documented["XidEventRequest"]["properties"]) == set(XidEvent.__dataclass_fields__)


def test_job_events_document_no_job_filters(schema: dict[str, Any]) -> None:
    """The job list's filters were documented there: they filter the job looked up (a 404), not its events."""
    operation = schema["paths"]["/api/v1/jobs/{id}/events/"]["get"]
    assert [p["name"] for p in operation["parameters"]] == ["id"]
    assert "400" not in operation["responses"]
