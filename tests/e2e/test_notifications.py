"""Notifications with every process real: settings saved over the API, a job that fails on an agent, beat's sweep
writing the outbox, and the Celery worker posting to a webhook (a real HTTP server in this process).
Ref: #18 (notifications)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.e2e.harness import Stack, wait_for
from tests.e2e.test_job_lifecycle import TERMINAL, wait_state
from tests.portal.notifications.webhook import serve_webhook

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]
SETTINGS = "/api/v1/account/notifications/"


def latest(live_api: httpx.Client) -> dict[str, Any]:
    """The newest notification of the demo user, as the API lists it."""
    recent = live_api.get(SETTINGS).json()["recent"]
    return recent[0] if recent else {"state": None, "attempts": 0, "last_error": ""}


def test_a_failed_job_reaches_its_owners_webhook(corral_stack: Stack, live_api: httpx.Client) -> None:
    with serve_webhook() as webhook:
        webhook.answers.append(500)  # the first try fails: the worker retries it (30 s later)
        response = live_api.put(SETTINGS, json={"webhook_url": webhook.url})
        assert response.status_code == 200, response.text
        response = live_api.post("/api/v1/jobs/", json={"name": "crash", "command": "exit 3", "gpus": 1})
        assert response.status_code == 201, response.text
        job_id = response.json()["id"]
        assert wait_state(live_api, corral_stack, job_id, TERMINAL)["state"] == "failed"

        wait_for(lambda: webhook.requests, timeout=30, what="the first try at the webhook", stack=corral_stack)
        wait_for(
            lambda: latest(live_api)["last_error"] == "the webhook answered 500 Internal Server Error",
            timeout=10,
            what="the failed try on the outbox row",
            stack=corral_stack,
        )
        assert (latest(live_api)["state"], latest(live_api)["attempts"]) == ("queued", 1)
        wait_for(lambda: len(webhook.requests) >= 2, timeout=60, what="the retry", stack=corral_stack)
        assert (
            webhook.bodies[0]
            == webhook.bodies[1]
            == {
                "text": f"Job {job_id} (crash) failed: rank 0: exit code 3 — http://127.0.0.1:8000/jobs/{job_id}/",
                "job": job_id,
                "event": "failed",
                "url": f"http://127.0.0.1:8000/jobs/{job_id}/",
            }
        )
        wait_for(lambda: latest(live_api)["state"] == "sent", timeout=10, what="the row sent", stack=corral_stack)
        assert len(live_api.get(SETTINGS).json()["recent"]) == 1
        assert latest(live_api)["attempts"] == 2
