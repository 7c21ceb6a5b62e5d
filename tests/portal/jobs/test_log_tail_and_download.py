"""A long log read from its end: the job page opens at the last 256 KiB with "Load earlier output" for the piece
before, the API reads a tail (``?tail=N``) and streams the whole log as a file (``?download=1``). Ref: #18"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.logs import DOWNLOAD_PIECE_CHARS, job_log_append, job_log_window
from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.jobs.views import LOG_TAIL_CHARS
from tests.fixtures import World

#: 50,000 numbered lines of 27 characters: 1.35 MB, about 5 times what the page shows at first.
LINES = [f"epoch {i:05d} loss 0.{i:07d}\n" for i in range(50_000)]
WHOLE = "".join(LINES)


@pytest.fixture
def long_job(world: World) -> Job:
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    for at in range(0, len(LINES), 5000):
        job_log_append(job=job, data="".join(LINES[at : at + 5000]))
    job.refresh_from_db()
    assert job.log_size == len(WHOLE)
    return job


def _login(client: Client) -> Client:
    assert client.login(username="alice", password="pw")
    return client


def test_windows_start_on_a_line_and_join_exactly(long_job: Job) -> None:
    text, start = job_log_window(job=long_job, end=long_job.log_size, chars=1000)
    assert text == WHOLE[start:] and start > len(WHOLE) - 1000 and WHOLE[start - 1] == "\n"
    pieces = [text]
    while start > 0:  # "load earlier output" until the beginning
        text, start = job_log_window(job=long_job, end=start, chars=300_000)
        pieces.insert(0, text)
    assert "".join(pieces) == WHOLE


def test_the_job_page_opens_at_the_end_and_loads_earlier_output(long_job: Job, client: Client) -> None:
    _login(client)
    page = client.get(f"/jobs/{long_job.pk}/").content.decode()
    assert LINES[-1] in page and LINES[0] not in page  # the end, not the beginning
    start = int(page.split('data-start="', 1)[1].split('"', 1)[0])
    assert len(WHOLE) - LOG_TAIL_CHARS <= start < len(WHOLE) - LOG_TAIL_CHARS + 100
    for control in ("log-earlier", "log-jump-end", "log-follow", "log-find", "log-download"):
        assert f'data-testid="{control}"' in page
    assert f'href="/api/v1/jobs/{long_job.pk}/log/?download=1"' in page
    assert f'hx-get="/jobs/{long_job.pk}/log/?offset={len(WHOLE)}"' in page  # polls from the end only
    earlier = client.get(f"/jobs/{long_job.pk}/log/?before={start}")
    assert earlier["Content-Type"].startswith("text/plain")
    earlier_start = int(earlier["X-Log-Start"])
    assert earlier.content.decode() == WHOLE[earlier_start:start] and earlier_start < start


def test_a_short_log_has_nothing_earlier_to_load(world: World, client: Client) -> None:
    job = job_submit(user=world.alice, command="echo hi", gpus=1)
    job_log_append(job=job, data="hi\n")
    page = _login(client).get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-start="0"' in page and '<p class="log-earlier" data-log-earlier-row hidden>' in page


def test_the_api_reads_a_tail(long_job: Job, api: APIClient) -> None:
    response = api.get(f"/api/v1/jobs/{long_job.pk}/log/?tail=100", HTTP_ACCEPT="text/plain")
    start = int(response["X-Log-Start"])
    assert response.status_code == 200 and response.content.decode() == WHOLE[start:]
    assert response.content.decode() == "".join(LINES[-3:])  # whole lines: the 3 that fit in the last 100
    assert response["X-Log-Offset"] == str(len(WHOLE))
    both = api.get(f"/api/v1/jobs/{long_job.pk}/log/?tail=100&offset=3")
    assert both.status_code == 400 and "tail" in both.json()
    assert api.get(f"/api/v1/jobs/{long_job.pk}/log/?tail=0").status_code == 400


def test_the_api_downloads_the_whole_log_as_a_streamed_file(long_job: Job, api: APIClient) -> None:
    response = api.get(f"/api/v1/jobs/{long_job.pk}/log/?download=1")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["Content-Disposition"] == f'attachment; filename="job-{long_job.pk}.log"'
    pieces = list(response.streaming_content)
    assert b"".join(pieces).decode() == WHOLE
    assert len(pieces) > 1 and max(len(p) for p in pieces) <= DOWNLOAD_PIECE_CHARS + 256 * 1024  # never all at once


def test_a_download_marks_dropped_output(world: World, api: APIClient, settings) -> None:  # noqa: ANN001
    settings.CORRAL_JOB_LOG_MAX_CHARS = 40
    job = job_submit(user=world.alice, command="loop", gpus=1)
    for i in range(10):
        job_log_append(job=job, data=f"line {i:02d}\n")
    body = b"".join(api.get(f"/api/v1/jobs/{job.pk}/log/?download=1").streaming_content).decode()
    assert body.startswith("line 00\nline 01\nline") and body.endswith("line 08\nline 09\n")
    assert body.count("characters of output dropped") == 1


def test_another_tenants_log_cannot_be_downloaded(world: World, api: APIClient) -> None:
    theirs = job_submit(user=world.eve, command="secret", gpus=1)
    job_log_append(job=theirs, data="secret\n")
    assert api.get(f"/api/v1/jobs/{theirs.pk}/log/?download=1").status_code == 404
