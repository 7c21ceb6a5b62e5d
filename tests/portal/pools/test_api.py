"""Lending and reclaiming a serving pool's nodes through ``/api/v1/pools/``, on real rows. Ref: #19"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import LazySettings
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.elastic_services import jobs_stop_due
from portal.jobs.models import EventKind, JobEvent, JobTask
from portal.pools.models import Reclaim
from portal.pools.services import reclaims_progress
from portal.scheduler.services import scheduling_round
from tests.fixtures import World
from tests.portal.pools.helpers import POOL, exit_all, later, pool_state, start, submit

LEND = f"/api/v1/pools/{POOL}/lend/"
RECLAIM = f"/api/v1/pools/{POOL}/reclaim/"


def lend(staff: APIClient, *nodes: str) -> dict[str, Any]:
    response = staff.post(LEND, {"nodes": list(nodes)}, format="json")
    assert response.status_code == 200, response.content
    body: dict[str, Any] = response.json()
    return body


def reclaim(staff: APIClient, count: int, deadline: float) -> dict[str, Any]:
    response = staff.post(RECLAIM, {"count": count, "deadline_seconds": deadline}, format="json")
    assert response.status_code == 202, response.content
    body: dict[str, Any] = response.json()
    return body


def test_lend_is_idempotent_and_the_list_shows_each_pool(staff: APIClient, pool: World) -> None:
    assert lend(staff, "s1", "s2") == {"pool": POOL, "newly_lent": ["s1", "s2"], "lent": ["s1", "s2"]}
    assert lend(staff, "s2", "s3") == {"pool": POOL, "newly_lent": ["s3"], "lent": ["s1", "s2", "s3"]}
    listed = staff.get("/api/v1/pools/").json()
    assert listed == [
        {"name": POOL, "nodes": ["s1", "s2", "s3"], "lent": ["s1", "s2", "s3"], "returning": [], "open_reclaims": []}
    ]


def test_a_loanable_node_takes_work_only_while_lent(staff: APIClient, pool: World) -> None:
    job = submit(pool.eve, 4)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "pending"  # n1 and n2 drained; s1-s3 belong to the serving pool and are not lent
    lend(staff, "s2")
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running"
    assert set(JobTask.objects.filter(job=job).values_list("node__name", flat=True)) == {"s2"}


def test_reclaim_gives_back_the_cheapest_nodes_and_sends_the_checkpoint_signal(
    staff: APIClient, pool: World, settings: LazySettings
) -> None:
    settings.CORRAL_CHECKPOINT_SECONDS, settings.CORRAL_RESTART_SECONDS = 30.0, 60.0
    lend(staff, "s1", "s2", "s3")
    elastic = start(submit(pool.eve, 2, max_gpus=8, name="elastic"), {"s2": 2, "s3": 2})
    rigid = start(submit(pool.eve, 2, name="rigid"), {"s3": 2})
    before = timezone.now()
    body = reclaim(staff, 2, 120)
    # s1 is idle (free); s2 empties by shrinking the elastic job to its minimum; s3 would preempt the rigid job.
    assert body["nodes"] == ["s1", "s2"]
    assert body["shrunk"] == {str(elastic.pk): 2} and body["preempted"] == []
    assert body["cost_gpu_seconds"] == 4 * (60 + 30)  # g x (restart + checkpoint): the checkpoint fits
    assert list(body["returned"]) == ["s1"] and not body["late"] and not body["finished"]
    assert pool_state() == {"s1": (False, False), "s2": (True, True), "s3": (True, False)}

    elastic.refresh_from_db()
    assert elastic.state == "running" and elastic.resize_to is None  # None: it restarts at its minimum, 2
    assert elastic.stop_due_at is not None and 29 <= (elastic.stop_due_at - before).total_seconds() <= 31
    tasks = JobTask.objects.filter(job=elastic, attempt=elastic.attempt)
    assert all(t.checkpoint_requested_at is not None for t in tasks)
    assert JobEvent.objects.filter(job=elastic, kind=EventKind.STOP_SCHEDULED, reason__contains="reclaims").exists()
    rigid.refresh_from_db()
    assert rigid.state == "running" and rigid.stop_due_at is None

    # The notice runs out, the job stops and its processes exit: s2 is handed back, on time.
    assert jobs_stop_due(now=later(before, 31)) == [elastic.pk]
    assert reclaims_progress(now=later(before, 35)) == []  # its processes still hold s2
    exit_all(elastic)
    assert reclaims_progress(now=later(before, 40)) == [body["id"]]
    assert pool_state() == {"s1": (False, False), "s2": (False, False), "s3": (True, False)}
    detail = staff.get(f"/api/v1/pools/{POOL}/reclaims/{body['id']}/").json()
    assert detail["finished"] and not detail["late"] and detail["forced"] == []
    assert set(detail["returned"]) == {"s1", "s2"}
    resized = JobEvent.objects.get(job=elastic, kind=EventKind.RESIZED)
    assert "restarts on 2 GPUs" in resized.reason, resized.reason


def test_reclaim_preempts_when_shrinking_cannot_empty_enough(staff: APIClient, pool: World) -> None:
    lend(staff, "s1", "s2", "s3")
    elastic = start(submit(pool.eve, 2, max_gpus=8, name="elastic"), {"s2": 2, "s3": 2})
    rigid = start(submit(pool.eve, 2, name="rigid"), {"s3": 2})
    body = reclaim(staff, 3, 120)
    assert sorted(body["nodes"]) == ["s1", "s2", "s3"]
    assert body["shrunk"] == {} and sorted(body["preempted"]) == sorted([elastic.pk, rigid.pk])
    for job in (elastic, rigid):
        job.refresh_from_db()
        assert job.stop_due_at is not None and job.resize_to is None


def test_a_reclaim_past_its_deadline_returns_the_nodes_and_says_what_it_cost(
    staff: APIClient, pool: World, settings: LazySettings
) -> None:
    settings.CORRAL_CHECKPOINT_SECONDS = 30.0  # longer than the deadline: the job is stopped without one
    lend(staff, "s3")
    job = start(submit(pool.eve, 4, name="rigid"), {"s3": 4})
    now = timezone.now()
    body = reclaim(staff, 1, 10)
    assert body["nodes"] == ["s3"] and body["preempted"] == [job.pk]
    assert body["cost_gpu_seconds"] >= 4 * 60  # restart, plus the progress since it started
    assert reclaims_progress(now=later(now, 5)) == []  # before the deadline a busy node waits
    assert pool_state()["s3"] == (True, True)
    assert reclaims_progress(now=later(now, 11)) == [body["id"]]  # the agent never confirmed the exit
    assert pool_state()["s3"] == (False, False)
    job.refresh_from_db()
    assert job.state == "pending"
    assert all(t.kill_requested for t in JobTask.objects.filter(job=job))
    assert JobEvent.objects.filter(job=job, kind=EventKind.PREEMPTED, reason__contains="deadline").exists()
    detail = staff.get(f"/api/v1/pools/{POOL}/reclaims/{body['id']}/").json()
    assert detail["late"] and detail["forced"] == ["s3"] and detail["finished"]
    assert Reclaim.objects.get(pk=body["id"]).cost_gpu_seconds == body["cost_gpu_seconds"]


def test_a_node_being_given_back_is_not_reclaimed_twice(staff: APIClient, pool: World) -> None:
    lend(staff, "s1", "s2")
    start(submit(pool.eve, 4), {"s1": 4})
    start(submit(pool.eve, 4), {"s2": 4})
    reclaim(staff, 1, 60)
    response = staff.post(RECLAIM, {"count": 2, "deadline_seconds": 60}, format="json")
    assert response.status_code == 400
    assert "1 node(s) lent and not already being given back" in response.json()["count"][0]


@pytest.mark.parametrize(
    ("path", "body", "status", "field", "words"),
    [
        ("/api/v1/pools/nope/lend/", {"nodes": ["s1"]}, 404, "detail", "no node belongs to a pool named 'nope'"),
        ("/api/v1/pools/nope/reclaim/", {"count": 1, "deadline_seconds": 5}, 404, "detail", "'nope'"),
        (LEND, {"nodes": ["n1"]}, 400, "nodes", "n1 is in pool 'training', not 'inference'"),
        (LEND, {"nodes": ["s1", "zz"]}, 400, "nodes", "no node named 'zz'"),
        (LEND, {"nodes": []}, 400, "nodes", "at least 1"),
        (LEND, {"nodes": "s1"}, 400, "nodes", "list"),
        ("/api/v1/pools/training/lend/", {"nodes": ["n1"]}, 400, "detail", "Corral's own"),
        (RECLAIM, {"count": 2, "deadline_seconds": 5}, 400, "count", "cannot reclaim 2"),
        (RECLAIM, {"count": 0, "deadline_seconds": 5}, 400, "count", "greater than or equal to 1"),
        (RECLAIM, {"count": 1, "deadline_seconds": -1}, 400, "deadline_seconds", "greater than or equal to 0"),
        (RECLAIM, {"count": 1, "deadline_seconds": 1e300}, 400, "deadline_seconds", "less than or equal to"),
        (RECLAIM, {"count": "x", "deadline_seconds": 5}, 400, "count", "valid integer"),
        (RECLAIM, {"count": 1}, 400, "deadline_seconds", "required"),
    ],
)
def test_bad_input_is_a_clear_4xx(
    staff: APIClient, pool: World, path: str, body: dict[str, Any], status: int, field: str, words: str
) -> None:
    lend(staff, "s1")
    response = staff.post(path, body, format="json")
    assert response.status_code == status, response.content
    message = response.json()[field]
    assert words in (message if isinstance(message, str) else message[0]), message
    assert pool_state()["s2"] == (False, False) and not Reclaim.objects.exists()


def test_reclaims_of_another_pool_or_none_are_404(staff: APIClient, pool: World) -> None:
    lend(staff, "s1")
    rid = reclaim(staff, 1, 0)["id"]
    assert staff.get(f"/api/v1/pools/{POOL}/reclaims/{rid}/").status_code == 200
    for path in (f"/api/v1/pools/other/reclaims/{rid}/", f"/api/v1/pools/{POOL}/reclaims/{10**30}/"):
        assert staff.get(path).status_code == 404, path


def test_only_staff_may_use_the_pools_api(api: APIClient, pool: World) -> None:
    for method, path, body in (
        ("get", "/api/v1/pools/", None),
        ("post", LEND, {"nodes": ["s1"]}),
        ("post", RECLAIM, {"count": 1, "deadline_seconds": 5}),
        ("get", f"/api/v1/pools/{POOL}/reclaims/1/", None),
    ):
        response = getattr(api, method)(path, body, format="json")
        assert response.status_code == 403, (path, response.content)
    assert pool_state()["s1"] == (False, False)
