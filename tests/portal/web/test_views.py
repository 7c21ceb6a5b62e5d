"""htmx pages: the full page and the partial each poller asks for, and readable errors in forms. Ref: #2"""

from __future__ import annotations

from django.test import Client

from portal.jobs.logs import job_log_append
from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.scheduler.services import scheduling_round
from tests.fixtures import World

HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(client: Client, username: str) -> Client:
    assert client.login(username=username, password="pw")
    return client


def test_pages_need_login(world: World, client: Client) -> None:
    response = client.get("/jobs/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_job_list_full_page_and_partial(world: World, client: Client, django_assert_max_num_queries) -> None:  # noqa: ANN001
    _login(client, "alice")
    for i in range(20):
        job_submit(user=world.alice, command=f"c{i}", gpus=1)
    job_submit(user=world.eve, command="secret-of-eve", gpus=1)
    scheduling_round()
    page = client.get("/jobs/")
    assert page.status_code == 200 and b"<html" in page.content and b'id="job-table"' in page.content
    with django_assert_max_num_queries(10):
        partial = client.get("/jobs/?state=pending", **HTMX)
    assert partial.status_code == 200 and b"<html" not in partial.content
    assert b"job-table" in partial.content and b"secret-of-eve" not in page.content + partial.content
    assert b"Waiting" in partial.content  # pending rows say why


def test_submit_form_creates_a_job_and_redirects(world: World, client: Client) -> None:
    _login(client, "alice")
    assert client.get("/jobs/new/").status_code == 200
    response = client.post("/jobs/new/", {"name": "t", "command": "echo hi", "gpus": "1"})
    job = Job.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/jobs/{job.pk}/"
    assert (job.user, job.tenant.slug) == (world.alice, "lab")


def test_submit_form_shows_readable_errors(world: World, client: Client) -> None:
    _login(client, "alice")
    too_big = client.post("/jobs/new/", {"command": "x", "gpus": "7"})
    assert too_big.status_code == 200 and b"may use at most 6 GPUs" in too_big.content
    empty = client.post("/jobs/new/", {"command": "   ", "gpus": "abc"})
    assert (
        b"Enter the command to run." in empty.content
        and b"Give a whole number of GPUs, or a fraction of one GPU like 0.25." in empty.content
    )
    assert not Job.objects.exists()


def test_job_detail_page_status_partial_and_log_tail(world: World, client: Client) -> None:
    _login(client, "alice")
    job = job_submit(user=world.alice, command="echo hi", gpus=1)
    job_log_append(job=job, data="line one\n")
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and b"line one" in page.content and b'data-testid="job-state"' in page.content
    assert b"Why it waits" in page.content
    status = client.get(f"/jobs/{job.pk}/", **HTMX)
    assert b"<html" not in status.content and b'id="job-status"' in status.content
    job_log_append(job=job, data="line two\n")
    tail = client.get(f"/jobs/{job.pk}/log/?offset=9", **HTMX)
    assert b"line two" in tail.content and b"line one" not in tail.content
    assert b'hx-swap-oob="beforeend:#log"' in tail.content and b"offset=18" in tail.content
    assert b'hx-trigger="every 2s"' in tail.content  # a live job keeps being followed


def test_job_page_and_log_tail_show_where_output_was_dropped(world: World, client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_JOB_LOG_MAX_CHARS = 40  # keeps the first 20 characters and the latest (at most) 20
    _login(client, "alice")
    job = job_submit(user=world.alice, command="python loop.py", gpus=1)
    for i in range(10):
        job_log_append(job=job, data=f"line {i:02d}\n")
    page = client.get(f"/jobs/{job.pk}/")
    assert page.content.count(b"characters of output dropped") == 1 and b"[... 44 characters" in page.content
    assert b"line 00" in page.content and b"line 09" in page.content and b"line 05" not in page.content
    assert b"offset=80" in page.content
    tail = client.get(f"/jobs/{job.pk}/log/?offset=30", **HTMX)  # a page whose follower stood inside the gap
    assert b"[... 34 characters of output dropped" in tail.content and b"line 08\nline 09" in tail.content
    assert b"offset=80" in tail.content and b'hx-trigger="every 2s"' in tail.content
    client.post(f"/jobs/{job.pk}/cancel/")
    done = client.get(f"/jobs/{job.pk}/log/?offset=80", **HTMX)
    assert b"hx-trigger" not in done.content  # finished and all shown: the follower stops


def test_log_tail_stops_polling_when_the_job_is_done(world: World, client: Client) -> None:
    _login(client, "alice")
    job = job_submit(user=world.alice, command="x", gpus=1)
    client.post(f"/jobs/{job.pk}/cancel/")
    tail = client.get(f"/jobs/{job.pk}/log/?offset=0", **HTMX)
    assert b"hx-trigger" not in tail.content


def test_cancel_button_over_htmx(world: World, client: Client) -> None:
    _login(client, "alice")
    job = job_submit(user=world.alice, command="x", gpus=1)
    response = client.post(f"/jobs/{job.pk}/cancel/", **HTMX)
    assert response.status_code == 200 and b"cancelled" in response.content
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_other_tenants_job_page_is_404(world: World, client: Client) -> None:
    _login(client, "alice")
    theirs = job_submit(user=world.eve, command="x", gpus=1)
    assert client.get(f"/jobs/{theirs.pk}/").status_code == 404
    assert client.post(f"/jobs/{theirs.pk}/cancel/").status_code == 404


def test_nodes_page(world: World, client: Client) -> None:
    _login(client, "alice")
    page = client.get("/nodes/")
    assert page.status_code == 200 and b"n1" in page.content and b"0 of 8 GPUs allocated" in page.content
    assert b"<html" not in client.get("/nodes/", **HTMX).content


def test_job_list_filter_input_it_cannot_read_is_said_not_hidden(world: World, client: Client) -> None:
    _login(client, "alice")
    page = client.get("/jobs/?mine=yes").content.decode()
    assert "mine: Enter true or false. (that filter is not applied)" in page
    assert 'value="true" checked' not in client.get("/jobs/?mine=false").content.decode()
    assert 'value="true" checked' in client.get("/jobs/?mine=true").content.decode()
