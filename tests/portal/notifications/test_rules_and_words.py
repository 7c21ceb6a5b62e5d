"""The rules a setting must follow and the words a notification uses: no database. Ref: #18 (notifications)."""

from __future__ import annotations

import pytest

from portal.notifications.messages import headline, job_message
from portal.notifications.models import Topic
from portal.notifications.rules import LONG_WAIT_RULE, long_wait_problem, webhook_url_problem


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.slack.com/services/T000/B000/XXXX",
        "https://mattermost.example.org/hooks/abc123",
        "http://mattermost/hooks/abc",  # a single-label host, as services inside a cluster are named
        "http://10.0.0.5:8065/hooks/abc",
        "http://[::1]:8080/hook",
        "HTTPS://Hooks.Example.org/x",
    ],
)
def test_webhook_addresses_that_work(url: str) -> None:
    assert webhook_url_problem(url) is None


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("ftp://files.example.org/x", "Enter an http:// or https:// address"),
        ("javascript:alert(1)", "Enter an http:// or https:// address"),
        ("hooks.slack.com/services/x", "Enter an http:// or https:// address"),
        ("https:///path-only", "names no host"),
        ("https://example.org:0/x", "Port 0 cannot be reached"),
        ("https://example.org:70000/x", "Enter a whole http:// or https:// address"),
        ("https://example.org/a b", "no spaces"),
        ("https://example.org/\x00", "no spaces or control characters"),
        ("https://example.org/" + "x" * 500, "to 500 characters"),
    ],
)
def test_webhook_addresses_refused_in_words(url: str, words: str) -> None:
    problem = webhook_url_problem(url)
    assert problem is not None and words in problem


@pytest.mark.parametrize(("minutes", "ok"), [(0, False), (1, True), (60, True), (43_200, True), (43_201, False)])
def test_long_wait_thresholds(minutes: int, ok: bool) -> None:
    assert long_wait_problem(minutes) == (None if ok else LONG_WAIT_RULE)


def test_headlines_read_like_a_person_wrote_them() -> None:
    job = {"job_id": 42, "job_name": "train-resnet"}
    assert headline(topic=Topic.SUCCEEDED, **job) == "Job 42 (train-resnet) succeeded"
    assert headline(topic=Topic.FAILED, reason="rank 0: exit code 1", **job) == (
        "Job 42 (train-resnet) failed: rank 0: exit code 1"
    )
    assert headline(topic=Topic.FAILED, **job) == "Job 42 (train-resnet) failed"
    assert headline(topic=Topic.FAILED, reason="time limit of 2h exceeded", **job) == (
        "Job 42 (train-resnet) failed: time limit of 2h exceeded"
    )
    assert headline(topic=Topic.CANCELLED, reason="processes ended", **job) == "Job 42 (train-resnet) was cancelled"
    assert headline(topic=Topic.REQUEUED, reason="node n1 stopped answering", **job) == (
        "Job 42 (train-resnet) is back in the queue: node n1 stopped answering"
    )
    assert headline(topic=Topic.LONG_WAIT, waited_seconds=3_930, reason="queued behind an earlier job", **job) == (
        "Job 42 (train-resnet) has waited 1h 6m to start: queued behind an earlier job"
    )


def test_long_reasons_are_cut_to_one_line() -> None:
    said = headline(topic=Topic.FAILED, job_id=1, job_name="x", reason="line one\nline two " + "y" * 400)
    assert "\n" not in said and said.endswith("…") and len(said) < 340


def test_a_message_links_to_the_jobs_page(settings) -> None:
    settings.CORRAL_PUBLIC_URL = "https://gpu.example.org/portal/"
    message = job_message(topic=Topic.SUCCEEDED, job_id=7, job_name="eval")
    assert message.text == "Job 7 (eval) succeeded — https://gpu.example.org/portal/jobs/7/"
    assert message.subject == "Job 7 (eval) succeeded"
