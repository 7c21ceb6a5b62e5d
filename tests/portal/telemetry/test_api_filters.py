"""Query parameters of the telemetry list endpoints, parsed by ``portal.telemetry.filters``: same names and meanings as
before, a 400 naming the parameter for a value that does not parse, and every parameter in the OpenAPI schema."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, sample, xid

GPUS = "/api/v1/telemetry/gpus/"
ALERTS = "/api/v1/telemetry/alerts/"


@pytest.fixture
def one_drained_gpu(world: World) -> World:
    """GPU n2/3 drained by a fatal XID (one active critical alert on n2); the others healthy."""
    post_batch(world, "n1", [sample("GPU-n1-0")])
    post_batch(world, "n2", [], [xid("GPU-n2-3", 79)])
    return world


def _uuids(response) -> list[str]:  # noqa: ANN001
    assert response.status_code == 200, response.content
    return [row["uuid"] for row in response.json()["results"]]


def test_gpus_filter_by_node_and_health(api: APIClient, one_drained_gpu: World) -> None:
    assert _uuids(api.get(GPUS, {"node": "n1"})) == [f"GPU-n1-{i}" for i in range(4)]
    assert _uuids(api.get(GPUS, {"health": "unhealthy"})) == ["GPU-n2-3"]
    assert _uuids(api.get(GPUS, {"node": "n1", "health": "unhealthy"})) == []
    assert _uuids(api.get(GPUS, {"node": "nope"})) == []  # an unknown node is an empty list, as before
    assert len(_uuids(api.get(GPUS, {"node": "", "health": ""}))) == 8  # empty means "not given"


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"health": "sick"}, "health", "not one of the available choices"),
        ({"health": "UNHEALTHY"}, "health", "not one of the available choices"),
    ],
)
def test_a_bad_gpu_filter_is_a_400_naming_it(
    api: APIClient, world: World, params: dict, field: str, words: str
) -> None:
    response = api.get(GPUS, params)
    assert response.status_code == 400
    body = response.json()
    assert list(body) == [field] and words in body[field][0]


@pytest.mark.parametrize(
    ("value", "active"),
    [("true", 1), ("TRUE", 1), ("1", 1), ("false", 0), ("False", 0), ("0", 0), ("", 1)],
)
def test_alerts_filter_by_active(api: APIClient, one_drained_gpu: World, value: str, active: int) -> None:
    response = api.get(ALERTS, {"active": value})
    assert response.status_code == 200
    assert [alert["gpu"] for alert in response.json()["results"]] == ["GPU-n2-3"] * active


def test_alerts_filter_by_node(api: APIClient, one_drained_gpu: World) -> None:
    assert [a["node"] for a in api.get(ALERTS, {"node": "n2"}).json()["results"]] == ["n2"]
    assert api.get(ALERTS, {"node": "n1"}).json()["results"] == []


@pytest.mark.parametrize("value", ["yes", "maybe", "2", "truee", "null"])
def test_a_bad_active_flag_is_a_400_naming_it(api: APIClient, world: World, value: str) -> None:
    response = api.get(ALERTS, {"active": value})
    assert response.status_code == 400
    assert response.json() == {"active": ["Enter true or false."]}


def test_bad_page_numbers_are_a_404_not_a_500(api: APIClient, world: World) -> None:
    assert api.get(ALERTS, {"page": "x"}).status_code == 404
    assert api.get(GPUS, {"page": "9"}).status_code == 404


def test_the_schema_documents_every_parameter(api: APIClient, world: World) -> None:
    schema = api.get("/api/v1/schema/", {"format": "json"}).json()

    def parameters(path: str) -> dict[str, dict]:
        return {p["name"]: p for p in schema["paths"][path]["get"]["parameters"] if p["in"] == "query"}

    gpus = parameters(GPUS)
    assert {"node", "health", "page"} <= set(gpus)
    assert gpus["health"]["schema"]["enum"] == ["cordoned", "healthy", "unhealthy"]
    assert gpus["node"]["schema"]["type"] == "string" and gpus["node"]["description"]
    alerts = parameters(ALERTS)
    assert {"active", "node", "page"} <= set(alerts)
    assert alerts["active"]["schema"]["type"] == "boolean" and "resolved" in alerts["active"]["description"]
