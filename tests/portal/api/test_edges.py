"""The API's edges: absurdly nested JSON, NUL characters in URLs and oversized bodies are refused as 4xx answers in
the API's error shape, never a 500 or Django's HTML page. Ref: #15"""

from __future__ import annotations

from typing import cast

import pytest
from django.test import override_settings
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.views import APIView

from portal.api.parsers import MAX_DEPTH, depth_exceeds
from portal.urls import urlpatterns
from tests.fixtures import World, agent_client

#: About 2 KB that used to exhaust json.loads's stack: a RecursionError, a 500.
DEEP_ARRAY = "[" * 1100 + "]" * 1100
DEEP_OBJECT = '{"a":' * 1100 + "1" + "}" * 1100


def _quiet(client: APIClient) -> APIClient:
    """A server error comes back as a 500 answer instead of being raised into the test."""
    client.raise_request_exception = False
    return client


def _refused_as_json(response: object, status: int, code: str | None = None) -> dict[str, object]:
    assert response.status_code == status, (response.status_code, response.content[:300])  # type: ignore[attr-defined]
    assert response["Content-Type"].startswith("application/json")  # type: ignore[index]
    body: dict[str, object] = response.json()  # type: ignore[attr-defined]
    assert isinstance(body.get("detail"), str) and body["detail"]
    if code is not None:
        assert body["code"] == code
    return body


@pytest.mark.parametrize("body", [DEEP_ARRAY, DEEP_OBJECT], ids=["array", "object"])
def test_deep_json_is_a_400_on_the_token_jobs_and_agent_endpoints(world: World, api: APIClient, body: str) -> None:
    clients = {
        "/api/v1/auth/token/": _quiet(APIClient()),  # no credentials needed
        "/api/v1/jobs/": _quiet(api),
        "/api/v1/agent/heartbeat/": _quiet(agent_client(world.tokens["n1"])),
    }
    for url, client in clients.items():
        answer = _refused_as_json(client.post(url, body, content_type="application/json"), 400)
        assert f"deeper than {MAX_DEPTH}" in str(answer["detail"]), url


def test_nesting_just_past_the_limit_is_refused_and_at_the_limit_is_parsed(world: World) -> None:
    client = agent_client(world.tokens["n1"])
    nested = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    _refused_as_json(client.post("/api/v1/agent/heartbeat/", nested, content_type="application/json"), 400)
    # At the limit the parser lets it through; the serializer then says what is wrong with it, field by field.
    body = '{"tasks": ' + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "}"
    answer = client.post("/api/v1/agent/heartbeat/", body, content_type="application/json")
    assert answer.status_code == 400 and "tasks" in answer.json()


def test_depth_is_counted_in_levels_of_arrays_and_objects() -> None:
    assert not depth_exceeds({"a": [1, {"b": []}]}, 4) and depth_exceeds({"a": [1, {"b": []}]}, 3)
    assert not depth_exceeds("[[[[", 0) and depth_exceeds([], 0)
    assert depth_exceeds([[[]] * 1000] * 1000, 2) and not depth_exceeds([[[]] * 1000] * 1000, 3)


def test_nul_in_a_path_is_a_404_and_in_a_query_string_a_400(world: World, api: APIClient) -> None:
    # PostgreSQL refuses NUL in text: looking these up was a 500 there (SQLite alone let them through).
    _quiet(api)
    for url in ("/api/v1/nodes/%00/", "/api/v1/nodes/n1%00/", "/api/v1/jobs/1%00/"):
        _refused_as_json(api.get(url), 404, "not_found")
    for url in ("/api/v1/jobs/?name=%00", "/api/v1/jobs/?state=running&user=a%00b", "/api/v1/nodes/?%00=1"):
        _refused_as_json(api.get(url), 400, "invalid")
    # Nothing else changes: a NUL that is only escaped text is no NUL.
    assert api.get("/api/v1/jobs/?name=%2500").status_code == 200


def test_a_body_over_the_limit_is_a_json_413_naming_it(world: World, api: APIClient) -> None:
    ten_mb = '{"username": "' + "a" * 10_000_000 + '"}'
    for url, client in (("/api/v1/auth/token/", APIClient()), ("/api/v1/jobs/", api)):
        answer = _refused_as_json(_quiet(client).post(url, ten_mb, content_type="application/json"), 413, "too_large")
        assert answer["detail"] == "request body too large: at most 2.5 MiB (2621440 bytes)"


class _StreamEcho(APIView):
    """Reads its body as a stream, as an upload endpoint with a larger limit must."""

    authentication_classes: list[type] = []
    permission_classes: list[type] = []
    max_body_bytes = 4 * 2**20

    def post(self, request: Request) -> Response:
        return Response({"bytes": len(request.stream.read()) if request.stream else 0})


class _JsonEcho(_StreamEcho):
    """Declares the same larger limit, but parses JSON: DRF reads ``request.body``, which keeps Django's limit."""

    def post(self, request: Request) -> Response:
        return Response({"bytes": len(cast(dict[str, str], request.data)["x"])})


class EchoUrls:
    """A URLconf: the site's, plus the two views above."""

    urlpatterns = [
        path("api/v1/test/stream/", _StreamEcho.as_view()),
        path("api/v1/test/json/", _JsonEcho.as_view()),
        *urlpatterns,
    ]


@override_settings(ROOT_URLCONF=EchoUrls, DATA_UPLOAD_MAX_MEMORY_SIZE=2**20)
def test_a_view_may_declare_a_larger_limit(db: None) -> None:
    client = _quiet(APIClient())
    three_mib = b"x" * (3 * 2**20)
    answer = client.post("/api/v1/test/stream/", three_mib, content_type="application/octet-stream")
    assert answer.status_code == 200 and answer.json() == {"bytes": len(three_mib)}
    too_big = client.post("/api/v1/test/stream/", three_mib * 2, content_type="application/octet-stream")
    assert _refused_as_json(too_big, 413, "too_large")["detail"] == (
        "request body too large: at most 4 MiB (4194304 bytes)"
    )
    # Everything else keeps the site's limit, here 1 MiB.
    refused = client.post("/api/v1/auth/token/", three_mib, content_type="application/json")
    assert _refused_as_json(refused, 413)["detail"] == "request body too large: at most 1 MiB (1048576 bytes)"


@override_settings(ROOT_URLCONF=EchoUrls, DATA_UPLOAD_MAX_MEMORY_SIZE=2**20)
def test_a_body_found_too_big_only_when_read_is_the_same_413(db: None) -> None:
    # Past the view's own check, Django's fires as the JSON parser reads request.body (RequestDataTooBig): that was
    # Django's HTML 400 page, now the same 413, naming the limit that applied.
    body = '{"x": "' + "a" * (2 * 2**20) + '"}'
    answer = _quiet(APIClient()).post("/api/v1/test/json/", body, content_type="application/json")
    assert _refused_as_json(answer, 413, "too_large")["detail"] == (
        "request body too large: at most 1 MiB (1048576 bytes)"
    )
