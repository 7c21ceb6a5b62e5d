"""``corral logs --all ID > f`` writes a job's whole log, streamed from ``GET /api/v1/jobs/{id}/log/?download=1``,
against the real portal (pytest-django's live server). Ref: #18"""

from __future__ import annotations

from tests.cli.conftest import Invoke

# The live-portal fixtures and helpers; pytest finds fixtures by the names a module holds, so tests naming them as
# arguments carry a noqa for F811.
from tests.cli.test_against_portal import Portal, append_log, logged_in, one_error_line, portal, submit  # noqa: F401

LINES = [f"step {i:06d} ✓ loss 0.{i:06d}\n" for i in range(40_000)]  # about 1.1 MB: several stored chunks


def test_logs_all_writes_the_whole_log(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    job_id = submit(corral, "--", "python", "train.py")
    for at in range(0, len(LINES), 10_000):
        append_log(job_id, "".join(LINES[at : at + 10_000]))
    result = corral("logs", "--all", str(job_id))
    assert result.exit_code == 0, result.output
    assert result.stdout == "".join(LINES) and result.stderr == ""


def test_logs_all_of_a_job_without_output(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    job_id = submit(corral, "--", "true")
    result = corral("logs", "--all", str(job_id))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_logs_all_of_an_unknown_job_is_one_line(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    result = corral("logs", "--all", "999")
    assert result.exit_code == 1 and one_error_line(result) == "error: job 999 not found"


def test_logs_all_and_follow_do_not_mix(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    result = corral("logs", "--all", "-f", "1")
    assert result.exit_code == 2
    assert one_error_line(result) == "error: --all downloads the log as it stands; use it or --follow, not both"
