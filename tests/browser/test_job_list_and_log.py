"""The job list's pages and the job page's output box, in a real browser. Ref: #18

- Page 2 of the job list stays page 2 through the table's 3-second refreshes (they used to swap page 1 in while the
  URL still said page 2), and the pager keeps the filters.
- A long finished log opens at its end, "Load earlier output" puts the piece before in front without moving what
  the reader looks at, "Jump to end" and "Find" work, and "Download" serves the whole log as a file.
- A running job's log follows new output while the reader is at the end, and stays put, with a "Follow" button,
  once they scroll up.

Debian's chromium driven by Playwright, against the real worker, beat and agents of tests/e2e/harness.py; skipped,
with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.browser.conftest import collect_errors
from tests.e2e.harness import PASSWORD, TENANT, USERNAME, Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

#: 50,000 numbered lines: about 1.35 MB, five times what the page shows at first.
LOG_LINES = [f"epoch {i:05d} loss 0.{i:07d}\n" for i in range(50_000)]
#: How far a log box is from its end, in CSS pixels.
FROM_END_JS = "e => e.scrollHeight - e.scrollTop - e.clientHeight"


def finished_job(user: Any, name: str) -> Any:
    """A job of ``user`` that ended (cancelled while pending), written directly: these fixtures run before the
    stack's nodes exist, when a submission would be refused (the cluster has no GPUs yet)."""
    from django.utils import timezone

    from portal.jobs.models import EventKind, Job, JobEvent

    job = Job.objects.create(
        tenant=user.memberships.get().tenant,
        user=user,
        name=name,
        command="python train.py",
        gpus=1,
        state="cancelled",
        finished_at=timezone.now(),
    )
    JobEvent.objects.create(job=job, kind=EventKind.CANCELLED, actor=user.username, from_state="pending")
    return job


@pytest.fixture
def sixty_old_jobs(e2e_user: Any) -> list[int]:
    """60 finished jobs of the demo user: more than one page of 50. Made before the browser starts (see ``page``)."""
    return [finished_job(e2e_user, f"old-{i:02d}").pk for i in range(60)]


@pytest.fixture
def long_log_job(e2e_user: Any) -> int:
    """A finished job whose log is 50,000 lines long."""
    from portal.jobs.logs import job_log_append

    job = finished_job(e2e_user, "long-log")
    for at in range(0, len(LOG_LINES), 10_000):
        job_log_append(job=job, data="".join(LOG_LINES[at : at + 10_000]))
    return int(job.pk)


def log_in(page: Any, then: str) -> None:
    from playwright.sync_api import expect

    page.goto(f"/accounts/login/?next={then}")
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", PASSWORD)
    page.click("main form button[type=submit]")
    expect(page).to_have_url(re.compile(re.escape(then) + "$"))


def count_swaps(page: Any) -> None:
    """Count the job table's htmx refreshes in ``window.__swaps`` from now on."""
    page.evaluate(
        "window.__swaps = 0; document.body.addEventListener('htmx:afterSwap', e => {"
        " if (e.detail.target.id === 'job-table') window.__swaps += 1; })"
    )


def test_page_two_survives_the_refresh(sixty_old_jobs: list[int], page: Any, corral_stack: Stack) -> None:
    from playwright.sync_api import expect

    errors = collect_errors(page)
    oldest, newest = min(sixty_old_jobs), max(sixty_old_jobs)
    log_in(page, "/jobs/?page=2")
    table = page.locator("[data-testid=job-table]")
    expect(page.locator("[data-testid=job-page-number]")).to_have_text("2")
    expect(table.get_by_role("link", name=str(oldest), exact=True)).to_be_visible()
    count_swaps(page)
    page.wait_for_function("window.__swaps >= 2", timeout=15_000)  # two refreshes, 3 s apart
    expect(page.locator("[data-testid=job-page-number]")).to_have_text("2")
    expect(table.get_by_role("link", name=str(oldest), exact=True)).to_be_visible()
    expect(table.get_by_role("link", name=str(newest), exact=True)).to_have_count(0)
    assert page.url.endswith("/jobs/?page=2")

    # With a filter: the pager keeps it, the URL says both, and the refresh keeps both.
    page.select_option("select[name=state]", "cancelled")
    expect(page).to_have_url(re.compile(r"state=cancelled"))
    expect(page.locator("[data-testid=job-page-number]")).to_have_text("1")  # a new filter starts at its first page
    page.locator("[data-testid=job-pager]").get_by_role("link", name="older →").click()
    expect(page).to_have_url(re.compile(r"state=cancelled.*page=2"))
    expect(page.locator("[data-testid=job-page-number]")).to_have_text("2")
    count_swaps(page)
    page.wait_for_function("window.__swaps >= 2", timeout=15_000)
    expect(page.locator("[data-testid=job-page-number]")).to_have_text("2")
    expect(table.get_by_role("link", name=str(oldest), exact=True)).to_be_visible()
    assert not errors, errors


def test_a_long_log_opens_at_its_end_and_loads_earlier_output(
    long_log_job: int, page: Any, corral_stack: Stack
) -> None:
    from playwright.sync_api import expect

    errors = collect_errors(page)
    log_in(page, f"/jobs/{long_log_job}/")
    log = page.locator("[data-testid=job-log]")
    expect(log).to_contain_text(LOG_LINES[-1].strip())
    assert LOG_LINES[0].strip() not in log.text_content()
    page.wait_for_function("e => e.scrollHeight - e.scrollTop - e.clientHeight < 30", arg=log.element_handle())

    # Load earlier output: the text grows at the front; the line the reader looks at stays where it was.
    page.locator("[data-testid=log-jump-end]").click()
    log.evaluate("e => { e.scrollTop = e.scrollHeight / 2; }")
    before = log.evaluate("e => ({start: Number(e.dataset.start), fromEnd: e.scrollHeight - e.scrollTop})")
    page.locator("[data-testid=log-earlier]").click()
    page.wait_for_function(f"e => Number(e.dataset.start) < {before['start']}", arg=log.element_handle())
    after = log.evaluate("e => ({text: e.textContent, fromEnd: e.scrollHeight - e.scrollTop})")
    assert abs(after["fromEnd"] - before["fromEnd"]) <= 2, (before, after)
    assert after["text"].endswith(LOG_LINES[-1]) and "".join(LOG_LINES).endswith(after["text"])
    expect(page.locator("[data-testid=log-follow]")).to_be_visible()  # scrolled up: not following

    # Jump to end.
    page.locator("[data-testid=log-jump-end]").click()
    assert log.evaluate(FROM_END_JS) < 30
    expect(page.locator("[data-testid=log-follow]")).to_be_hidden()

    # Find: the match is marked and scrolled into the box's view.
    wanted = LOG_LINES[-2000].split(" loss")[0]  # in the loaded text, well above the end
    page.fill("[data-testid=log-find]", wanted)
    page.press("[data-testid=log-find]", "Enter")
    expect(page.locator("[data-testid=log-find-count]")).to_have_text("1 of 1")
    mark = page.locator("[data-testid=job-log] mark.current")
    expect(mark).to_have_text(wanted)
    box, seen = log.bounding_box(), mark.bounding_box()
    assert box["y"] <= seen["y"] <= box["y"] + box["height"], (box, seen)

    # Download: the whole log, as a file.
    link = page.locator("[data-testid=log-download]")
    response = page.request.get(link.get_attribute("href"))
    assert response.status == 200 and response.text() == "".join(LOG_LINES)
    assert response.headers["content-disposition"] == f'attachment; filename="job-{long_log_job}.log"'
    assert not errors, errors


def test_a_running_log_follows_unless_the_reader_scrolled_up(
    page: Any, corral_stack: Stack, live_api: httpx.Client
) -> None:
    from playwright.sync_api import expect

    command = 'for i in $(seq 1 400); do echo "line $i of the training run"; sleep 0.1; done'
    response = live_api.post("/api/v1/jobs/", json={"name": "chatty", "command": command, "gpus": 1, "tenant": TENANT})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    errors = collect_errors(page)
    log_in(page, f"/jobs/{job_id}/")
    log = page.locator("[data-testid=job-log]")
    handle = log.element_handle()
    lines = "e => (e.textContent.match(/\\n/g) || []).length"

    # Enough output to overflow the box, and it keeps the end in view as more arrives.
    page.wait_for_function(f"e => ({lines})(e) >= 60", arg=handle, timeout=60_000)
    seen = log.evaluate(lines)
    page.wait_for_function(f"e => ({lines})(e) >= {seen + 20}", arg=handle, timeout=30_000)
    assert log.evaluate(FROM_END_JS) < 30, "the log did not follow new output"
    expect(page.locator("[data-testid=log-follow]")).to_be_hidden()

    # The reader scrolls up: new output arrives, the box stays where they are, and offers to follow again.
    log.evaluate("e => { e.scrollTop = 0; }")
    expect(page.locator("[data-testid=log-follow]")).to_be_visible()
    seen = log.evaluate(lines)
    page.wait_for_function(f"e => ({lines})(e) >= {seen + 20}", arg=handle, timeout=30_000)
    assert log.evaluate("e => e.scrollTop") == 0, "the reader was yanked to the end"

    # Follow again: to the end, and along with the output.
    page.locator("[data-testid=log-follow]").click()
    expect(page.locator("[data-testid=log-follow]")).to_be_hidden()
    seen = log.evaluate(lines)
    page.wait_for_function(f"e => ({lines})(e) >= {seen + 20}", arg=handle, timeout=30_000)
    assert log.evaluate(FROM_END_JS) < 30
    assert not errors, errors


def test_an_expanded_array_stays_open_and_pages_through_refreshes(
    page: Any, corral_stack: Stack, live_api: httpx.Client
) -> None:
    from playwright.sync_api import expect

    array = {"name": "sweep", "command": "sleep 20", "gpus": 1, "array": "0-59", "tenant": TENANT}
    response = live_api.post("/api/v1/jobs/", json=array)
    assert response.status_code == 201, response.text
    array_id = response.json()["id"]
    errors = collect_errors(page)
    log_in(page, "/jobs/")
    row = page.locator(f"[data-testid=array-row][data-array='{array_id}']")
    expect(row).to_be_visible()
    page.locator(f"#array-{array_id}-tasks [data-testid=array-expand]").click()
    tasks = page.locator(f"#array-{array_id}-task-list")
    expect(tasks).to_contain_text("tasks 1–50 of 60")
    tasks.get_by_role("link", name="higher indices →").click()
    expect(tasks).to_contain_text("tasks 51–60 of 60")
    count_swaps(page)
    page.wait_for_function("window.__swaps >= 2", timeout=15_000)  # the table refreshed around the open array
    expect(tasks).to_be_visible()
    expect(tasks).to_contain_text("tasks 51–60 of 60")
    assert not errors, errors
