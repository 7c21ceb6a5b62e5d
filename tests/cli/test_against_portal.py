"""The ``corral`` commands against the real portal, served by pytest-django's ``live_server``.

Nothing of ours is faked: the commands go through httpx to Django, DRF, the services and the database. The cluster
is one node that is *down*, so submitted jobs stay pending (the scheduler has nowhere to put them) and the tests
see a stable state; log output is written with the same service the agent heartbeat uses.
"""

from __future__ import annotations

import json
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractUser
from django.db import transaction
from rest_framework.authtoken.models import Token
from typer.testing import Result

from portal.jobs.models import Job
from portal.jobs.services import job_cancel, job_log_append, job_submit
from portal.nodes.models import Gpu, Node, NodeState
from portal.tenants.models import Membership, Tenant
from tests.cli.conftest import Invoke

pytestmark = pytest.mark.django_db(transaction=True)

PASSWORD = "correct horse battery staple"


@dataclass
class Portal:
    url: str
    alice: AbstractUser
    tenant: Tenant


@pytest.fixture
def portal(live_server: object) -> Portal:
    """A tenant ``vision`` with member ``alice`` and one down node with two GPUs (so jobs fit but stay pending)."""
    alice = get_user_model().objects.create_user("alice", password=PASSWORD)
    tenant = Tenant.objects.create(slug="vision", name="Vision lab")
    Membership.objects.create(user=alice, tenant=tenant)
    node = Node.objects.create(name="gpu-01", state=NodeState.DOWN, state_reason="no heartbeat")
    for index in range(2):
        Gpu.objects.create(node=node, index=index, uuid=f"GPU-{index}", model="NVIDIA H100", memory_mb=81559)
    return Portal(url=live_server.url, alice=alice, tenant=tenant)  # type: ignore[attr-defined]


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


def test_submit_into_a_named_tenant_with_a_name(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--tenant", "vision", "--name", "smoke test", "--", "nvidia-smi")
    assert Job.objects.filter(pk=job_id, name="smoke test", command="nvidia-smi", gpus=1).exists()


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--gpus", "0"], "error: gpus: Ensure this value is greater than or equal to 1."),
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
    bob = get_user_model().objects.create_user("bob", password=PASSWORD)
    Membership.objects.create(user=bob, tenant=Tenant.objects.create(slug="nlp", name="NLP"))
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


def test_logs_follow_until_the_job_ends(corral: Invoke, logged_in: Portal) -> None:
    job_id = submit(corral, "--", "python", "train.py")
    append_log(job_id, "starting\n")
    outcome: list[Result] = []
    follower = threading.Thread(target=lambda: outcome.append(corral("logs", "-f", "--interval", "0.1", str(job_id))))
    follower.start()
    time.sleep(0.5)
    append_log(job_id, "step 1\n")
    time.sleep(0.3)
    append_log(job_id, "step 2\n")
    job_cancel(job=Job.objects.get(pk=job_id), by=logged_in.alice)  # pending -> cancelled: a terminal state
    follower.join(timeout=15)
    assert not follower.is_alive(), "logs -f did not stop after the job ended"
    result = outcome[0]
    assert result.exit_code == 0, result.output
    assert result.stdout == "starting\nstep 1\nstep 2\n"
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
