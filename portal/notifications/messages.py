"""What a notification says, in the words a colleague would use: "Job 42 (train-resnet) failed: rank 0: exit code 1
— https://portal/jobs/42/". Plain values in, strings out; links start at ``CORRAL_PUBLIC_URL`` (read at call time).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.urls import reverse

from portal.notifications.models import Topic
from scheduling.core.durations import format_duration

#: Subjects stay within the column; a reason (a free text) is cut to this many characters.
SUBJECT_MAX = 200
REASON_MAX = 300


@dataclass(frozen=True, slots=True)
class Message:
    subject: str
    text: str


def public_url(path: str) -> str:
    """``path`` on the portal as its users reach it (``CORRAL_PUBLIC_URL``), for links sent out of the portal."""
    return settings.CORRAL_PUBLIC_URL.rstrip("/") + path


def job_url(job_id: int) -> str:
    return public_url(reverse("job-detail", args=[job_id]))


def settings_url() -> str:
    return public_url(reverse("notification-settings"))


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line: reasons may hold newlines, a chat message should not
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def headline(*, topic: str, job_id: int, job_name: str, reason: str = "", waited_seconds: float = 0.0) -> str:
    """One sentence about one job: what happened, and why when the history says so."""
    job = f"Job {job_id} ({_cut(job_name, 80)})"
    why = f": {_cut(reason, REASON_MAX)}" if reason.strip() else ""
    if topic == Topic.SUCCEEDED:
        return f"{job} succeeded"
    if topic == Topic.FAILED:
        return f"{job} failed{why}"
    if topic == Topic.CANCELLED:
        return f"{job} was cancelled"
    if topic == Topic.REQUEUED:
        return f"{job} is back in the queue{why}"
    if topic == Topic.LONG_WAIT:
        waited = format_duration(max(60, round(waited_seconds / 60) * 60))  # minutes are precise enough
        return f"{job} has waited {waited} to start{why}"
    raise ValueError(f"no job headline for topic {topic!r}")


def job_message(*, topic: str, job_id: int, job_name: str, reason: str = "", waited_seconds: float = 0.0) -> Message:
    said = headline(topic=topic, job_id=job_id, job_name=job_name, reason=reason, waited_seconds=waited_seconds)
    return Message(subject=_cut(said, SUBJECT_MAX), text=f"{said} — {job_url(job_id)}")


def test_message(*, username: str) -> Message:
    return Message(
        subject=f"Test notification for {username}",
        text=f"Test notification for {username}: job news will arrive here. — {settings_url()}",
    )


def email_body(text: str) -> str:
    """A mail's body: the message, and where to change or stop it."""
    return f"{text}\n\nYou get this because you asked for it; change or stop it at {settings_url()}\n"
