"""The ``corral`` commands against the real portal, served by pytest-django's ``live_server``.

Nothing of ours is faked: the commands go through httpx to Django, DRF, the services, the scheduling round (Celery
in eager mode) and the database. The base cluster is one node that is *down*, so submitted jobs stay pending with a
stable reason. Tests that need a running job add an up node played over the real agent API (:class:`FakeAgent`),
which is also how their output and exit codes arrive.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from rest_framework.authtoken.models import Token
from typer.testing import Result

from portal import celery_app
from portal.jobs.logs import job_log_append
from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu, NodeState
from portal.nodes.services import node_token_issue
from portal.scheduler.services import start_forecast_refresh
from portal.tenants.models import Tenant
from tests.cli.conftest import Invoke
from tests.factories import MembershipFactory, NodeFactory, QuotaFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "pw"  # what tests.factories.UserFactory sets


@dataclass
class Portal:
    url: str
    alice: AbstractUser
    tenant: Tenant


@pytest.fixture
def portal(live_server: Any, monkeypatch: pytest.MonkeyPatch) -> Portal:
    """A tenant ``vision`` with member ``alice`` and one down node with two GPUs (so jobs fit but stay pending).

    Celery runs eagerly: the scheduling round a submit or cancel queues then runs inside the portal, for real,
    instead of needing a broker and a worker that these tests do not start.
    """
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    alice = UserFactory(username="alice")
    tenant = TenantFactory(slug="vision", name="Vision lab")
    MembershipFactory(user=alice, tenant=tenant)
    node = NodeFactory(name="gpu-01", state=NodeState.DOWN, state_reason="no heartbeat")
    for index in range(2):
        Gpu.objects.create(node=node, index=index, uuid=f"GPU-{index}", model="NVIDIA H100", memory_mb=81559)
    return Portal(url=live_server.url, alice=alice, tenant=tenant)


@pytest.fixture
def logged_in(corral: Invoke, portal: Portal) -> Portal:
    result = corral("login", "--url", portal.url, "--username", "alice", "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    return portal


def one_error_line(result: Result) -> str:
    assert result.exit_code != 0, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def submit(corral: Invoke, *args: str) -> int:
    result = corral("submit", "--json", *args)
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)["id"])


def append_log(job_id: int, text: str) -> None:
    with transaction.atomic():
        job_log_append(job=Job.objects.select_for_update().get(pk=job_id), data=text)


# -- login / logout --------------------------------------------------------------------------------------------


def test_login_saves_the_token_in_a_private_file(corral: Invoke, portal: Portal, config_file: Path) -> None:
    result = corral("login", "--url", portal.url + "/", "-u", "alice", "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Logged in to {portal.url} as alice (token saved in {config_file})."
    assert stat.S_IMODE(config_file.stat().st_mode) == 0o600
    saved = json.loads(config_file.read_text())
    assert saved == {"url": portal.url, "token": Token.objects.get(user=portal.alice).key, "username": "alice"}
    assert corral("jobs").stdout.strip() == "No jobs."


def test_login_prompts_for_missing_credentials(corral: Invoke, portal: Portal) -> None:
    result = corral("login", "--url", portal.url, input=f"alice\n{PASSWORD}\n")
    assert result.exit_code == 0, result.output
    assert PASSWORD not in result.output  # the password prompt does not echo
    assert "Logged in to" in result.stdout


def test_login_replaces_a_broken_config_file(corral: Invoke, portal: Portal, config_file: Path) -> None:
    config_file.parent.mkdir(parents=True)
    config_file.write_text("{oops")
    assert "not valid JSON" in one_error_line(corral("jobs"))
    result = corral("login", "--url", portal.url, "-u", "alice", "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == f"note: the config file {config_file} is unreadable; it will be replaced"
    assert corral("jobs").stdout.strip() == "No jobs."


def test_login_url_defaults_to_corral_url(corral: Invoke, portal: Portal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_URL", portal.url)
    result = corral("login", "-u", "alice", "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"Logged in to {portal.url} as alice")


def test_wrong_password_is_one_line_and_saves_nothing(corral: Invoke, portal: Portal, config_file: Path) -> None:
    result = corral("login", "--url", portal.url, "-u", "alice", "--password", "nope")
    assert one_error_line(result) == "error: Unable to log in with provided credentials."
    assert not config_file.exists()


def test_logout_forgets_the_token(corral: Invoke, logged_in: Portal, config_file: Path) -> None:
    assert corral("logout").exit_code == 0
    assert json.loads(config_file.read_text())["token"] is None
    assert "not logged in" in one_error_line(corral("jobs"))


def test_rejected_token(corral: Invoke, logged_in: Portal, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_TOKEN", "not-a-real-token")
    line = one_error_line(corral("jobs"))
    assert line == f"error: the portal at {logged_in.url} refused your token (Invalid token); run `corral login`"


# -- submit / jobs / show --------------------------------------------------------------------------------------


def test_submit_then_list_and_show(corral: Invoke, logged_in: Portal) -> None:
    result = corral("submit", "--gpus", "2", "-e", "WANDB_MODE=offline", "--", "python", "train.py", "--epochs", "1")
    assert result.exit_code == 0, result.output
    job = Job.objects.get()
    assert result.stdout.startswith(f"Submitted job {job.pk} (pending)")
    assert (job.name, job.command, job.gpus, job.env) == (
        "train",
        "python train.py --epochs 1",
        2,
        {"WANDB_MODE": "offline"},
    )
    assert job.user == logged_in.alice and job.tenant == logged_in.tenant  # the portal picked her only tenant

    table = corral("jobs")
    assert table.exit_code == 0, table.output
    row = next(line for line in table.stdout.splitlines() if line.lstrip().startswith(str(job.pk)))
    assert all(word in row for word in ("train", "vision", "alice", "2", "pending"))

    listed = json.loads(corral("jobs", "--json", "--state", "pending", "--mine").stdout)
    assert [j["id"] for j in listed] == [job.pk]
    assert json.loads(corral("jobs", "--json", "--state", "running").stdout) == []

    detail = corral("show", str(job.pk))
    assert detail.exit_code == 0, detail.output
    for expected in ("State", "pending", "vision / alice", "python train.py --epochs 1", "Events", "submitted"):
        assert expected in detail.stdout
    shown = json.loads(corral("show", str(job.pk), "--json").stdout)
    assert shown["id"] == job.pk and shown["events"][0]["kind"] == "submitted"
    assert "Working out when it should start" in detail.stdout  # no forecast has run yet

    start_forecast_refresh()  # the only node is down: no start time can be given, and `show` says why
    detail = corral("show", str(job.pk))
    assert "Expected start" in detail.stdout and "Not on the nodes up now" in " ".join(detail.stdout.split())


def test_submit_into_a_named_tenant_with_a_name(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--tenant", "vision", "--name", "smoke test", "--", "nvidia-smi")
    assert Job.objects.filter(pk=job_id, name="smoke test", command="nvidia-smi", gpus=1).exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--gpus", "0"],
            "error: gpus: A job needs more than 0 GPUs: a whole number, or a fraction of one GPU like 0.25.",
        ),
        (["--gpus", "3"], "error: gpus: the cluster has 2 GPUs; this job asks for 3"),
        (["--tenant", "nope"], "error: tenant: unknown tenant 'nope'"),
        (
            ["-e", "CUDA_VISIBLE_DEVICES=0"],
            "error: env: 'CUDA_VISIBLE_DEVICES' is set by Corral and cannot be overridden",
        ),
    ],
)
def test_refused_submit_is_one_line(corral: Invoke, logged_in: Portal, args: list[str], line: str) -> None:
    assert one_error_line(corral("submit", *args, "--", "python", "train.py")) == line
    assert not Job.objects.exists()


# -- cancel ----------------------------------------------------------------------------------------------------


def test_cancel_a_pending_job(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--", "sleep", "600")
    result = corral("cancel", str(job_id))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"Cancelled job {job_id}."
    assert Job.objects.get(pk=job_id).state == "cancelled"
    assert "cancelled" in corral("show", str(job_id)).stdout
    assert one_error_line(corral("cancel", str(job_id))) == f"error: job {job_id} has already cancelled"


def test_cancel_several_reports_each(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--", "sleep", "600")
    result = corral("cancel", str(job_id), "999")
    assert result.exit_code == 1
    assert result.stdout.strip() == f"Cancelled job {job_id}."
    assert result.stderr.strip() == "error: job 999 not found"


# -- unknown and invisible jobs --------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["show", "logs", "cancel"])
def test_unknown_job_is_not_found(corral: Invoke, logged_in: Portal, command: str) -> None:
    assert one_error_line(corral(command, "999")) == "error: job 999 not found"


def test_another_tenants_job_is_not_found(corral: Invoke, logged_in: Portal) -> None:
    bob = UserFactory(username="bob")
    MembershipFactory(user=bob, tenant=TenantFactory(slug="nlp"))
    theirs = job_submit(user=bob, command="python secret.py", gpus=1)
    assert one_error_line(corral("show", str(theirs.pk))) == f"error: job {theirs.pk} not found"
    assert json.loads(corral("jobs", "--json").stdout) == []


# -- logs ------------------------------------------------------------------------------------------------------


def test_logs_of_a_job_without_output(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--", "true")
    result = corral("logs", str(job_id))
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_logs_print_the_whole_output(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--", "python", "train.py")
    append_log(job_id, "epoch 1 loss 0.93\n")
    append_log(job_id, "épοch 2 ✓ [bold]not markup[/bold]\n")
    result = corral("logs", str(job_id))
    assert result.exit_code == 0, result.output
    assert result.stdout == "epoch 1 loss 0.93\népοch 2 ✓ [bold]not markup[/bold]\n"


def test_logs_of_a_job_that_printed_more_than_the_portal_keeps(
    corral: Invoke, logged_in: Portal, settings: Any
) -> None:
    """The portal drops the middle of a long log; the CLI prints its marker once and following still ends."""
    settings.CORRAL_JOB_LOG_MAX_CHARS = 40  # keeps the first 20 characters and the latest (at most) 20
    job_id = submit(corral, "--", "python", "loop.py")
    for i in range(10):
        append_log(job_id, f"line {i:02d}\n")
    once = corral("logs", str(job_id))
    assert once.exit_code == 0, once.output
    assert once.stdout.startswith("line 00\nline 01\nline\n[... 44 characters of output dropped")
    assert once.stdout.endswith("...]\nline 08\nline 09\n") and once.stdout.count("output dropped") == 1
    assert corral("cancel", str(job_id)).exit_code == 0
    followed = corral("logs", "-f", "--interval", "0.1", str(job_id))
    assert (followed.exit_code, followed.stdout) == (0, once.stdout), followed.output
    assert followed.stderr.strip() == f"job {job_id} cancelled"


def test_logs_follow_until_the_job_ends(corral: Invoke, logged_in: Portal, config_file: Path) -> None:
    job_id = submit(corral, "--", "python", "train.py")
    append_log(job_id, "starting\n")
    outcome: list[Result] = []
    follower = threading.Thread(target=lambda: outcome.append(corral("logs", "-f", "--interval", "0.1", str(job_id))))
    follower.start()
    time.sleep(0.5)  # a few empty polls of a pending job
    # Cancel through the API, not the CLI: a second CliRunner would swap sys.stdout under the follower.
    token = json.loads(config_file.read_text())["token"]
    with httpx.Client(base_url=logged_in.url, headers={"Authorization": f"Token {token}"}) as api:
        for _ in range(50):  # see FakeAgent._post on SQLite's table locks
            if not (response := api.post(f"/api/v1/jobs/{job_id}/cancel/")).is_server_error:
                break
            time.sleep(0.05)
        assert response.json()["state"] == "cancelled"
    follower.join(timeout=15)
    assert not follower.is_alive(), "logs -f did not stop after the job ended"
    result = outcome[0]
    assert (result.exit_code, result.stdout) == (0, "starting\n"), result.output
    assert result.stderr.strip() == f"job {job_id} cancelled"


# -- nodes -----------------------------------------------------------------------------------------------------


def test_nodes(corral: Invoke, logged_in: Portal) -> None:
    result = corral("nodes")
    assert result.exit_code == 0, result.output
    first, second = (line for line in result.stdout.splitlines() if "NVIDIA H100" in line)
    assert "gpu-01" in first and "down" in first and "free" in first
    assert "gpu-01" not in second and "free" in second
    nodes = json.loads(corral("nodes", "--json").stdout)
    assert [(n["name"], len(n["gpus"])) for n in nodes] == [("gpu-01", 2)]


# -- tenants ---------------------------------------------------------------------------------------------------


def test_tenants(corral: Invoke, logged_in: Portal, settings: Any) -> None:
    QuotaFactory(tenant=logged_in.tenant, guaranteed_gpus=2, gpu_limit=4)
    settings.CORRAL_POLICY = "fifo+quota"
    result = corral("tenants")
    assert result.exit_code == 0, result.output
    row = next(line for line in result.stdout.splitlines() if line.startswith("vision"))
    assert row.split() == ["vision", "2", "4", "-", "0", "0", "0", "0", "0.0", "0.00x", "1", "of", "1"]
    assert "idle GPUs are lent first to the tenants that used the least of their share" in result.stdout
    assert "(usage half-life 168 h)" in result.stdout
    overview = json.loads(corral("tenants", "--json").stdout)
    assert (overview["policy"], overview["quota_layer"], [t["slug"] for t in overview["tenants"]]) == (
        "fifo+quota", True, ["vision"],
    )  # fmt: skip
    settings.CORRAL_POLICY = "fifo"
    plain = " ".join(corral("tenants").stdout.split())
    assert "has no +quota layer: guarantees, borrowing and fair share are not in effect" in plain


# -- a running job, driven through the agent API -----------------------------------------------------------------


class FakeAgent:
    """Plays a node agent over the real agent API (``docs/agent-protocol.md``), so a job can run, write output and
    exit without a process on a GPU node: the portal cannot tell the difference."""

    def __init__(self, url: str, name: str, gpus: int) -> None:
        _, token = node_token_issue(name=name)
        self.http = httpx.Client(base_url=url, headers={"Authorization": f"Node {token}"}, timeout=10)
        inventory = [
            {"index": i, "uuid": f"GPU-{name}-{i}", "model": "NVIDIA A100", "memory_mb": 40960} for i in range(gpus)
        ]
        self._post("/api/v1/agent/register/", {"hostname": name, "address": "127.0.0.1", "gpus": inventory})

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST like the real agent: a 5xx is retried (every call is idempotent and one transaction). On the
        in-memory SQLite test database, a poll of ``logs -f`` in another server thread can make a write fail
        with "database table is locked"; PostgreSQL never does."""
        for _ in range(50):
            response = self.http.post(path, json=body)
            if not response.is_server_error:
                break
            time.sleep(0.05)
        response.raise_for_status()
        return response.json()

    def heartbeat(self, *tasks: dict[str, Any]) -> dict[str, Any]:
        return self._post("/api/v1/agent/heartbeat/", {"tasks": list(tasks)})

    def start(self, job_id: int) -> dict[str, Any]:
        """Take the start order for ``job_id`` and report its process running; returns the order."""
        order = next(o for o in self.heartbeat()["start"] if o["job"] == job_id)
        self.heartbeat(self.report(order, "running"))
        return order

    def close(self) -> None:
        # A kept-alive connection pins a live-server thread and its database session, which would stop the test
        # database from being dropped at the end of the run.
        self.http.close()

    @staticmethod
    def report(order: dict[str, Any], state: str, **fields: Any) -> dict[str, Any]:
        return {
            "job": order["job"],
            "attempt": order["attempt"],
            "rank": order["rank"],
            "state": state,
            "pid": 4242,
            **fields,
        }


@pytest.fixture
def agent(logged_in: Portal) -> Iterator[FakeAgent]:
    """An up node ``gpu-up`` with two GPUs, next to the down one: jobs that fit are placed on it at submit."""
    agent = FakeAgent(logged_in.url, "gpu-up", gpus=2)
    yield agent
    agent.close()


def test_running_job_is_shown_with_its_placement_and_followed_to_its_exit(corral: Invoke, agent: FakeAgent) -> None:
    job_id = submit(corral, "--gpus", "2", "--", "python", "train.py")
    order = agent.start(job_id)
    assert order["gpus"] == [0, 1]

    detail = corral("show", str(job_id))
    assert "running" in detail.stdout and "gpu-up  GPUs 0, 1" in detail.stdout
    row = next(line for line in corral("jobs").stdout.splitlines() if line.lstrip().startswith(str(job_id)))
    assert "running" in row and "gpu-up  GPUs 0, 1" in row
    allocated = [line for line in corral("nodes").stdout.splitlines() if "allocated" in line]
    assert len(allocated) == 2 and all(line.rstrip().endswith(str(job_id)) for line in allocated)

    outcome: list[Result] = []
    follower = threading.Thread(target=lambda: outcome.append(corral("logs", "-f", "--interval", "0.1", str(job_id))))
    follower.start()
    time.sleep(0.3)
    agent.heartbeat(agent.report(order, "running", log_offset=0, log="epoch 1\n", log_size=8))
    time.sleep(0.3)
    agent.heartbeat(agent.report(order, "exited", exit_code=3, log_offset=8, log="boom\n", log_size=13))
    follower.join(timeout=15)
    assert not follower.is_alive(), "logs -f did not stop after the job ended"
    assert (outcome[0].exit_code, outcome[0].stdout) == (0, "epoch 1\nboom\n")
    assert outcome[0].stderr.strip() == f"job {job_id} failed (exit code 3)"

    detail = corral("show", str(job_id)).stdout
    assert re.search(r"State\s+failed", detail) and re.search(r"Exit code\s+3", detail)
    assert "rank 0: exit code 3" in detail  # the event that says why


def test_cancel_a_running_job(corral: Invoke, agent: FakeAgent) -> None:
    job_id = submit(corral, "--", "sleep", "600")
    order = agent.start(job_id)

    result = corral("cancel", str(job_id))
    assert result.stdout.strip() == f"Cancel requested for job {job_id} (running); its node is stopping it."
    assert "running (cancel requested)" in corral("show", str(job_id)).stdout
    assert [k["job"] for k in agent.heartbeat(agent.report(order, "running"))["kill"]] == [job_id]

    agent.heartbeat(agent.report(order, "exited", exit_code=-15))
    assert json.loads(corral("show", str(job_id), "--json").stdout)["state"] == "cancelled"


# -- the installed console script --------------------------------------------------------------------------------


def test_the_installed_corral_script(logged_in: Portal, config_file: Path) -> None:
    """``corral`` as users run it: the console script from pyproject, a separate process, real exit codes."""
    corral_bin = Path(sys.executable).with_name("corral")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(corral_bin), *args], capture_output=True, text=True, timeout=60)

    listed = run("--help")
    assert listed.returncode == 0, listed.stderr
    assert all(command in listed.stdout for command in ("login", "submit", "jobs", "show", "logs", "cancel", "nodes"))
    submitted = run("submit", "--json", "--", "python", "train.py")
    assert submitted.returncode == 0, submitted.stderr
    job_id = json.loads(submitted.stdout)["id"]
    assert str(job_id) in run("jobs").stdout
    missing = run("show", "999")
    assert (missing.returncode, missing.stdout, missing.stderr) == (1, "", "error: job 999 not found\n")
