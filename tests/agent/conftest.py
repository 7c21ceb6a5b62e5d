"""A real HTTP peer that plays the portal's side of ``docs/agent-protocol.md`` for the agent's tests.

It is a test double of the *network peer*, not of our code: the agent under test makes real HTTP calls through
httpx to a real socket. The peer keeps just enough state to behave like the portal: start orders are repeated
until the task is reported, log chunks are appended only at the offset the peer holds, kills are repeated until
the task exits, and a task is forgotten once its exit and whole log are in.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from agent.client import GpuDescriptor, PortalClient
from agent.loop import Agent, Backoff
from agent.runner import Runner
from agent.watchdog import LeaseFile

TOKEN = "node-secret"


class FakePortal:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.token = TOKEN
        self.port = 0
        self.heartbeat_interval = 0.05
        self.sample_interval = 0.1
        self.registrations: list[dict[str, Any]] = []
        self.heartbeats: list[dict[str, Any]] = []
        self.sample_posts: list[dict[str, Any]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []  # every accepted call in arrival order: (path, body)
        self.samples_status: int | None = None  # answer sample posts with this error status instead
        self.orders: dict[str, dict[str, Any]] = {}
        self.sticky_start = False  # keep sending start even after the task was reported
        self.kills: dict[tuple[int, int], float | None] = {}
        self.signals: dict[tuple[int, int], str] = {}  # sent in every reply while the task runs
        self.auto_forget = True
        self.forgotten: set[tuple[int, int]] = set()
        self.logs: dict[str, bytes] = {}
        self.reports: dict[str, list[dict[str, Any]]] = {}
        self.lose_next_chunk: set[str] = set()
        self.register_again = False
        self.register_again_status = 409
        self.lease_seconds: float | None = None  # granted at registration when set (an older portal grants none)
        self.before_heartbeat_reply: Callable[[], None] | None = None  # runs while a heartbeat waits for its reply
        self.log_endpoint = True  # False: POST /api/v1/agent/logs/ is a 404 without a code, as on an older portal
        self.log_posts: list[tuple[str, int, int]] = []  # every log POST: (task, offset, bytes)
        self.log_post_limit: int | None = None  # answer 413 to larger log bodies
        self.refuse_logs_of: set[str] = set()  # answer 404 not_found to log POSTs for these tasks
        self._server: ThreadingHTTPServer | None = None

    # --- control -----------------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def serve(self) -> None:
        portal = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                auth = self.headers.get("Authorization", "")
                if self.headers.get("Content-Type") == "application/octet-stream":
                    status, reply = portal.handle_log(self.path, auth, raw)
                else:
                    status, reply = portal.handle(self.path, auth, json.loads(raw or b"{}"))
                data = json.dumps(reply).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def down(self) -> None:
        """Stop answering: connections are refused until :meth:`serve` binds the same port again."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def add_task(self, job: int, command: str | list[str], *, attempt: int = 1, rank: int = 0, gpus=(0,), env=None):
        with self.lock:
            self.orders[f"{job}:{attempt}:{rank}"] = {
                "job": job,
                "attempt": attempt,
                "rank": rank,
                "command": command,
                "gpus": list(gpus),
                "env": env if env is not None else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus))},
            }

    def kill(self, job: int, *, attempt: int = 1, grace: float | None = None) -> None:
        with self.lock:
            self.kills[(job, attempt)] = grace

    def last(self, job: int, attempt: int = 1, rank: int = 0) -> dict[str, Any] | None:
        with self.lock:
            history = self.reports.get(f"{job}:{attempt}:{rank}")
            return history[-1] if history else None

    def log(self, job: int, attempt: int = 1, rank: int = 0) -> str:
        with self.lock:
            return self.logs.get(f"{job}:{attempt}:{rank}", b"").decode()

    def states(self, job: int, attempt: int = 1, rank: int = 0) -> list[str]:
        with self.lock:
            return [report["state"] for report in self.reports.get(f"{job}:{attempt}:{rank}", [])]

    # --- the portal's side of the protocol ---------------------------------------------------------------------
    def handle(self, path: str, auth: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if auth != f"Node {TOKEN}":
            return 401, {"detail": "Invalid node token."}
        with self.lock:
            if path == "/api/v1/agent/register/":
                self.registrations.append(body)
                self.register_again = False
                reply = {
                    "node": body["hostname"],
                    "heartbeat_interval": self.heartbeat_interval,
                    "sample_interval": self.sample_interval,
                }
                if self.lease_seconds is not None:
                    reply["lease_seconds"] = self.lease_seconds
                return 200, reply
            if path == "/api/v1/agent/heartbeat/":
                if self.register_again:
                    return self.register_again_status, {"detail": "register again"}
                if self.before_heartbeat_reply is not None:
                    self.before_heartbeat_reply()
                return 200, self._heartbeat(body)
            if path == "/api/v1/agent/samples/":
                if self.samples_status is not None:
                    return self.samples_status, {"detail": "unavailable"}
                self.sample_posts.append(body)
                self.calls.append((path, body))
                return 200, {"accepted": len(body["samples"])}
        return 404, {"detail": "Not found."}

    def handle_log(self, target: str, auth: str, data: bytes) -> tuple[int, dict[str, Any]]:
        """``POST /api/v1/agent/logs/?job=&attempt=&rank=&offset=``: raw bytes, kept only at the offset held."""
        if auth != f"Node {TOKEN}":
            return 401, {"detail": "Invalid node token."}
        path, _, query = target.partition("?")
        if path != "/api/v1/agent/logs/" or not self.log_endpoint:
            return 404, {"detail": "Not found."}
        where = {name: int(values[0]) for name, values in parse_qs(query).items()}
        wire = f"{where['job']}:{where['attempt']}:{where.get('rank', 0)}"
        with self.lock:
            if wire in self.refuse_logs_of:
                return 404, {"detail": f"this node has no task {wire}", "code": "not_found"}
            if self.log_post_limit is not None and len(data) > self.log_post_limit:
                return 413, {"detail": "request body too large", "code": "too_large"}
            self.log_posts.append((wire, where["offset"], len(data)))
            held = self.logs.setdefault(wire, b"")
            if where["offset"] == len(held):
                self.logs[wire] = held + data
            return 200, {"log_offset": len(self.logs[wire])}

    def _heartbeat(self, body: dict[str, Any]) -> dict[str, Any]:
        self.heartbeats.append(body)
        self.calls.append(("/api/v1/agent/heartbeat/", body))
        offsets: dict[str, int] = {}
        done: set[tuple[int, int]] = set()
        running: set[tuple[int, int]] = set()
        for task in body["tasks"]:
            wire = f"{task['job']}:{task['attempt']}:{task['rank']}"
            self.reports.setdefault(wire, []).append(task)
            held = self.logs.setdefault(wire, b"")
            if wire in self.lose_next_chunk and task["log"]:
                self.lose_next_chunk.discard(wire)  # as if the write had been lost: the offset stays put
            elif task["log_offset"] == len(held):
                self.logs[wire] = held + task["log"].encode()
            offsets[wire] = len(self.logs[wire])
            pair = (task["job"], task["attempt"])
            if task["state"] == "running":
                running.add(pair)
            elif offsets[wire] == task["log_size"]:
                done.add(pair)
        start = [order for wire, order in self.orders.items() if self.sticky_start or wire not in self.reports]
        kill = [
            {"job": job, "attempt": attempt, "grace_seconds": grace}
            for (job, attempt), grace in self.kills.items()
            if (job, attempt) in running
        ]
        signals = [
            {"job": job, "attempt": attempt, "signal": name}
            for (job, attempt), name in self.signals.items()
            if (job, attempt) in running
        ]
        forget = []
        if self.auto_forget:
            forget = [{"job": job, "attempt": attempt} for job, attempt in sorted(done - running)]
            self.forgotten |= done - running
        return {"start": start, "kill": kill, "signal": signals, "forget": forget, "log_offsets": offsets}


@pytest.fixture
def portal() -> Iterator[FakePortal]:
    peer = FakePortal()
    peer.serve()
    yield peer
    peer.down()


@pytest.fixture
def make_agent(tmp_path: Path) -> Iterator[Callable[..., Agent]]:
    """Agents wired to a portal URL, whose tasks are all stopped at teardown."""
    agents: list[Agent] = []

    def make(
        url: str,
        *,
        token: str = TOKEN,
        run_as: str | None = None,
        grace: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        lease_file: LeaseFile | None = None,
        kill_wait: float = 2.0,
    ) -> Agent:
        client = PortalClient(url, lambda: token, timeout=2.0)
        runner = Runner(tmp_path / f"work{len(agents)}", run_as=run_as)
        gpus = [GpuDescriptor(i, f"GPU-test-{i}", "Test GPU", 1024) for i in range(2)]
        agent = Agent(
            client,
            runner,
            hostname="node-a",
            address="127.0.0.1",
            gpus=gpus,
            grace=grace,
            backoff=Backoff(0.01, 0.05),
            clock=clock,
            lease_file=lease_file,
            kill_wait=kill_wait,
        )
        agents.append(agent)
        return agent

    yield make
    for agent in agents:
        agent.shutdown()
        agent.client.close()


def _step_until(agent: Agent, done: Callable[[], object], *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        agent.step()
        time.sleep(0.02)


def _wait_for(done: Callable[[], object], *, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


class FakeClock:
    """A monotonic clock the test moves by hand (the agent takes its clock as an argument)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def fake_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def running() -> Callable[[int], bool]:
    """Whether process ``pid`` still runs (a zombie does not: it holds nothing and only waits to be reaped)."""
    return _running


@pytest.fixture
def step_until() -> Callable[..., None]:
    """Run heartbeat iterations until ``done()`` is true, as the live loop would but without its waiting."""
    return _step_until


@pytest.fixture
def wait_for() -> Callable[..., None]:
    """Poll ``done()`` until it is true (for processes and threads the test does not drive)."""
    return _wait_for
