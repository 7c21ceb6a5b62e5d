"""How a start estimate reads, found by using the demo (#18, item 5):

- a short wait said "3 minutes, likely 2m–9h 20m": the measured range pools on-time starts with starts hours late
  behind an overrunning job (``scheduling.core.start_range``), so it now reads "in about 3m, later if the jobs ahead
  overrun", with the measured latest on the page and both ends still in the API;
- a job whose expected start had passed (the forecast is redone when the queue changes) said "Should start at the
  next scheduling round" for minutes while it could not start; it now says it is late and why.
"""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.jobs.waiting import start_in_words
from scheduling.core.forecast import StartOutlook
from scheduling.core.start_range import start_range
from tests.fixtures import World

MIN = timedelta(minutes=1)


def test_a_short_wait_says_it_can_be_later_not_an_absurd_range() -> None:
    now = timezone.now()
    at = now + 3 * MIN
    text, brief, likely = start_in_words(at, now)
    measured = start_range(at.timestamp(), now=now.timestamp())
    assert measured is not None and measured.overrun
    assert "likely" not in text and "likely" not in brief
    assert text.startswith("Should start in about 3m (around ")
    assert "later if the jobs ahead of it run past their expected end" in text and "9 in 10 such jobs" in text
    assert brief == "Starts in about 3m, later if the jobs ahead overrun."
    # The measured range is still given whole (the API's earliest/latest), and the page names its end.
    assert likely is not None and abs(likely[1].timestamp() - measured.latest) < 1
    assert f"by {likely[1]:%H:%M} UTC" in text or f"by {likely[1]:%Y-%m-%d %H:%M} UTC" in text


def test_a_long_wait_keeps_its_likely_range() -> None:
    now = timezone.now()
    text, brief, likely = start_in_words(now + 120 * MIN, now)
    assert ", likely between " in text and brief.startswith("Starts in about 2h (likely ")
    assert likely is not None and likely[0] < now + 120 * MIN < likely[1]


def test_a_start_that_has_passed_says_the_job_is_late_not_next_round() -> None:
    now = timezone.now()
    at = now - 2 * MIN
    text, brief, likely = start_in_words(at, now)
    assert "next scheduling round" not in text and likely is None
    assert text.startswith(f"Was expected to start around {at:%Y-%m-%d %H:%M} UTC")
    assert "running longer than expected" in text and brief == f"Expected around {at:%H:%M} UTC; running late."
    # Just past it, within the rounding of a minute, the next round still starts it.
    assert start_in_words(now - 30 * timedelta(seconds=1), now)[0] == "Should start at the next scheduling round."


def test_the_job_page_list_and_api_say_a_passed_estimate_is_late(world: World) -> None:
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(  # forecast 4 minutes ago to start a minute later, and still waiting
        submitted_at=now - 5 * MIN,
        queued_at=now - 5 * MIN,
        start_outlook=StartOutlook.ESTIMATED.value,
        expected_start_at=now - 3 * MIN,
        forecast_at=now - 4 * MIN,
    )
    client = Client()
    client.force_login(world.alice)
    assert "Was expected to start around" in client.get(f"/jobs/{job.pk}/").content.decode()
    assert "; running late." in client.get("/jobs/").content.decode()
    api = APIClient()
    api.force_authenticate(world.alice)
    body = api.get(f"/api/v1/jobs/{job.pk}/").json()["start_estimate"]
    assert body["text"].startswith("Was expected to start around") and body["latest_start_at"] is None
