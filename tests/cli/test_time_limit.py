"""``corral submit --time-limit`` and how ``corral show`` reads the limit back. Ref: #4"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Job
from scheduling.core import durations as client_durations  # the client parses with the portal's grammar (#14)
from scheduling.core import durations as portal_durations
from tests.cli.conftest import Invoke

# The live-portal fixtures (a live server, a logged-in user, an agent played over the real API) and their helpers;
# pytest finds fixtures by the names a module holds, so tests naming them as arguments carry a noqa for F811.
from tests.cli.test_against_portal import FakeAgent, Portal, agent, logged_in, one_error_line, portal  # noqa: F401

SAMPLES = ["7200", " 45 ", "2h", "90m", "1D 12H", "1h30m", "1h 30m 15s", "1.5h", "0", "", "abc", "1h30", "30m 1h", "-5"]


@pytest.mark.parametrize("text", SAMPLES)
def test_the_client_parses_durations_like_the_portal(text: str) -> None:
    """The client parses and prints limits with the portal's one grammar (``scheduling.core.durations``, imported
    when a limit is parsed or shown); the two must agree."""
    try:
        expected: int | str = portal_durations.parse_duration(text)
    except ValueError as exc:
        expected = str(exc)
    try:
        got: int | str = client_durations.parse_duration(text)
    except ValueError as exc:
        got = str(exc)
    assert got == expected
    for seconds in (0, 59, 5400, 90_061, 2_592_000):
        assert client_durations.format_duration(seconds) == portal_durations.format_duration(seconds)


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("soon", "error: --time-limit: 'soon' is not a duration; write it like 2h, 90m, 1d 12h or 3600 (seconds)"),
        ("0", "error: --time-limit must be at least 1 second, got '0'"),
        ("30m 2h", "error: --time-limit: '30m 2h': give each unit once, largest first (like 1d 12h)"),
    ],
)
def test_a_bad_time_limit_is_a_usage_error(corral: Invoke, value: str, words: str) -> None:
    result = corral("submit", "--time-limit", value, "--", "python", "train.py")
    assert result.exit_code == 2
    assert one_error_line(result) == words


def test_submit_with_a_time_limit_and_show_it(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    result = corral("submit", "--time-limit", "1h 30m", "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert job.time_limit == 5400
    assert re.search(r"Time limit\s+1h 30m\n", corral("show", str(job.pk)).stdout)
    too_long = corral("submit", "--time-limit", "31d", "--", "x")
    assert one_error_line(too_long) == "error: time_limit: The time limit may be at most 30 days (2592000 seconds)."


def test_show_says_how_long_a_running_job_has_left(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    result = corral("submit", "--time-limit", "2h", "--json", "--", "sleep", "600")
    job_id = int(re.search(r'"id": (\d+)', result.stdout).group(1))  # type: ignore[union-attr]
    agent.start(job_id)
    Job.objects.filter(pk=job_id).update(started_at=timezone.now() - timedelta(minutes=30, seconds=5))
    detail = corral("show", str(job_id)).stdout
    assert re.search(r"Time limit\s+2h \(1h 29m 5\ds left\)", detail), detail
