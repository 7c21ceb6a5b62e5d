"""Elastic jobs in the live round: a job grows into idle GPUs at its start, gives GPUs back through a checkpoint and
a restart when another job needs them, and runs again at its new size with the size in its environment. Ref: #19"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.elastic_services import jobs_stop_due
from portal.jobs.models import Allocation, EventKind, Job, JobEvent, JobTask
from portal.jobs.services import job_submit
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.policy_cache import forget_policies
from portal.scheduler.services import scheduling_round
from tests.fixtures import World


@pytest.fixture(autouse=True)
def _no_learned_history() -> Iterator[None]:
    """Run times learned from other tests' jobs would change the work left each job is expected to have."""
    forget_policies()
    yield
    forget_policies()


def _held(job: Job) -> int:
    return Allocation.objects.filter(job=job, released_at__isnull=True).count()


def _exit_all(job: Job) -> None:
    """Every rank of the job's attempt reports its processes gone (as after the checkpoint and the stop)."""
    for task in JobTask.objects.filter(job=job, attempt=job.attempt):
        node_heartbeat(node=task.node, reports=[TaskReport(job.pk, task.attempt, task.rank, "exited", exit_code=0)])


def _kinds(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))


def test_an_elastic_job_starts_at_its_largest_size_on_an_idle_cluster(world: World) -> None:
    job = job_submit(user=world.eve, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and _held(job) == 8
    assert Job.objects.get(pk=job.pk).resize_to is None


def test_an_elastic_job_grows_only_into_what_is_idle_by_doublings(world: World) -> None:
    other = job_submit(user=world.eve, command="other", gpus=3)
    job = job_submit(user=world.eve, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    # 5 GPUs are idle; its sizes are 2, 4 and 8 (its minimum doubled, and its maximum).
    assert _held(Job.objects.get(pk=other.pk)) == 3 and _held(Job.objects.get(pk=job.pk)) == 4


def test_a_waiting_job_makes_the_elastic_job_shrink_through_a_checkpoint(world: World) -> None:
    elastic = job_submit(user=world.eve, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    waiting = job_submit(user=world.eve, command="needs four", gpus=4)
    scheduling_round()
    elastic.refresh_from_db()
    # Still running on 8 GPUs: it was sent the checkpoint signal and is stopped at stop_due_at, to restart on 4.
    assert elastic.state == "running" and _held(elastic) == 8
    assert elastic.resize_to == 4 and elastic.stop_due_at is not None
    assert EventKind.STOP_SCHEDULED in _kinds(elastic)
    task = JobTask.objects.filter(job=elastic, attempt=elastic.attempt).first()
    assert task is not None
    reply = node_heartbeat(
        node=task.node, reports=[TaskReport(elastic.pk, task.attempt, task.rank, "running", pid=4242)]
    )
    assert [s["signal"] for s in reply.signal if s["job"] == elastic.pk] == ["SIGUSR1"]
    assert Job.objects.get(pk=waiting.pk).state == "pending"

    assert jobs_stop_due(now=timezone.now() + timedelta(seconds=31)) == [elastic.pk]
    elastic.refresh_from_db()
    assert elastic.state == "pending" and elastic.resize_to == 4
    assert _kinds(elastic)[-1] == EventKind.RESIZED
    assert "restarts on 4 GPUs" in JobEvent.objects.filter(job=elastic).last().reason  # type: ignore[union-attr]
    _exit_all(elastic)
    scheduling_round()
    elastic.refresh_from_db()
    assert elastic.state == "running" and _held(elastic) == 4 and elastic.resize_to is None
    assert Job.objects.get(pk=waiting.pk).state == "running" and _held(Job.objects.get(pk=waiting.pk)) == 4


def test_the_restarted_attempt_is_told_its_new_size(world: World) -> None:
    elastic = job_submit(user=world.eve, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    elastic.refresh_from_db()
    tasks = list(JobTask.objects.filter(job=elastic, attempt=elastic.attempt).order_by("rank"))
    reply = node_heartbeat(node=tasks[0].node, reports=[])
    env = next(order["env"] for order in reply.start if order["job"] == elastic.pk)
    assert env["CORRAL_GPUS"] == "8" and env["CORRAL_NODE_GPUS"] == "4" and env["WORLD_SIZE"] == "2"


def test_a_tenant_cap_bounds_the_growth(world: World) -> None:
    # alice's tenant "lab" may hold 6 GPUs at once: of its sizes 3, 6 and 9 the cap allows 6.
    job = job_submit(user=world.alice, command="train", gpus=3, max_gpus=9)
    scheduling_round()
    assert _held(Job.objects.get(pk=job.pk)) == 6


def test_the_api_takes_max_gpus_and_scaling_and_shows_the_size(world: World, api: APIClient) -> None:
    response = api.post(
        "/api/v1/jobs/",
        {"command": "train", "gpus": 2, "max_gpus": 4, "scaling": {"1": 1, "2": 1.9, "4": 3.5}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["gpus"], body["max_gpus"], body["size"]) == (2, 4, 2)
    assert body["scaling"] == {"1": 1.0, "2": 1.9, "4": 3.5}
    scheduling_round()
    assert api.get(f"/api/v1/jobs/{body['id']}/").json()["size"] == 4


def test_bad_elastic_input_is_refused_on_its_field(world: World, api: APIClient) -> None:
    cases = [
        ({"gpus": 4, "max_gpus": 2}, "max_gpus", "must be at least gpus (4)"),
        ({"gpus": 0.5, "max_gpus": 2}, "max_gpus", "share"),
        ({"gpus": 1, "max_gpus": 0}, "max_gpus", ""),
        ({"gpus": 1, "max_gpus": 2, "array": "0-3"}, "max_gpus", "Array"),
        ({"gpus": 1, "scaling": {"2": 1.8}}, "scaling", "max_gpus"),
        ({"gpus": 1, "max_gpus": 2, "scaling": {"two": 1.8}}, "scaling", "'two'"),
        ({"gpus": 1, "max_gpus": 2, "scaling": {"2": -1}}, "scaling", "speedups > 0"),
        ({"gpus": 1, "max_gpus": 2, "scaling": [1, 2]}, "scaling", ""),
    ]
    for extra, field, words in cases:
        response = api.post("/api/v1/jobs/", {"command": "x", **extra}, format="json")
        assert response.status_code == 400, (extra, response.json())
        body = response.json()
        messages = body.get(field) or body.get("errors", {}).get(field) or body
        assert field in str(body) and words in str(messages), (extra, body)
    assert not Job.objects.exists()


def test_the_job_page_shows_the_size_the_notice_and_each_attempts_size(world: World) -> None:
    elastic = job_submit(user=world.eve, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    job_submit(user=world.eve, command="needs four", gpus=4)
    scheduling_round()
    client = Client()
    client.force_login(world.eve)
    page = client.get(f"/jobs/{elastic.pk}/").content.decode()
    assert "8 now" in page and "always 2, up to 8" in page
    assert 'data-testid="job-stop-notice"' in page and "then restarts on 4 GPUs" in page
    jobs_stop_due(now=timezone.now() + timedelta(seconds=31))
    elastic.refresh_from_db()
    _exit_all(elastic)
    scheduling_round()
    page = client.get(f"/jobs/{elastic.pk}/").content.decode()
    assert "on 8 GPUs, ran" in page and "then resized" in page and "on 4 GPUs, running" in page


def test_the_form_takes_an_elastic_range_and_explains_bad_input(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    for extra, words in [
        ({"gpus": "4", "max_gpus": "2"}, "must be at least gpus (4)"),
        ({"gpus": "0.5", "max_gpus": "2"}, "a share of one GPU cannot be elastic"),
        ({"gpus": "1", "max_gpus": "0"}, "Ensure this value is greater than or equal to 1."),
        ({"gpus": "1", "max_gpus": "2", "array": "0-3"}, "array tasks cannot be elastic yet"),
    ]:
        page = client.post("/jobs/new/", {"command": "x", **extra})
        assert page.status_code == 200 and words in page.content.decode(), extra
    assert not Job.objects.exists()
    response = client.post("/jobs/new/", {"command": "python train.py", "gpus": "2", "max_gpus": "6"})
    assert response.status_code == 302
    job = Job.objects.get()
    assert (job.gpus, job.max_gpus) == (2, 6)


def test_extras_give_way_to_a_job_of_the_same_tenant_waiting_on_its_cap(world: World) -> None:
    # alice's tenant "lab" may hold 6 GPUs: her elastic job grows to 4, then her 4-GPU job waits on the cap.
    elastic = job_submit(user=world.alice, command="train", gpus=2, max_gpus=8)
    scheduling_round()
    assert _held(Job.objects.get(pk=elastic.pk)) == 4
    waiting = job_submit(user=world.alice, command="needs four", gpus=4)
    scheduling_round()
    elastic.refresh_from_db()
    assert elastic.resize_to is None and elastic.stop_due_at is not None  # back to its minimum, 2
    assert Job.objects.get(pk=waiting.pk).reason_code == "tenant_cap_reached"
    jobs_stop_due(now=timezone.now() + timedelta(seconds=31))
    elastic.refresh_from_db()
    _exit_all(elastic)
    scheduling_round()
    assert _held(Job.objects.get(pk=elastic.pk)) == 2 and _held(Job.objects.get(pk=waiting.pk)) == 4
