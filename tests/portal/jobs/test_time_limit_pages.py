"""Time limits and soft cordons in the browser: the submit form reads "2h", the job page shows what is left, and
node pages say what a cordoned GPU still takes. Ref: #4"""

from __future__ import annotations

import re
from datetime import timedelta

from django.test import Client
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu, GpuHealth
from portal.scheduler.services import scheduling_round
from tests.fixtures import World

HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(client: Client, username: str = "alice") -> Client:
    assert client.login(username=username, password="pw")
    return client


def test_the_form_takes_a_readable_time_limit(world: World, client: Client) -> None:
    _login(client)
    form = client.get("/jobs/new/").content.decode()
    assert 'name="time_limit"' in form and "takes only jobs with a time limit ≤ 2h" in form
    for typed, seconds in (("2h", 7200), ("90m", 5400), ("1d 12h", 129_600), ("600", 600), ("", None)):
        response = client.post("/jobs/new/", {"command": "echo hi", "gpus": "1", "time_limit": typed})
        assert response.status_code == 302, response.content
        assert Job.objects.latest("pk").time_limit == seconds, typed


def test_the_form_explains_a_bad_time_limit(world: World, client: Client) -> None:
    _login(client)
    garbled = client.post("/jobs/new/", {"command": "x", "gpus": "1", "time_limit": "two hours"})
    assert garbled.status_code == 200
    assert b"Enter a duration like 2h, 90m or 1d 12h, or a number of seconds" in garbled.content
    too_long = client.post("/jobs/new/", {"command": "x", "gpus": "1", "time_limit": "31d"})
    assert too_long.status_code == 200 and b"the time limit may be at most 30d" in too_long.content
    zero = client.post("/jobs/new/", {"command": "x", "gpus": "1", "time_limit": "0"})
    assert b"the time limit must be a whole number of seconds, at least 1" in zero.content
    assert not Job.objects.exists()


def test_the_job_page_shows_the_limit_and_what_is_left(world: World, client: Client) -> None:
    _login(client)
    job = job_submit(user=world.alice, command="sleep 600", gpus=1, time_limit=7200)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert re.search(r'data-testid="job-time-limit">2h</dd>', page)
    scheduling_round()
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=30, seconds=5))
    partial = client.get(f"/jobs/{job.pk}/", **HTMX).content.decode()
    assert re.search(r"2h <small>\(1h 29m 5\ds left\)</small>", partial), partial
    unlimited = job_submit(user=world.alice, command="x", gpus=1)
    assert 'data-testid="job-time-limit">none</dd>' in client.get(f"/jobs/{unlimited.pk}/").content.decode()


def test_node_pages_say_what_a_cordoned_gpu_takes(world: World, client: Client, settings) -> None:  # noqa: ANN001
    _login(client)
    Gpu.objects.filter(node__name="n1", index=2).update(health=GpuHealth.CORDONED, health_detail="risk 0.91")
    detail = client.get("/nodes/n1/").content.decode()
    assert "Takes only jobs with a time limit ≤ 2h." in detail
    assert "cordoned: takes only jobs with a time limit ≤ 2h" in client.get("/nodes/").content.decode()
    settings.CORRAL_CORDON_MAX_TIME_LIMIT = 0
    assert "Takes no new jobs." in client.get("/nodes/n1/", **HTMX).content.decode()
    assert "cordoned: takes no new jobs" in client.get("/nodes/", **HTMX).content.decode()
    assert "time limit" not in client.get("/nodes/n2/").content.decode()  # no cordoned GPU there
