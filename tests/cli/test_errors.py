"""Every way a command can fail ends as one ``error: ...`` line on stderr and a non-zero exit, never a traceback.

These run the real commands against a stub HTTP server (or no server at all) for the failures the real portal does
not produce on demand: 5xx, HTML from a wrong URL, a dead port. The portal's own refusals (400, 404, 409) are
covered against the real thing in ``test_against_portal.py``.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from tests.cli.conftest import Canned, Invoke


def one_error_line(result: object) -> str:
    """The single stderr line of a failed command (asserting that there is exactly one and no stdout)."""
    assert result.exit_code != 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in result.output
    return lines[0]


def save_login(config_file: Path, url: str, token: str = "t0k") -> None:
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(json.dumps({"url": url, "token": token, "username": "alice"}))


@pytest.fixture
def dead_url() -> str:
    """A local port that nothing listens on (bound, read, and closed again)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_connection_refused(corral: Invoke, config_file: Path, dead_url: str) -> None:
    save_login(config_file, dead_url)
    line = one_error_line(corral("jobs"))
    assert line == f"error: cannot reach the portal at {dead_url} (Connection refused); is it running?"


def test_login_connection_refused(corral: Invoke, dead_url: str) -> None:
    line = one_error_line(corral("login", "--url", dead_url, "-u", "alice", "--password", "pw"))
    assert f"cannot reach the portal at {dead_url}" in line


def test_not_logged_in(corral: Invoke) -> None:
    line = one_error_line(corral("submit", "--", "echo", "hi"))
    assert line == "error: not logged in to http://127.0.0.1:8000; run `corral login` (or set CORRAL_TOKEN)"


def test_bad_config_file(corral: Invoke, config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text("{oops")
    line = one_error_line(corral("jobs"))
    assert line == f"error: config file {config_file} is not valid JSON (line 1, column 2); fix it or delete it"


def test_malformed_url_is_a_usage_error(corral: Invoke, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_URL", "http://[::1")
    monkeypatch.setenv("CORRAL_TOKEN", "t0k")
    result = corral("jobs")
    assert one_error_line(result).startswith("error: bad portal URL 'http://[::1'")
    assert result.exit_code == 2


def test_server_error(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    canned.routes["POST /api/v1/jobs/"] = (500, "text/html", "<h1>Server Error (500)</h1>")
    save_login(config_file, url)
    line = one_error_line(corral("submit", "--", "echo", "hi"))
    assert line == f"error: the portal at {url} failed with HTTP 500 on /api/v1/jobs/; try again later"


def test_wrong_url_answers_html(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    canned.routes["GET /api/v1/nodes/"] = (200, "text/html", "<html>some other site</html>")
    save_login(config_file, url)
    line = one_error_line(corral("nodes"))
    assert line == f"error: the portal at {url} did not answer GET /api/v1/nodes/ with JSON; is the URL right?"


def test_rejected_token(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    canned.routes["GET /api/v1/jobs/7/"] = (401, "application/json", '{"detail": "Invalid token."}')
    save_login(config_file, url, token="stale")
    line = one_error_line(corral("show", "7"))
    assert line == f"error: the portal at {url} refused your token (Invalid token); run `corral login`"
    assert canned.seen[0][2]["Authorization"] == "Token stale"


def test_field_error_from_the_portal(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    body = {"gpus": ["Ensure this value is greater than or equal to 1."]}
    canned.routes["POST /api/v1/jobs/"] = (400, "application/json", json.dumps(body))
    save_login(config_file, url)
    line = one_error_line(corral("submit", "--gpus", "0", "--", "python", "train.py"))
    assert line == "error: gpus: Ensure this value is greater than or equal to 1."


def test_conflict_detail(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    canned.routes["POST /api/v1/jobs/5/cancel/"] = (409, "application/json", '{"detail": "job 5 has already failed"}')
    save_login(config_file, url)
    assert one_error_line(corral("cancel", "5")) == "error: job 5 has already failed"


def test_bad_env_pair_is_a_usage_error(corral: Invoke, config_file: Path, dead_url: str) -> None:
    save_login(config_file, dead_url)
    result = corral("submit", "--env", "not a pair", "--", "echo")
    assert one_error_line(result) == "error: --env expects KEY=VALUE with KEY a variable name, got 'not a pair'"
    assert result.exit_code == 2


def test_pagination_is_followed_up_to_the_limit(
    corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]
) -> None:
    url, canned = stub_portal

    def job(i: int) -> dict[str, object]:
        return {
            "id": i,
            "name": f"j{i}",
            "tenant": "vision",
            "user": "alice",
            "gpus": 1,
            "state": "succeeded",
            "reason": "",
            "exit_code": 0,
            "submitted_at": "2025-01-01T00:00:00Z",
        }

    page2 = f"{url}/api/v1/jobs/page2/"
    canned.routes["GET /api/v1/jobs/"] = (
        200,
        "application/json",
        json.dumps({"count": 3, "next": page2, "previous": None, "results": [job(3), job(2)]}),
    )
    canned.routes["GET /api/v1/jobs/page2/"] = (
        200,
        "application/json",
        json.dumps({"count": 3, "next": None, "previous": None, "results": [job(1)]}),
    )
    save_login(config_file, url)
    everything = corral("jobs", "--json", "--state", "succeeded,failed", "-s", "cancelled", "--mine")
    assert [j["id"] for j in json.loads(everything.stdout)] == [3, 2, 1]
    assert canned.seen[0][1] == "/api/v1/jobs/?state=succeeded&state=failed&state=cancelled&mine=true"
    assert canned.seen[1][1] == "/api/v1/jobs/page2/"  # the portal's ``next`` link is followed as given
    limited = corral("jobs", "--json", "--limit", "2")
    assert [j["id"] for j in json.loads(limited.stdout)] == [3, 2]
    table = corral("jobs", "--limit", "2")
    assert [line.split()[0] for line in table.stdout.splitlines()] == ["ID", "3", "2"]
    assert table.stderr.strip() == "(the newest 2 jobs; --limit shows more)"


def test_follow_rides_out_a_portal_restart(corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]) -> None:
    url, canned = stub_portal
    unavailable = (503, "text/html", "<h1>Service Unavailable</h1>")
    canned.routes["GET /api/v1/jobs/7/log/"] = [
        (200, "text/plain", "epoch 1\n", {"X-Log-Offset": "8", "X-Job-State": "running"}),
        unavailable,
        unavailable,
        (200, "text/plain", "done\n", {"X-Log-Offset": "13", "X-Job-State": "succeeded"}),
        (200, "text/plain", "", {"X-Log-Offset": "13", "X-Job-State": "succeeded"}),
    ]
    canned.routes["GET /api/v1/jobs/7/"] = (200, "application/json", '{"id": 7, "state": "succeeded", "exit_code": 0}')
    save_login(config_file, url)
    result = corral("logs", "-f", "--interval", "0.1", "7")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "epoch 1\ndone\n", "job 7 succeeded (exit code 0)\n")
    offsets = [path.partition("?")[2] for method, path, _ in canned.seen if "/log/" in path]
    assert offsets == ["offset=0", "offset=8", "offset=8", "offset=8", "offset=13"]


def test_without_follow_a_failure_is_reported_at_once(
    corral: Invoke, config_file: Path, stub_portal: tuple[str, Canned]
) -> None:
    url, canned = stub_portal
    canned.routes["GET /api/v1/jobs/7/log/"] = (503, "text/html", "<h1>Service Unavailable</h1>")
    save_login(config_file, url)
    line = one_error_line(corral("logs", "7"))
    assert line == f"error: the portal at {url} failed with HTTP 503 on /api/v1/jobs/7/log/; try again later"
    assert len(canned.seen) == 1
