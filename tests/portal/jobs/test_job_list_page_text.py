"""What the job list and the job page read as on a fresh cluster, found by using the demo: no template comment leaks
onto the page (Django prints a ``{# … #}`` that spans lines as text), a job submitted seconds ago reads "12 s ago",
never "0 minutes ago", in the list as on the job page, and a finished job whose GPUs sent no readings does not
promise them ("no readings yet"). Ref: #18 (items 1 and 4)"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.test import Client
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from tests.fixtures import World
from tests.portal.telemetry.helpers import running_job

HTMX = {"HTTP_HX_REQUEST": "true"}
#: A ``{#`` whose ``#}`` is not on the same line: Django renders both lines as they are.
OPEN_COMMENT = re.compile(r"\{#(?:(?!#\}).)*$", re.MULTILINE)


def test_no_template_has_a_one_line_comment_that_spans_lines() -> None:
    leaks = []
    for directory in settings.TEMPLATES[0]["DIRS"]:
        for path in sorted(Path(directory).rglob("*.html")):
            for match in OPEN_COMMENT.finditer(path.read_text()):
                line = path.read_text().count("\n", 0, match.start()) + 1
                leaks.append(f"{path}:{line}")
    assert not leaks, "use {% comment %} for comments over several lines: " + ", ".join(leaks)


def test_the_job_list_shows_no_template_text(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    job_submit(user=world.alice, command="python train.py", gpus=1)
    page = client.get("/jobs/").content.decode()
    assert "{#" not in page and "#}" not in page and "hx-disinherit: the pager" not in page


def test_a_job_submitted_seconds_ago_reads_in_seconds_in_the_list(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(seconds=20))
    for page in (client.get("/jobs/").content.decode(), client.get("/jobs/", **HTMX).content.decode()):
        assert re.search(r">2\d s ago</td>", page), page
        assert "0 minutes" not in page


def test_a_finished_job_without_readings_does_not_wait_for_them(world: World, client: Client) -> None:
    job, _, _ = running_job(world, gpus=1)
    assert client.login(username="alice", password="pw")
    assert "no readings yet" in client.get(f"/jobs/{job.pk}/?part=gpus", **HTMX).content.decode()
    Job.objects.filter(pk=job.pk).update(state="failed", finished_at=timezone.now())
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="job-gpu-sparklines"' in page and "no readings" in page and "no readings yet" not in page


def test_a_new_job_has_one_event_not_one_events(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "History (1 event)" in page and "1 events" not in page
