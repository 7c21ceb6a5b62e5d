"""Job arrays in the browser: the submit form's Array field, the job list's one row per array with its counts (and
its tasks on demand), the array page with its tasks and "Cancel array". Full pages and htmx partials. Ref: #16"""

from __future__ import annotations

import html
import re

from django.test import Client

from portal.jobs.array_services import job_array_submit
from portal.jobs.models import Job, JobArray
from portal.jobs.services import job_submit
from portal.scheduler.services import scheduling_round
from tests.fixtures import World

HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(client: Client, username: str = "alice") -> Client:
    assert client.login(username=username, password="pw")
    return client


def _text(response: object) -> str:
    return html.unescape(response.content.decode())  # type: ignore[attr-defined]


def test_the_form_submits_an_array_and_lands_on_its_page(world: World, client: Client) -> None:
    _login(client)
    form = _text(client.get("/jobs/new/"))
    assert 'name="array"' in form and "$CORRAL_ARRAY_TASK_ID" in form
    response = client.post("/jobs/new/", {"command": "python sweep.py", "gpus": "1", "array": "0-9%3"})
    job_array = JobArray.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/arrays/{job_array.pk}/"
    assert (job_array.task_count, job_array.limit, Job.objects.count()) == (10, 3, 10)
    page = _text(client.get(response["Location"]))
    assert f"Array {job_array.pk} submitted: 10 tasks." in page
    assert "10 pending" in page and "0-9%3" in page and "at most 3 tasks run at a time" in page


def test_an_empty_array_field_submits_one_job(world: World, client: Client) -> None:
    _login(client)
    response = client.post("/jobs/new/", {"command": "x", "gpus": "1", "array": "  "})
    assert response.status_code == 302 and not JobArray.objects.exists() and Job.objects.count() == 1


def test_the_form_says_what_is_wrong_with_a_bad_array(world: World, client: Client) -> None:
    _login(client)
    for typed, words in (("5-1", "goes down"), ("0-9%0", "at least 1"), ("a-b", "not an index")):
        response = client.post("/jobs/new/", {"command": "x", "gpus": "1", "array": typed})
        assert response.status_code == 200
        page = _text(response)
        # The message sits under the Array field, not at the top of the form.
        field = page[page.index('name="array"') : page.index('name="array"') + 2000]
        assert words in field, typed
    assert not Job.objects.exists()


def test_the_job_list_shows_an_array_as_one_row_with_counts(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-9", name="sweep")
    job_submit(user=world.alice, command="single", gpus=1, name="single")
    scheduling_round()  # lab may use 6 GPUs: 6 tasks run (or 5 and the single job)
    _login(client)
    for response in (client.get("/jobs/"), client.get("/jobs/", **HTMX)):
        page = _text(response)
        assert page.count('data-testid="array-row"') == 1
        assert "single" in page and "sweep[" not in page  # tasks folded into their array's row
        counts = re.search(r'data-testid="array-counts">(.*?)</td>', page, re.S)
        assert counts is not None
        words = re.sub(r"<[^>]+>", "", counts.group(1)).split()
        running = Job.objects.filter(array=job_array, state="running").count()
        assert words == [str(running), "running", str(10 - running), "pending"]
        assert f'hx-get="/arrays/{job_array.pk}/tasks/"' in page  # expandable
    filtered = _text(client.get("/jobs/?state=running"))
    assert filtered.count('data-testid="array-row"') == 1  # listed while any task matches the filter
    tasks = _text(client.get(f"/jobs/?array={job_array.pk}"))
    assert 'data-testid="array-row"' not in tasks and tasks.count("sweep[") == 10


def test_the_job_list_has_a_query_budget_with_arrays(
    world: World, client: Client, django_assert_max_num_queries
) -> None:  # noqa: ANN001, E501
    for n in range(8):
        job_array_submit(user=world.alice, command="x", gpus=1, array=f"0-{n}")
        job_submit(user=world.alice, command="single", gpus=1)
    _login(client)
    with django_assert_max_num_queries(10):  # counts for every array on the page in one query
        page = _text(client.get("/jobs/", **HTMX))
    assert page.count('data-testid="array-row"') == 8


def test_expanding_an_array_loads_its_tasks_a_page_at_a_time(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-119", name="big")
    _login(client)
    first = _text(client.get(f"/arrays/{job_array.pk}/tasks/", **HTMX))
    assert "big[" not in first and "tasks 1–50 of 120" in first
    indices = re.findall(r"<tr>\s*<td>(\d+)</td>", first)
    assert indices == [str(i) for i in range(50)]
    third = _text(client.get(f"/arrays/{job_array.pk}/tasks/?page=3", **HTMX))
    assert re.findall(r"<tr>\s*<td>(\d+)</td>", third) == [str(i) for i in range(100, 120)]


def test_the_array_page_and_its_cancel_button(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-4")
    _login(client, "bob")  # a member, not the owner: sees it, may not cancel it
    page = _text(client.get(f"/arrays/{job_array.pk}/"))
    assert "5 pending" in page and 'data-testid="array-cancel-button"' not in page
    assert client.post(f"/arrays/{job_array.pk}/cancel/").status_code == 302
    assert Job.objects.filter(array=job_array, state="pending").count() == 5  # refused with a message
    client.logout()
    _login(client)
    page = _text(client.get(f"/arrays/{job_array.pk}/"))
    assert 'data-testid="array-cancel-button"' in page and "hx-confirm=" in page and "csrfmiddlewaretoken" in page
    status = _text(client.post(f"/arrays/{job_array.pk}/cancel/", **HTMX))
    assert "5 cancelled" in status and 'data-testid="array-cancel-button"' not in status
    assert "hx-trigger" not in status  # nothing left to poll for
    assert Job.objects.filter(array=job_array, state="cancelled").count() == 5
    partial = _text(client.get(f"/arrays/{job_array.pk}/", **HTMX))
    assert partial.lstrip().startswith('<div id="array-status"')


def test_another_tenants_array_page_is_a_404(world: World, client: Client) -> None:
    theirs = job_array_submit(user=world.eve, command="x", gpus=1, array="0-2")
    _login(client)
    for url in (f"/arrays/{theirs.pk}/", f"/arrays/{theirs.pk}/tasks/"):
        assert client.get(url).status_code == 404
    assert client.post(f"/arrays/{theirs.pk}/cancel/").status_code == 404


def test_staff_see_arrays_read_only_in_the_admin(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-2", name="sweep")
    world.admin.is_staff = world.admin.is_superuser = True  # type: ignore[attr-defined]
    world.admin.save()
    _login(client, "labadmin")
    listing = _text(client.get("/admin/jobs/jobarray/"))
    assert "sweep" in listing and "0-2" in listing
    assert client.get(f"/admin/jobs/jobarray/{job_array.pk}/change/").status_code == 200
    assert client.get("/admin/jobs/jobarray/add/").status_code == 403
    assert "sweep[1]" in _text(client.get("/admin/jobs/job/"))


def test_a_tasks_page_links_to_its_array(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="4-6")
    task = Job.objects.get(array=job_array, array_index=5)
    _login(client)
    page = _text(client.get(f"/jobs/{task.pk}/"))
    assert f'<a href="/arrays/{job_array.pk}/">array {job_array.pk}</a>, task 5' in page
