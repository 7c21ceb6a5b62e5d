"""A finished job's output can still be on its way from its nodes: the job page, its API representation and the log
endpoint say "output still arriving" until the last chunk of every exited task has landed, and that the output of
a task lost with its node may be incomplete rather than waiting for it forever. Ref: #15"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.logs import OutputState, job_output_progress
from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Node
from portal.nodes.services import TaskReport, node_heartbeat, nodes_mark_stale_down
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client

HTMX = {"HTTP_HX_REQUEST": "true"}


def _started(world: World, *, user: str = "alice", gpus: int = 1) -> tuple[Job, list[JobTask]]:
    job = job_submit(user=getattr(world, user), command="python train.py", gpus=gpus)
    scheduling_round()
    tasks = list(JobTask.objects.select_related("node").filter(job=job).order_by("rank"))
    for task in tasks:
        node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, task.rank, "running", pid=7)])
    return Job.objects.get(pk=job.pk), tasks


def _exit(task: JobTask, *, code: int, size: int) -> None:
    """The heartbeat of an agent with a log shipper: the exit and the log's size, without the bytes."""
    report = TaskReport(task.job_id, task.attempt, task.rank, "exited", exit_code=code, log_size=size)
    node_heartbeat(node=task.node, reports=[report])


def _ship(world: World, task: JobTask, offset: int, data: bytes) -> None:
    where = f"job={task.job_id}&attempt={task.attempt}&rank={task.rank}&offset={offset}"
    client = agent_client(world.tokens[task.node.name])
    response = client.post(f"/api/v1/agent/logs/?{where}", data, content_type="application/octet-stream")
    assert response.status_code == 200, response.content


def _api_job(api: APIClient, job: Job) -> dict[str, object]:
    response = api.get(f"/api/v1/jobs/{job.pk}/")
    assert response.status_code == 200
    return dict(response.json())


@pytest.fixture
def browser(world: World, client: Client) -> Client:
    assert client.login(username="alice", password="pw")
    return client


def test_output_still_arriving_until_the_last_chunk_lands(world: World, api: APIClient, browser: Client) -> None:
    job, (task,) = _started(world)
    _ship(world, task, 0, b"epoch 1\n")
    _exit(task, code=0, size=20)
    job.refresh_from_db()
    assert job.state == "succeeded"
    note = f"Output still arriving: rank 0 on {task.node.name} has sent 8 bytes of 20 bytes."

    shown = _api_job(api, job)
    assert (shown["log_complete"], shown["log_state"], shown["log_note"]) == (False, "arriving", note)
    log = api.get(f"/api/v1/jobs/{job.pk}/log/", HTTP_ACCEPT="text/plain")
    assert (log.content, log["X-Job-State"], log["X-Log-State"]) == (b"epoch 1\n", "succeeded", "arriving")
    page = browser.get(f"/jobs/{job.pk}/").content.decode()
    assert note in page and 'data-testid="log-note"' in page and "hx-get" in page.split('id="log-poller"')[1]
    tail = browser.get(f"/jobs/{job.pk}/log/?offset=8", **HTMX).content.decode()
    assert note in tail and "hx-get" in tail  # the panel keeps polling

    _ship(world, task, 8, b"epoch 2 done\n")
    shown = _api_job(api, job)
    assert (shown["log_complete"], shown["log_state"], shown["log_note"]) == (True, "complete", "")
    log = api.get(f"/api/v1/jobs/{job.pk}/log/", HTTP_ACCEPT="text/plain")
    assert (log.content, log["X-Log-State"]) == (b"epoch 1\nepoch 2 done\n", "complete")
    tail = browser.get(f"/jobs/{job.pk}/log/?offset=8", **HTMX).content.decode()
    assert "epoch 2 done" in tail and "hx-get" not in tail and "log-note" not in tail  # all shown: polling stops
    assert "Output still arriving" not in browser.get(f"/jobs/{job.pk}/").content.decode()


def test_a_running_job_is_live_and_says_nothing(world: World, api: APIClient) -> None:
    job, _ = _started(world)
    shown = _api_job(api, job)
    assert (shown["log_complete"], shown["log_state"], shown["log_note"]) == (False, "live", "")


def test_a_rank_being_stopped_after_its_gang_failed_still_prints(world: World, api: APIClient) -> None:
    job, (first, second) = _started(world, user="eve", gpus=8)  # eve's tenant has no cap: a gang of two nodes
    eve = APIClient()
    eve.force_authenticate(world.eve)
    _exit(first, code=1, size=0)
    assert Job.objects.get(pk=job.pk).state == "failed"
    shown = _api_job(eve, job)
    assert shown["log_state"] == "arriving"
    assert shown["log_note"] == f"Output still arriving: rank 1 on {second.node.name} is still stopping."
    _ship(world, second, 0, b"terminated\n")
    _exit(second, code=-15, size=11)
    assert _api_job(eve, job)["log_state"] == "complete"


def test_a_lost_nodes_output_may_be_incomplete_and_is_not_waited_for(
    world: World, api: APIClient, browser: Client
) -> None:
    job, (first, second) = _started(world, user="eve", gpus=8)
    eve = APIClient()
    eve.force_authenticate(world.eve)
    _exit(first, code=1, size=0)  # the job fails; rank 1 is told to stop, and then its node goes silent
    Node.objects.filter(pk=second.node_id).update(last_heartbeat=timezone.now() - timedelta(hours=1))
    assert nodes_mark_stale_down() == [second.node.name]
    assert JobTask.objects.get(pk=second.pk).state == "lost"
    shown = _api_job(eve, job)
    note = f"Output of rank 1 on node {second.node.name} may be incomplete (node lost)."
    assert (shown["log_complete"], shown["log_state"], shown["log_note"]) == (False, "incomplete", note)
    assert browser.logout() is None and browser.login(username="eve", password="pw")
    tail = browser.get(f"/jobs/{job.pk}/log/?offset=0", **HTMX).content.decode()
    assert note in tail and "hx-get" not in tail  # nothing more will come: the panel stops polling


def test_what_a_lost_node_still_sends_is_kept_but_not_waited_for(world: World) -> None:
    """A fenced node's agent may still ship output before it learns to register again: it is stored, yet no end is
    ever reported for a lost task, so its output stays "may be incomplete"."""
    job, (first, second) = _started(world, user="eve", gpus=8)
    _exit(first, code=1, size=0)
    Node.objects.filter(pk=second.node_id).update(last_heartbeat=timezone.now() - timedelta(hours=1))
    nodes_mark_stale_down()
    _ship(world, second, 0, b"last words\n")
    job = Job.objects.get(pk=job.pk)
    assert (job.log_size, job_output_progress(job=job).state) == (11, OutputState.INCOMPLETE)


def test_a_task_that_never_started_had_nothing_to_send(world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=1)
    scheduling_round()
    job = Job.objects.get(pk=job.pk)
    task = JobTask.objects.select_related("node").get(job=job)
    report = TaskReport(job.pk, 1, 0, "failed_to_start", log_size=0)
    node_heartbeat(node=task.node, reports=[report])
    assert Job.objects.get(pk=job.pk).state == "failed"
    assert job_output_progress(job=Job.objects.get(pk=job.pk)).complete
