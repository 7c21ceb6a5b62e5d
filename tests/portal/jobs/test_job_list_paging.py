"""The job list keeps its page and filters: the table partial carries the page it shows (the 3-second refresh sends
it back), its pager links keep the filters, and an ``?array=`` list stays that array's tasks. Ref: #18"""

from __future__ import annotations

import re

from django.test import Client

from portal.jobs.array_services import job_array_submit
from portal.jobs.models import Job
from portal.jobs.services import job_cancel, job_submit
from tests.fixtures import World

HTMX = {"HTTP_HX_REQUEST": "true"}


def _login(client: Client) -> Client:
    assert client.login(username="alice", password="pw")
    return client


def _cancelled_jobs(world: World, count: int) -> list[int]:
    return [
        job_cancel(job=job_submit(user=world.alice, command=f"c{i}", gpus=1), by=world.alice).pk for i in range(count)
    ]


def test_the_table_partial_holds_its_page_for_the_refresh(world: World, client: Client) -> None:
    ids = _cancelled_jobs(world, 60)
    _login(client)
    page = client.get("/jobs/?page=2").content.decode()
    # The refresh includes the filters and the page the table holds, and the table says it is page 2.
    assert 'hx-include="#job-filters, [data-list-page]"' in page
    assert '<input type="hidden" name="page" value="2" data-list-page>' in page
    # What the refresh then asks for is page 2 again: the oldest jobs, not the newest.
    refreshed = client.get("/jobs/?state=&tenant=&user=&name=&page=2", **HTMX).content.decode()
    assert f'href="/jobs/{min(ids)}/"' in refreshed and f'href="/jobs/{max(ids)}/"' not in refreshed
    assert 'value="2" data-list-page' in refreshed


def test_pager_links_keep_the_filters(world: World, client: Client) -> None:
    _cancelled_jobs(world, 60)
    job_submit(user=world.alice, command="still-pending", gpus=1)
    _login(client)
    page = client.get("/jobs/?state=cancelled").content.decode()
    assert re.search(r'href="\?state=cancelled&amp;page=2" hx-get="/jobs/\?state=cancelled&amp;page=2"', page), page
    second = client.get("/jobs/?state=cancelled&page=2", **HTMX).content.decode()
    assert 'href="?state=cancelled&amp;page=1"' in second and "still-pending" not in second


def test_an_array_list_stays_the_arrays_tasks_across_refreshes(world: World, client: Client) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-59")
    job_submit(user=world.alice, command="outside", gpus=1)
    _login(client)
    page = client.get(f"/jobs/?array={job_array.pk}&page=2").content.decode()
    assert f'<input type="hidden" name="array" value="{job_array.pk}">' in page  # inside the filter form
    refreshed = client.get(f"/jobs/?array={job_array.pk}&page=2", **HTMX).content.decode()
    tasks = Job.objects.filter(array=job_array).order_by("pk")
    assert 'data-testid="array-row"' not in refreshed  # one row per task, not the folded array
    assert f'href="/jobs/{tasks.first().pk}/"' in refreshed  # type: ignore[union-attr]
    assert f'href="?array={job_array.pk}&amp;page=1"' in refreshed


def test_back_to_a_pushed_url_gets_the_whole_page(world: World, client: Client) -> None:
    _login(client)
    restore = client.get("/jobs/?page=1", HTTP_HX_REQUEST="true", HTTP_HX_HISTORY_RESTORE_REQUEST="true")
    assert b"<html" in restore.content
