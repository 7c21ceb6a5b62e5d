"""``corral history``: an admin downloads the cluster's finished jobs as a trace, against the real portal.
Ref: #3"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from scheduling.sim.trace import read_trace
from tests.cli.conftest import Invoke
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.history import finished_job

pytestmark = pytest.mark.django_db(transaction=True)

H = timedelta(hours=1)


@pytest.fixture
def portal_url(live_server: Any) -> str:
    """Tenant ``vision`` with member ``alice``, admin ``root``, and two finished jobs of alice's."""
    alice = UserFactory(username="alice")
    UserFactory(username="root", is_staff=True)
    tenant = TenantFactory(slug="vision")
    MembershipFactory(user=alice, tenant=tenant)
    finished_job(tenant, alice, name="resnet", gpus=2, state="succeeded", submitted=0 * H, started=H, finished=3 * H)
    finished_job(tenant, alice, name="bert", gpus=1, state="failed", submitted=5 * H, started=5 * H, finished=6 * H)
    return str(live_server.url)


def login(corral: Invoke, url: str, username: str) -> None:
    result = corral("login", "--url", url, "--username", username, "--password", "pw")
    assert result.exit_code == 0, result.output


def one_error_line(result: Result) -> str:
    assert result.exit_code != 0, result.output
    assert "Traceback" not in result.output
    (line,) = result.stderr.splitlines()
    return line


def test_an_admin_writes_the_trace_to_a_file(corral: Invoke, portal_url: str, tmp_path: Path) -> None:
    login(corral, portal_url, "root")
    out = tmp_path / "history.csv"
    result = corral("history", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"Wrote 2 finished jobs to {out}."
    jobs = read_trace(out)
    assert [(j.name, j.submit_time, j.duration, j.gpus, j.status) for j in jobs] == [
        ("resnet", 0, 7200, 2, "completed"),
        ("bert", 18000, 3600, 1, "failed"),
    ]
    since = corral("history", "--since", "2026-11-01T12:00:00Z")
    assert since.exit_code == 0, since.output
    assert since.stdout.splitlines()[1].split(",")[-1] == "bert"  # to stdout, the window applied


def test_bad_input_and_members_get_one_error_line(corral: Invoke, portal_url: str, tmp_path: Path) -> None:
    login(corral, portal_url, "root")
    assert one_error_line(corral("history", "--since", "last week")).startswith("error: since: Datetime has wrong")
    unwritable = tmp_path / "missing-dir" / "history.csv"
    assert one_error_line(corral("history", "--out", str(unwritable))).startswith(f"error: cannot write {unwritable}")
    login(corral, portal_url, "alice")
    assert "permission" in one_error_line(corral("history"))
