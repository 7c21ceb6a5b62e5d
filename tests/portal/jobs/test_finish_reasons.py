"""Why a job ended, where people look: the job list's "Where / why" cell and the job page's status say "time limit
of 20s exceeded", "cancelled by alice", "rank 0: killed by SIGKILL", never an empty cell or "exit -15". One rule,
``portal.jobs.outcome``, reads it from the job's history. Ref: #18"""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from portal.jobs.models import Job, JobTask
from portal.jobs.outcome import exit_words
from portal.jobs.services import job_cancel, job_submit, jobs_enforce_time_limits
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from tests.fixtures import World

HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(client: Client, username: str = "alice") -> Client:
    assert client.login(username=username, password="pw")
    return client


def _running(world: World, command: str = "train", time_limit: int | None = None) -> Job:
    job = job_submit(user=world.alice, command=command, gpus=1, time_limit=time_limit)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running"
    return job


def _exit(job: Job, exit_code: int) -> None:
    task = JobTask.objects.get(job=job, attempt=job.attempt)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=exit_code)])


def _why_cell(html: str, job_id: int) -> str:
    """The text of the "Where / why" cell of job ``job_id``'s row in the job list."""
    row = re.search(rf'<tr>\s*<td><a href="/jobs/{job_id}/">.*?</tr>', html, re.S)
    assert row is not None, html
    cell = re.search(r'<td class="why">(.*?)</td>', row.group(0), re.S)
    assert cell is not None
    return re.sub(r"<[^>]+>", "", cell.group(1)).strip()


def test_exit_words() -> None:
    assert exit_words(3) == "exit code 3"
    assert exit_words(-9) == "killed by SIGKILL"
    assert exit_words(-15) == "killed by SIGTERM"
    assert exit_words(-200) == "killed by signal 200"
    assert exit_words(None) == "the process could not start"


def test_a_job_past_its_time_limit_says_so_in_the_list_and_on_its_page(world: World, client: Client) -> None:
    job = _running(world, "sleep 600", time_limit=20)
    jobs_enforce_time_limits(now=timezone.now() + timedelta(seconds=25))
    _exit(job, -15)  # its process, stopped by the portal, reports its end afterwards
    _login(client)
    assert _why_cell(client.get("/jobs/", **HTMX).content.decode(), job.pk) == "time limit of 20s exceeded"
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'data-testid="job-finish-reason"><strong>Why it ended:</strong> time limit of 20s exceeded', page)


def test_a_cancelled_job_reads_cancelled_by_whom_not_its_exit_code(world: World, client: Client) -> None:
    running = _running(world)
    job_cancel(job=running, by=world.alice)
    _exit(running, -15)  # SIGTERM from the cancel
    pending = job_submit(user=world.bob, command="queued", gpus=1)
    job_cancel(job=pending, by=world.admin)
    _login(client)
    listing = client.get("/jobs/", **HTMX).content.decode()
    assert _why_cell(listing, running.pk) == "cancelled by alice"
    assert _why_cell(listing, pending.pk) == "cancelled by labadmin"
    assert "exit -15" not in listing
    page = client.get(f"/jobs/{running.pk}/").content.decode()
    assert "Why it ended:</strong> cancelled by alice" in page
    assert 'data-testid="job-exit-code"' not in page  # a cancel's SIGTERM is not the job's result


def test_a_rank_killed_by_a_signal_and_a_failing_exit_are_named(world: World, client: Client) -> None:
    killed = _running(world, "a")
    _exit(killed, -9)
    failed = _running(world, "b")
    _exit(failed, 3)
    _login(client)
    listing = client.get("/jobs/", **HTMX).content.decode()
    assert _why_cell(listing, killed.pk) == "rank 0: killed by SIGKILL"
    assert _why_cell(listing, failed.pk) == "rank 0: exit code 3"
    page = client.get(f"/jobs/{killed.pk}/", **HTMX).content.decode()
    assert "Why it ended:</strong> rank 0: killed by SIGKILL" in page
    assert re.search(r'data-testid="job-exit-code">-9 <small>\(killed by SIGKILL\)</small>', page)


def test_a_job_lost_with_its_node_past_its_retries_says_so(world: World, client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_MAX_HARDWARE_RETRIES = 0
    job = _running(world)
    task = JobTask.objects.get(job=job)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "running", pid=7)])
    node_heartbeat(node=task.node, reports=[])  # the agent no longer runs it: lost
    job.refresh_from_db()
    assert job.state == "failed"
    _login(client)
    cell = _why_cell(client.get("/jobs/", **HTMX).content.decode(), job.pk)
    assert cell.startswith(f"{task.node.name} no longer runs the process") and "gave up after 0 hardware" in cell


def test_the_list_reads_finish_reasons_in_one_query_for_the_page(
    world: World,
    client: Client,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    for _ in range(12):
        job_cancel(job=job_submit(user=world.alice, command="x", gpus=1), by=world.alice)
    _login(client)
    with django_assert_max_num_queries(11):
        listing = client.get("/jobs/", **HTMX).content.decode()
    assert listing.count("cancelled by alice") == 12


def test_the_api_says_why_a_job_ended(world: World, api) -> None:  # noqa: ANN001
    running = _running(world)
    job_cancel(job=running, by=world.alice)
    _exit(running, -15)
    timed_out = _running(world, "sleep 600", time_limit=20)
    jobs_enforce_time_limits(now=timezone.now() + timedelta(seconds=25))
    pending = job_submit(user=world.alice, command="waits", gpus=1)
    assert api.get(f"/api/v1/jobs/{running.pk}/").json()["finish_reason"] == "cancelled by alice"
    listed = {job["id"]: job["finish_reason"] for job in api.get("/api/v1/jobs/").json()["results"]}
    assert listed[timed_out.pk] == "time limit of 20s exceeded" and listed[pending.pk] == ""
