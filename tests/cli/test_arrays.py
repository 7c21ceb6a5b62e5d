"""``corral submit --array``, ``corral jobs --array`` and ``corral cancel --array`` against the real portal (pytest-
django's ``live_server``, as in ``test_against_portal``). Ref: #16"""

from __future__ import annotations

import json

import pytest

from portal.jobs.models import Job, JobArray
from tests.cli import test_against_portal as base
from tests.cli.conftest import Invoke

pytestmark = pytest.mark.django_db(transaction=True)

# The same portal and login as the other live tests, found by pytest here too.
portal = base.portal
logged_in = base.logged_in
Portal = base.Portal


def test_submit_an_array_prints_its_id_and_task_count(corral: Invoke, logged_in: Portal) -> None:
    result = corral("submit", "--array", "0-999%50", "--", "python sweep.py --trial $CORRAL_ARRAY_TASK_ID")
    assert result.exit_code == 0, result.output
    job_array = JobArray.objects.get()
    assert result.stdout.startswith(f"Submitted array {job_array.pk}: 1,000 tasks (0-999%50), at most 50 running")
    assert (job_array.task_count, job_array.limit, job_array.command) == (
        1000,
        50,
        "python sweep.py --trial $CORRAL_ARRAY_TASK_ID",  # one word: sent as is, the node's shell expands it
    )
    assert Job.objects.filter(array=job_array).count() == 1000

    as_json = json.loads(corral("submit", "--json", "-a", "3,5", "--", "echo").stdout)
    assert (as_json["task_count"], as_json["counts"]["pending"], as_json["spec"]) == (2, 2, "3,5")
    tasks = json.loads(corral("jobs", "--json", "--array", str(as_json["id"])).stdout)
    assert sorted(t["array_index"] for t in tasks) == [3, 5]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("5-1", "the range 5-1 goes down"),
        ("0-10000000", "at most 100,000"),
        ("a-b", "is not an index"),
        ("0-9%0", "the limit %0 would never run a task"),
    ],
)
def test_a_bad_array_is_one_line_naming_the_field(corral: Invoke, logged_in: Portal, spec: str, words: str) -> None:
    line = base.one_error_line(corral("submit", "--array", spec, "--", "python", "sweep.py"))
    assert line.startswith("error: array: ") and words in line, line
    assert not Job.objects.exists()


def test_cancel_an_array(corral: Invoke, logged_in: Portal) -> None:
    array_id = json.loads(corral("submit", "--json", "--array", "0-9", "--", "sleep 60").stdout)["id"]
    task = Job.objects.get(array_id=array_id, array_index=4)
    assert corral("cancel", str(task.pk)).stdout.strip() == f"Cancelled job {task.pk}."  # one task, as a job
    result = corral("cancel", "--array", str(array_id))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Cancelled array {array_id}: 10 cancelled."
    assert set(Job.objects.filter(array_id=array_id).values_list("state", flat=True)) == {"cancelled"}
    line = base.one_error_line(corral("cancel", "--array", str(array_id)))
    assert line == f"error: array {array_id} has no pending or running tasks left"
    assert base.one_error_line(corral("cancel", "--array", "999")) == "error: array 999 not found"
    assert base.one_error_line(corral("cancel")).startswith("error: name jobs to cancel")
