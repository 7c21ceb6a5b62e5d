"""The job page's timeline: submitted, queued for, started, ran for, finished, per attempt when a job was requeued,
with relative times that never read "0 minutes ago" and the UTC time on hover; the same figures in the API.
Ref: #18 (item 4)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.models import Job, JobEvent
from portal.jobs.services import job_submit
from portal.jobs.timeline import job_timeline
from portal.scheduler.services import scheduling_round
from portal.web.times import brief_duration, relative_time
from tests.fixtures import World

NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0, "just now"),
        (4.9, "just now"),
        (12, "12 s ago"),
        (59, "59 s ago"),
        (65, "1 min 5 s ago"),
        (12 * 60 + 3, "12 min ago"),
        (2 * 3600 + 10 * 60 + 7, "2h 10m ago"),
        (3 * 86400 + 4 * 3600 + 5, "3d 4h ago"),
        (-180, "in 3 min"),
    ],
)
def test_relative_times_read_as_people_say_them(seconds: float, words: str) -> None:
    said = relative_time(NOW - seconds * S, NOW)
    assert said == words
    assert "0 minutes" not in said


def test_brief_durations_keep_two_units() -> None:
    assert [brief_duration(s) for s in (0.2, 42, 600, 3600, 5400, 90061)] == [
        "0 s",
        "42 s",
        "10 min",
        "1h",
        "1h 30m",
        "1d 1h",
    ]


def _job(world: World, *, state: str, attempt: int, **times: datetime) -> Job:
    job = Job.objects.create(
        tenant=world.tenant, user=world.alice, name="train", command="train", gpus=1, attempt=attempt, **times
    )
    Job.objects.filter(pk=job.pk).update(submitted_at=NOW - 600 * S, state=state)
    job.refresh_from_db()
    return job


def _events(job: Job, *rows: tuple[int, str, str, str]) -> None:
    """(seconds before NOW, kind, from_state, to_state), oldest first."""
    for ago, kind, from_state, to_state in rows:
        event = JobEvent.objects.create(job=job, kind=kind, actor="test", from_state=from_state, to_state=to_state)
        JobEvent.objects.filter(pk=event.pk).update(at=NOW - ago * S)


def test_a_requeued_job_has_each_attempt_and_the_totals(world: World) -> None:
    job = _job(world, state="succeeded", attempt=2, finished_at=NOW - 10 * S)
    _events(
        job,
        (600, "submitted", "", "pending"),
        (540, "started", "pending", "running"),  # queued 60 s
        (300, "requeued", "running", "pending"),  # ran 240 s, lost its node
        (200, "started", "pending", "running"),  # queued 100 s
        (10, "succeeded", "running", "succeeded"),  # ran 190 s
    )
    timeline = job_timeline(job=job, now=NOW)
    assert [(a.queued_for, a.ran_for, a.ended_by, a.outcome) for a in timeline.attempts] == [
        (60.0, 240.0, "requeued", "pending"),
        (100.0, 190.0, "succeeded", "succeeded"),
    ]
    assert (timeline.queued_seconds, timeline.ran_seconds) == (160.0, 430.0)
    assert (timeline.finished_at, timeline.outcome, timeline.waiting_since) == (NOW - 10 * S, "succeeded", None)


def test_a_waiting_job_counts_its_wait_so_far_and_a_running_one_its_run(world: World) -> None:
    waiting = _job(world, state="pending", attempt=1)
    _events(
        waiting,
        (600, "submitted", "", "pending"),
        (500, "started", "pending", "running"),
        (400, "preempted", "running", "pending"),
    )
    timeline = job_timeline(job=waiting, now=NOW)
    assert timeline.waiting_since == NOW - 400 * S
    assert timeline.queued_seconds == 100.0 + 400.0  # before its first start, and since its preemption
    assert timeline.attempts[0].ended_by == "preempted" and timeline.finished_at is None

    running = _job(world, state="running", attempt=1)
    _events(running, (600, "submitted", "", "pending"), (570, "started", "pending", "running"))
    timeline = job_timeline(job=running, now=NOW)
    assert (timeline.queued_seconds, timeline.ran_seconds, timeline.latest.ended_at) == (30.0, 570.0, None)  # type: ignore[union-attr]


def test_a_job_cancelled_in_the_queue_queued_until_the_cancel(world: World) -> None:
    job = _job(world, state="cancelled", attempt=0, finished_at=NOW - 100 * S)
    _events(job, (600, "submitted", "", "pending"), (100, "cancelled", "pending", "cancelled"))
    timeline = job_timeline(job=job, now=NOW)
    assert (timeline.attempts, timeline.queued_seconds, timeline.outcome) == ((), 500.0, "cancelled")


def test_the_job_page_shows_the_timeline_with_utc_on_hover(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    scheduling_round()
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="job-timeline"' in page
    assert "just now" in page and "minutes ago" not in page
    job.refresh_from_db()
    assert f'title="{job.submitted_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"' in page
    assert 'data-testid="timeline-started"' in page and "Running for" in page
    # The timeline refreshes itself while the job is not over, alone.
    part = client.get(f"/jobs/{job.pk}/?part=timeline", **HTMX).content.decode()
    assert part.lstrip().startswith("<section") and 'data-testid="job-timeline"' in part and "job-state" not in part


def test_an_older_submission_reads_in_seconds_not_zero_minutes(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    Job.objects.filter(pk=job.pk).update(submitted_at=timezone.now() - 20 * S)
    JobEvent.objects.filter(job=job).update(at=timezone.now() - 20 * S)
    page = client.get(f"/jobs/{job.pk}/?part=timeline", **HTMX).content.decode()
    assert " s ago" in page and "0 minutes" not in page


def test_the_api_gives_the_timeline(world: World, api: APIClient) -> None:
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    scheduling_round()
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()
    timeline = body["timeline"]
    assert timeline["outcome"] is None and timeline["finished_at"] is None
    assert len(timeline["attempts"]) == 1 and timeline["attempts"][0]["number"] == 1
    assert timeline["attempts"][0]["ended_at"] is None and timeline["queued_seconds"] >= 0
