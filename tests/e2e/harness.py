"""Real processes for the end-to-end and browser tests: a Celery worker and beat on the test database and the Redis
that `make test` started, and node agents pointed at pytest-django's live server.

The fixtures live here and are imported by ``tests/e2e/conftest.py`` and ``tests/browser/conftest.py``. Each test
gets its own processes (the transactional test database is emptied between tests, agents' nodes and tokens with
it). Their output goes to files under the test's tmp_path; the tail of each is attached to a failing test's report.
At teardown every process gets SIGTERM, then SIGKILL; job processes an agent left behind (after a SIGKILL) are
found by their working directory and killed too.

The tests are skipped, with a message, unless the database is PostgreSQL and REDIS_URL is set: subprocesses cannot
see pytest-django's in-memory SQLite test database, and the worker needs a broker the test process can reach.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
NODES = ("e2e-1", "e2e-2")
GPUS_PER_NODE = 4
USERNAME, PASSWORD, TENANT = "demo", "demo", "demo"  # the demo login, which the browser test types in

# Fast clocks, so a lost node or a cancel takes seconds. The worker and beat read them from their environment; the
# live server (this process) from the `settings` fixture.
TIMINGS = {
    "CORRAL_HEARTBEAT_INTERVAL": 0.5,
    "CORRAL_NODE_TIMEOUT": 3.0,
    "CORRAL_SCHEDULE_EVERY": 1.0,
    "CORRAL_KILL_GRACE": 2.0,
    "CORRAL_CHECKPOINT_SECONDS": 2.0,  # the notice before a resize or a reclaim stops a job
}
AGENT_GRACE = 2.0
START_TIMEOUT = 45.0
STOP_TIMEOUT = 10.0
LOG_TAIL_LINES = 80
ROUTINE = re.compile(r"httpx: HTTP Request: .* 200 OK")


def skip_reason() -> str | None:
    """Why the real-process tests cannot run here, or None."""
    from django.conf import settings

    how = "run `make test`, or export DATABASE_URL and REDIS_URL (`make test-services` prints them)"
    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        return f"end-to-end tests need PostgreSQL (worker and agents share the test database): {how}"
    if not os.environ.get("REDIS_URL"):
        return f"end-to-end tests need Redis (REDIS_URL is unset): {how}"
    return None


# --- processes ------------------------------------------------------------------------------------------------


@dataclass
class Proc:
    """One subprocess, in its own process group, its output in ``logfile``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    logfile: Path
    popen: subprocess.Popen[bytes] | None = None
    killed_on_purpose: bool = False

    def start(self) -> Proc:
        with open(self.logfile, "ab") as out:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.logfile.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of output, less the agents' routine "HTTP Request ... 200 OK" lines (4 a second)."""
        kept = [line for line in self.output().splitlines() if not ROUTINE.search(line)]
        return "\n".join(kept[-lines:])

    def kill_hard(self) -> None:
        """SIGKILL, as if the machine died: no clean-up, no goodbye to the portal."""
        assert self.popen is not None
        self.killed_on_purpose = True
        self.popen.kill()
        self.popen.wait()

    def terminate(self) -> None:
        if self.alive:
            self.popen.terminate()

    def stop(self) -> None:
        """SIGTERM (if not sent already), SIGKILL after STOP_TIMEOUT, then SIGKILL to whatever is left in its group."""
        if self.popen is None:
            return
        self.terminate()
        try:
            self.popen.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        try:  # whatever it forked and left behind (a worker's pool processes)
            os.killpg(self.popen.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def processes_under(directory: Path) -> list[int]:
    """Live processes whose working directory is inside ``directory``: how we find an agent's job processes."""
    found = []
    prefix = str(directory.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == prefix or cwd.startswith(prefix + os.sep)):
            found.append(int(entry.name))
    return found


def wait_for(predicate: Callable[[], Any], *, timeout: float, what: str, stack: Stack | None = None) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail with ``what`` (and why, if a process died)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if stack is not None:
            stack.check_alive()
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


@dataclass
class Stack:
    """The live portal and the processes around it, for one test."""

    url: str
    env: dict[str, str]
    tmp: Path
    procs: dict[str, Proc] = field(default_factory=dict)

    def spawn(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.env, self.tmp / f"{name}.log").start()
        self.procs[name] = proc
        return proc

    def start_worker(self) -> Proc:
        # No gossip/mingle/heartbeat: a lone worker, ready in a second instead of waiting for peers that never come.
        return self.spawn("worker", [sys.executable, "-m", "celery", "-A", "portal", "worker", "-l", "info",
                                     "--concurrency", "2", "--without-gossip", "--without-mingle",
                                     "--without-heartbeat", "-n", "e2e@%h"])  # fmt: skip

    def start_beat(self) -> Proc:
        return self.spawn("beat", [sys.executable, "-m", "celery", "-A", "portal", "beat", "-l", "info",
                                   "-s", str(self.tmp / "celerybeat-schedule"), "--max-interval", "1"])  # fmt: skip

    def workdir(self, node: str) -> Path:
        return self.tmp / "agents" / node

    def start_agent(self, node: str, token: str) -> Proc:
        token_file = self.tmp / "agents" / f"{node}.token"
        token_file.parent.mkdir(parents=True, exist_ok=True)
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        agent = shutil.which("corral-agent", path=str(Path(sys.executable).parent))
        argv = [agent] if agent else [sys.executable, "-m", "agent.main"]
        argv += ["--server", self.url, "--token-file", str(token_file), "--name", node, "--fake-gpus",
                 str(GPUS_PER_NODE), "--workdir", str(self.workdir(node)), "--grace", str(AGENT_GRACE)]  # fmt: skip
        if os.geteuid() == 0:
            argv.append("--allow-root")  # CI runs as root; `nobody` could not write the tmp_path job directories
        return self.spawn(node, argv)

    def check_alive(self) -> None:
        for proc in self.procs.values():
            if not proc.alive and not proc.killed_on_purpose:
                code = proc.popen.returncode if proc.popen else None
                pytest.fail(f"{proc.name} exited unexpectedly with status {code}:\n{proc.tail(40)}")

    def wait_for_log(self, name: str, pattern: str, timeout: float = START_TIMEOUT) -> None:
        regex = re.compile(pattern)
        wait_for(lambda: regex.search(self.procs[name].output()), timeout=timeout,
                 what=f"{name} to log /{pattern}/", stack=self)  # fmt: skip

    def job_pids(self, node: str | None = None) -> list[int]:
        """Processes of jobs started by the agents (of ``node``, or all)."""
        nodes = [node] if node else list(NODES)
        return [pid for n in nodes for pid in processes_under(self.workdir(n))]

    def stop(self) -> None:
        # Agents first (they stop their jobs), then beat before the worker so no task is queued into a void.
        for group in ([n for n in NODES if n in self.procs], [n for n in ("beat", "worker") if n in self.procs]):
            for name in group:  # all at once: each takes a moment to wind down
                self.procs[name].terminate()
            for name in group:
                self.procs[name].stop()
        for pid in self.job_pids():  # orphans of an agent killed with SIGKILL
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def log_tails(self) -> list[tuple[str, str]]:
        return [(name, proc.tail()) for name, proc in self.procs.items()]


def database_url_of_test_db() -> str:
    """DATABASE_URL with pytest-django's test database name (test_corral) in place of the configured one."""
    from django.db import connection

    parts = urlsplit(os.environ["DATABASE_URL"])
    return parts._replace(path="/" + connection.settings_dict["NAME"]).geturl()


# --- pytest wiring --------------------------------------------------------------------------------------------

STACK_KEY = pytest.StashKey[Stack]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Attach the tail of every process's output to a failing test's report."""
    report = yield
    stack = item.stash.get(STACK_KEY, None)
    if stack is not None and report.failed:
        for name, tail in stack.log_tails():
            report.sections.append((f"{name} output (last {LOG_TAIL_LINES} lines)", tail))
    return report


@pytest.fixture
def e2e_user(transactional_db: None) -> Any:
    """The demo login (demo/demo), member of tenant demo with no quota limits."""
    from django.contrib.auth import get_user_model

    from portal.tenants.models import Membership, Tenant

    user = get_user_model().objects.create_user(USERNAME, password=PASSWORD)
    tenant = Tenant.objects.create(slug=TENANT, name="Demo")
    Membership.objects.create(user=user, tenant=tenant)
    return user


@pytest.fixture
def corral_stack(
    request: pytest.FixtureRequest, live_server: Any, transactional_db: None, settings: Any, tmp_path: Path
) -> Iterator[Stack]:
    """Worker, beat and two agents (4 simulated GPUs each) around the live server; both nodes up on return."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from portal.nodes.services import node_token_issue

    for key, value in TIMINGS.items():
        setattr(settings, key, value)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_test_db(),
        "REDIS_URL": os.environ["REDIS_URL"],
        "CORRAL_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        **{key: str(value) for key, value in TIMINGS.items()},
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    stack = Stack(url=live_server.url, env=env, tmp=tmp_path)
    request.node.stash[STACK_KEY] = stack
    try:
        stack.start_worker()
        stack.start_beat()
        for node in NODES:
            _, token = node_token_issue(name=node)
            stack.start_agent(node, token)
        stack.wait_for_log("worker", r"\bready\.")
        with api_client(live_server.url) as anonymous:
            staff = _staff_token(anonymous)
        with api_client(live_server.url, staff) as client:
            wait_for(lambda: _nodes_up(client) >= set(NODES), timeout=START_TIMEOUT,
                     what=f"nodes {', '.join(NODES)} to register and be up", stack=stack)  # fmt: skip
        yield stack
    finally:
        stack.stop()


def _staff_token(client: httpx.Client) -> str:
    """A throw-away staff account for the fixture's own look-ups, so the tests' user stays as the test made it."""
    from django.contrib.auth import get_user_model

    get_user_model().objects.create_user("e2e-staff", password="e2e-staff", is_staff=True)
    return obtain_token(client, "e2e-staff", "e2e-staff")


def _nodes_up(client: httpx.Client) -> set[str]:
    response = client.get("/api/v1/nodes/")
    response.raise_for_status()
    return {n["name"] for n in results(response.json()) if n["state"] == "up" and len(n["gpus"]) == GPUS_PER_NODE}


# --- talking to the REST API ----------------------------------------------------------------------------------


def api_client(base_url: str, token: str | None = None) -> httpx.Client:
    headers = {"Authorization": f"Token {token}"} if token else {}
    return httpx.Client(base_url=base_url, headers=headers, timeout=15.0)


def obtain_token(client: httpx.Client, username: str, password: str) -> str:
    response = client.post("/api/v1/auth/token/", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    return response.json()["token"]


def results(payload: Any) -> list[dict[str, Any]]:
    """A list endpoint's items, paginated or not."""
    return payload["results"] if isinstance(payload, dict) and "results" in payload else payload


@pytest.fixture
def live_api(corral_stack: Stack, e2e_user: Any) -> Iterator[httpx.Client]:
    """An httpx client for the live server, authenticated as the demo user through POST /api/v1/auth/token/."""
    with api_client(corral_stack.url) as anonymous:
        token = obtain_token(anonymous, USERNAME, PASSWORD)
    with api_client(corral_stack.url, token) as client:
        yield client
