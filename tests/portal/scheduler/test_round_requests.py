"""Coalesced round requests (issue #16): a burst of changes queues one round, not one each; a quiet cluster runs no
full rounds and no forecasts; a request that cannot reach the cache still gets its round."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from celery.signals import before_task_publish
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.queue import SCHEDULE_ROUND
from portal.rounds import round_requested
from portal.scheduler.models import SchedulerRound
from portal.scheduler.services import beat_round, scheduling_round, start_forecast_refresh_if_stale
from tests.fixtures import World

OnCommit = Callable[..., Any]


@pytest.fixture
def published() -> Iterator[list[str]]:
    """Names of the tasks this test publishes to the broker (Celery's own signal, at the broker boundary)."""
    names: list[str] = []

    def record(sender: str | None = None, **_: object) -> None:
        names.append(str(sender))

    before_task_publish.connect(record, weak=False)
    yield names
    before_task_publish.disconnect(record)


def submit(world: World, on_commit: OnCommit, command: str = "true") -> Job:
    with on_commit(execute=True):
        return job_submit(user=world.eve, command=command, gpus=1)


def test_a_burst_of_submissions_queues_one_round(
    world: World, published: list[str], django_capture_on_commit_callbacks: OnCommit
) -> None:
    for n in range(20):
        submit(world, django_capture_on_commit_callbacks, f"job {n}")
    assert published.count(SCHEDULE_ROUND) == 1
    assert round_requested()


def test_a_round_takes_the_request_so_the_next_change_queues_the_next_round(
    world: World, published: list[str], django_capture_on_commit_callbacks: OnCommit
) -> None:
    submit(world, django_capture_on_commit_callbacks)
    result = scheduling_round()
    assert result is not None and result.started == 1
    assert not round_requested()
    submit(world, django_capture_on_commit_callbacks)
    assert published.count(SCHEDULE_ROUND) == 2


def test_the_beat_runs_no_full_round_on_a_quiet_cluster(world: World, settings: Any) -> None:
    settings.CORRAL_POLICY = "fifo"
    scheduling_round()
    assert beat_round() is None
    assert SchedulerRound.objects.count() == 1


def test_the_beat_runs_a_round_that_was_asked_for(
    world: World, django_capture_on_commit_callbacks: OnCommit, settings: Any
) -> None:
    settings.CORRAL_POLICY = "fifo"
    scheduling_round()
    job = submit(world, django_capture_on_commit_callbacks)  # as if the queued message were lost
    assert beat_round() is not None
    assert Job.objects.get(pk=job.pk).state == "running"


def test_the_beat_runs_every_round_under_a_preemptive_policy(world: World, settings: Any) -> None:
    settings.CORRAL_POLICY = "tiresias-las"  # priorities move with attained service: time alone changes answers
    scheduling_round()
    assert beat_round() is not None


def test_the_beat_runs_a_round_after_the_idle_interval(world: World, settings: Any) -> None:
    settings.CORRAL_POLICY = "fifo"
    scheduling_round()
    SchedulerRound.objects.update(at=timezone.now() - timedelta(seconds=settings.CORRAL_IDLE_ROUND_EVERY + 1))
    assert beat_round() is not None


def test_the_beat_enforces_time_limits_without_a_full_round(
    world: World, django_capture_on_commit_callbacks: OnCommit, settings: Any
) -> None:
    settings.CORRAL_POLICY = "fifo"
    with django_capture_on_commit_callbacks(execute=True):
        job = job_submit(user=world.eve, command="sleep 1000", gpus=1, time_limit=60)
    scheduling_round()
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=61))
    assert beat_round() is None
    assert Job.objects.get(pk=job.pk).state == "failed"
    assert SchedulerRound.objects.count() == 1


def test_the_forecast_skips_when_nothing_changed(world: World, django_capture_on_commit_callbacks: OnCommit) -> None:
    submit(world, django_capture_on_commit_callbacks)
    scheduling_round()  # the round the submission asked for
    assert start_forecast_refresh_if_stale() is not None
    assert start_forecast_refresh_if_stale() is None  # nothing since
    scheduling_round()  # a round nobody asked for (the beat's) changes nothing
    assert start_forecast_refresh_if_stale() is None
    submit(world, django_capture_on_commit_callbacks)
    scheduling_round()
    assert start_forecast_refresh_if_stale() is not None


def test_a_request_that_cannot_reach_the_cache_queues_its_round_directly(
    world: World, published: list[str], django_capture_on_commit_callbacks: OnCommit, settings: Any
) -> None:
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",  # nothing listens there
            "OPTIONS": {"socket_connect_timeout": 0.2, "socket_timeout": 0.2},
        }
    }
    submit(world, django_capture_on_commit_callbacks)
    submit(world, django_capture_on_commit_callbacks)
    assert published.count(SCHEDULE_ROUND) == 2  # one each: no flag to coalesce on, but no change without a round
    assert round_requested()  # the beat cannot tell, so it runs


def test_a_passed_expected_start_brings_a_new_forecast_soon(
    world: World, django_capture_on_commit_callbacks: OnCommit
) -> None:
    # Nothing changes, but a pending job's expected start has gone by (the jobs ahead ran long): the forecast is
    # redone once FORECAST_OVERDUE_AGE has passed, not only at FORECAST_MAX_AGE. Ref: #18 item 5.
    job = submit(world, django_capture_on_commit_callbacks)
    scheduling_round()
    now = timezone.now()
    assert start_forecast_refresh_if_stale(now=now) is not None
    assert start_forecast_refresh_if_stale(now=now + timedelta(minutes=3)) is None  # nothing overdue
    Job.objects.filter(pk=job.pk).update(state="pending", expected_start_at=now + timedelta(minutes=4))
    assert start_forecast_refresh_if_stale(now=now + timedelta(minutes=3, seconds=30)) is None  # not yet due
    assert start_forecast_refresh_if_stale(now=now + timedelta(minutes=5)) is not None  # overdue, 5 min old
    Job.objects.filter(pk=job.pk).update(state="pending", expected_start_at=now)
    assert start_forecast_refresh_if_stale(now=now + timedelta(minutes=6)) is None  # only 1 min since the last
