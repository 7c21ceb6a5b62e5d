"""The whole REST API, fuzzed from its own OpenAPI schema: bad input never gets a 500.

schemathesis reads ``/api/v1/schema/`` from the Django app itself (WSGI, no socket) and, for every operation the
schema lists, sends the schema's boundary cases (its coverage phase) and ``MAX_EXAMPLES`` generated requests, valid
and invalid alike (wrong types, out-of-range numbers, missing fields, odd strings, unexpected methods). Each request
goes out with the credentials a real client of that operation has: a researcher (member of tenant ``lab``) and a
staff admin for the user endpoints, the node token of ``n1`` for ``/api/v1/agent/...``. Then it goes out once more
as generated, with no credentials or made-up ones, and must be refused (401/403). Checked on every answer: no server
error, its status is one the operation documents (``status_code_conformance``: the error answers too, see
``portal/api/schema.py``), and it has the documented content type and body schema for that status.

Not checked, on purpose: ``negative_data_rejection`` (DRF accepts some schema-invalid input by design: ``"model": 0``
is read as ``"0"``, ``?page=last`` is a page, an empty form field is null), ``positive_data_acceptance`` (domain
refusals such as a quota or a wrong password are 400s for schema-valid input), ``ignored_auth`` (the anonymous call
below checks that more directly).

The data is seeded so that the fuzzer reaches deep paths: jobs in every state (one of another tenant), a log,
telemetry, a drained GPU with its alert. Small generated job ids are mapped onto the seeded jobs (a heartbeat's task
reports too), one-character node names onto the seeded nodes. Each request runs in a savepoint that is rolled back,
so every example starts from the same seeded world and hypothesis can replay it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import schemathesis
from django.contrib.auth.models import AbstractBaseUser
from django.core.signals import got_request_exception, request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections, transaction
from django.urls import Resolver404, resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework.authtoken.models import Token
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from portal.jobs.logs import job_log_append
from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from telemetry.sample import GpuSample, XidEvent
from tests.factories import UserFactory
from tests.fixtures import World, agent_client

pytestmark = pytest.mark.django_db

SCHEMA = schemathesis.openapi.from_wsgi(
    "/api/v1/schema/",
    get_wsgi_application(),
    headers={"Accept": "application/vnd.oai.openapi+json"},
    config=schemathesis.Config(),  # explicit: no schemathesis.toml is looked for
)
CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance, content_type_conformance]
#: Generated requests per operation, on top of the schema's boundary cases; the module runs in about 30 s.
MAX_EXAMPLES = 40
FUZZ_SETTINGS = settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,  # the same requests on every run
    database=None,
    deadline=None,
    # One seeded world per operation, shared by its examples (each rolled back); generation is slow on 2 cores.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: A generated job id below this names a seeded job (the id modulo their number). Larger, negative and non-numeric
#: ids are sent as generated, for the "no such job" and "not a number" paths.
AIMED_IDS = 1000


@dataclass(frozen=True)
class Seeded:
    """What the fuzzer aims at: credentials by role, and the ids that exist."""

    headers: dict[str, dict[str, str]]
    job_ids: list[int]
    node_names: list[str]


def _token(user: AbstractBaseUser) -> dict[str, str]:
    return {"Authorization": f"Token {Token.objects.get_or_create(user=user)[0].key}"}


def _exit(job: Job, code: int) -> None:
    task = JobTask.objects.select_related("node").get(job=job, attempt=job.attempt, rank=0)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "running", pid=7, log="hi\n")])
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=code)])


@pytest.fixture
def seeded(world: World) -> Iterator[Seeded]:
    """Jobs in every state, a log, telemetry and an alert; and the requests share the test's database connection."""
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    running = job_submit(user=world.alice, name="run", command="train", gpus=2, time_limit=3600)
    succeeded = job_submit(user=world.alice, name="ok", command="true", gpus=1)
    failed = job_submit(user=world.alice, name="bad", command="false", gpus=1)
    theirs = job_submit(user=world.eve, name="theirs", command="x", gpus=1, env={"A": "1"})
    scheduling_round()
    for job, code in ((succeeded, 0), (failed, 1)):
        _exit(Job.objects.get(pk=job.pk), code)
    job_log_append(job=running, data="epoch 1\n" * 20)
    cancelled = job_cancel(job=job_submit(user=world.alice, command="x", gpus=1), by=world.alice)
    waiting = job_submit(user=world.bob, command="big", gpus=5)  # more than the tenant's cap leaves: pending
    scheduling_round()
    now = time.time()
    samples = [GpuSample(gpu_uuid=f"GPU-n1-{i}", index=i, timestamp=now, gpu_util=50.0).to_dict() for i in range(4)]
    events = [XidEvent(gpu_uuid="GPU-n2-3", xid=79, timestamp=now).to_dict()]  # drains the GPU, raises an alert
    for name, body in (("n1", {"samples": samples}), ("n2", {"samples": [], "xid_events": events})):
        assert agent_client(world.tokens[name]).post("/api/v1/agent/samples/", body, format="json").status_code == 200
    assert {j.state for j in Job.objects.all()} == {"running", "succeeded", "failed", "cancelled", "pending"}

    # What Django's test client does: a request must not close the connection that holds the test's transaction.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield Seeded(
            headers={
                "researcher": _token(world.alice),
                "admin": _token(admin),
                "node": {"Authorization": f"Node {world.tokens['n1']}"},
            },
            job_ids=[j.pk for j in (running, succeeded, failed, cancelled, waiting, theirs)],
            node_names=[n.name for n in world.nodes],
        )
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def _small(value: object) -> int | None:
    """``value`` as a number below ``AIMED_IDS`` (an int, or digits in a path), else None."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < AIMED_IDS:
        return value
    return None


def _aim(case: schemathesis.Case, seeded: Seeded) -> None:
    """Point small generated ids at seeded objects, so that deep paths run; other values stay as generated."""
    params = case.path_parameters or {}
    if "id" in params and (number := _small(params["id"])) is not None:
        params["id"] = seeded.job_ids[number % len(seeded.job_ids)]
    if isinstance(params.get("name"), str) and len(params["name"]) <= 1:
        params["name"] = seeded.node_names[ord(params["name"] or "a") % len(seeded.node_names)]
    tasks = case.body.get("tasks") if isinstance(case.body, dict) else None
    for task in tasks if isinstance(tasks, list) else []:
        if isinstance(task, dict) and (number := _small(task.get("job"))) is not None:
            # A report about a seeded job's first attempt, rank 0, when those numbers are small too.
            task["job"] = seeded.job_ids[number % len(seeded.job_ids)]
            task.update({key: value for key, value in (("attempt", 1), ("rank", 0)) if _small(task.get(key))})


def _roles(case: schemathesis.Case) -> list[str]:
    if case.path.startswith("/api/v1/agent/"):
        return ["node"]
    if case.path == "/api/v1/auth/token/":
        return []  # exchanges a password for a token: it takes no credentials
    return ["researcher", "admin"]


def _refusals(case: schemathesis.Case) -> tuple[int, ...]:
    """What a request without valid credentials may get: 401 or 403 once it reaches a view. 404 where Django finds no
    URL, or where DRF does not know the output format asked for (``?format=``, ``.suffix``): its content negotiation
    answers that before it authenticates. A NUL character in the URL is refused before anything else looks at it
    (``portal/web/middleware.py``): 404 in the path, 400 in the query string. Ref: #15"""
    url_path = unquote(urlsplit(case.formatted_path).path)
    # A parameter whose value is an empty list is not in the URL at all, so its name cannot be refused.
    query = {key: value for key, value in (case.query or {}).items() if value != []}
    values = [v for value in query.values() for v in (value if isinstance(value, list) else [value])]
    if "\x00" in url_path:
        return (404,)
    if any("\x00" in str(text) for text in [*query, *values]):
        return (400,)
    try:
        match = resolve(url_path)
    except Resolver404:
        return (404,)
    if "format" in match.kwargs or "format" in (case.query or {}):
        return (401, 403, 404)
    return (401, 403)


def _call(case: schemathesis.Case, headers: dict[str, str] | None) -> schemathesis.Response:
    raised: list[BaseException] = []

    def keep(sender: object, **kwargs: object) -> None:
        if (exc := sys.exception()) is not None:
            raised.append(exc)

    got_request_exception.connect(keep)
    try:
        with transaction.atomic():  # a savepoint: every example starts from the seeded world
            response = case.call(headers=headers)
            transaction.set_rollback(True)
    finally:
        got_request_exception.disconnect(keep)
    if raised:
        raise raised[0]  # the server's own traceback says more than "500"
    case.validate_response(response, checks=CHECKS)
    return response


@SCHEMA.parametrize()
@FUZZ_SETTINGS
def test_no_request_gets_a_server_error(case: schemathesis.Case, seeded: Seeded) -> None:
    _aim(case, seeded)
    for role in _roles(case):
        _call(case, seeded.headers[role])
    response = _call(case, None)  # as generated: no Authorization header, or a made-up one, or a made-up session
    if _roles(case):
        assert response.status_code in _refusals(case), (case.operation.label, response.status_code)


# --- POST /api/v1/agent/samples/ ---------------------------------------------------------------------------------
# Its body is parsed by the wire format's own ``from_dict``. schemathesis sends it the bodies the schema describes,
# but a generated sample seldom names a GPU the node registered, at a time in range, so few reach the ingestion
# below the parsing. Here two passes that start from a valid batch instead: each field in turn left out or set to
# each boundary value, then hypothesis replacing any fields with any JSON values.
BOUNDARY_VALUES = [-1, 2**31, 2**63, -(2**63) - 1, 10**30, 1e308, "", "GPU-n1-0\x00", True, None, [], {}]
MISSING = object()
JSON_VALUES: st.SearchStrategy[object] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)


def _batch(now: float) -> dict[str, Any]:
    sample = GpuSample(gpu_uuid="GPU-n1-0", index=0, timestamp=now, gpu_util=40.0, xid=13, processes=((7, 100),))
    event = XidEvent(gpu_uuid="GPU-n1-1", xid=79, timestamp=now)
    return {"samples": [sample.to_dict()], "xid_events": [event.to_dict()], "dropped": 0}


def _parts(batch: dict[str, Any]) -> list[dict[str, Any]]:
    """The objects whose fields are varied: the batch itself, its sample, its XID event."""
    return [batch, batch["samples"][0], batch["xid_events"][0]]


def _set(item: dict[str, Any], key: str, value: object) -> None:
    if value is MISSING:
        item.pop(key, None)
    else:
        item[key] = value


def _post_batch(world: World, body: object) -> None:
    with transaction.atomic():  # a savepoint: every batch meets the same world
        response = agent_client(world.tokens["n1"]).post("/api/v1/agent/samples/", body, format="json")
        transaction.set_rollback(True)
    assert response.status_code in (200, 400), (body, response.status_code, response.content)


def test_no_telemetry_batch_with_a_boundary_value_gets_a_server_error(world: World) -> None:
    now = time.time()
    for part in range(3):
        for key in [*_parts(_batch(now))[part], "unknown"]:
            for value in [MISSING, *BOUNDARY_VALUES]:
                batch = _batch(now)
                _set(_parts(batch)[part], key, value)
                _post_batch(world, batch)


@st.composite
def _batches(draw: st.DrawFn, now: float) -> object:
    if draw(st.integers(0, 19)) == 0:
        return draw(JSON_VALUES)  # not a batch at all
    batch = _batch(now)
    for item in _parts(batch):
        for key in draw(st.lists(st.sampled_from([*item, "unknown"]), max_size=2)):
            _set(item, key, draw(st.one_of(st.just(MISSING), JSON_VALUES)))
    return batch


@FUZZ_SETTINGS
@given(data=st.data())
def test_no_telemetry_batch_gets_a_server_error(data: st.DataObject, world: World) -> None:
    _post_batch(world, data.draw(_batches(time.time()), label="batch"))
