#!/usr/bin/env python3
"""Supervise the demo's processes for `make run`: web, worker, beat and one agent per demo node.

Each process's output is shown line by line behind a coloured name. When the web port answers, the URL and the demo
logins are printed. Ctrl-C or SIGTERM stops everything (agents first, so they terminate their jobs while the portal
still listens); so does any process that dies on its own, because a demo with a silent worker only confuses.

`make run` has already migrated, collected static files and run `seed_demo`, which wrote the agents' token files.
Run with the project's virtualenv Python: the commands are taken from the same bin/ directory.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent  # .venv/bin, not resolved: the venv's scripts live next to its python
NODES = ("local-1", "local-2")
LOGINS = (("demo", "demo", "member of tenant demo"), ("admin", "admin", "administrator, also /admin/"))
COLOURS = {"web": 36, "worker": 33, "beat": 35, "local-1": 32, "local-2": 34}  # ANSI foreground colours
WEB_START_TIMEOUT = 60.0
AGENT_STOP_TIMEOUT = 20.0  # agents give their jobs the kill grace (10 s by default) before they exit
STOP_TIMEOUT = 10.0


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    reader: threading.Thread | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


class Output:
    """Prefixes every line with its process's name; one lock so lines from different processes never interleave."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        self.width = max(len(name) for name in COLOURS)

    def line(self, name: str, text: str) -> None:
        label = f"{name:<{self.width}} |"
        if self.colour:
            label = f"\033[{COLOURS.get(name, 37)}m{label}\033[0m"
        with self.lock:
            sys.stdout.write(f"{label} {text}\n")
            sys.stdout.flush()

    def note(self, text: str) -> None:
        self.line("corral", text)

    def pump(self, child: Child) -> None:
        assert child.process is not None and child.process.stdout is not None
        for raw in iter(child.process.stdout.readline, b""):
            self.line(child.name, raw.decode(errors="replace").rstrip("\n"))


def data_dir() -> Path:
    """The same default as portal/settings.py: CORRAL_DATA_DIR, else var/ in the checkout."""
    return Path(os.environ.get("CORRAL_DATA_DIR") or ROOT / "var").resolve()


def nvml_gpu_count() -> int:
    """GPUs NVML can see here; 0 when there is no driver (the usual case on a laptop or in CI)."""
    try:
        import pynvml  # nvidia-ml-py, a dependency of the agent
    except ImportError:
        return 0
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return 0
    try:
        return int(pynvml.nvmlDeviceGetCount())
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()


def child_env(*, port: int = 8000) -> dict[str, str]:
    """Every demo process's environment: the caller's (DATABASE_URL, REDIS_URL, CORRAL_*), unbuffered output, and
    unless the caller set one, the demo's own address as CORRAL_PUBLIC_URL, so that the links in notifications lead
    to this demo when CORRAL_PORT moved it off 8000.
    Nothing here turns debug on: the demo shows the site's own error pages, and static files are WhiteNoise's with
    debug off too; `DEBUG=1 make run` asks for Django's debug pages (docs/operations.md)."""
    return {"CORRAL_PUBLIC_URL": f"http://127.0.0.1:{port}", **os.environ, "PYTHONUNBUFFERED": "1"}


def build_children(*, port: int, fake_gpus: int, simulate_only: bool) -> list[Child]:
    data = data_dir()
    url = f"http://127.0.0.1:{port}"
    children = [
        Child(
            "web",
            [str(BIN / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
             # Threads, because agents' heartbeats and htmx polling hold requests open at the same time.
             "--workers", "2", "--threads", "8", "--worker-class", "gthread", "--graceful-timeout", "5",
             "--no-control-socket"],  # two checkouts' demos would fight over ~/.gunicorn/gunicorn.ctl
        ),
        Child("worker", [str(BIN / "celery"), "-A", "portal", "worker", "-l", "info", "--concurrency", "2"]),
        Child("beat", [str(BIN / "celery"), "-A", "portal", "beat", "-l", "info",
                       "-s", str(data / "celerybeat-schedule")]),
    ]  # fmt: skip
    real_gpus = 0 if simulate_only else nvml_gpu_count()
    for index, node in enumerate(NODES):
        argv = [
            str(BIN / "corral-agent"),
            "--server", url,
            "--token-file", str(data / "agents" / f"{node}.token"),
            "--name", node,
            "--workdir", str(data / "agents" / node),
        ]  # fmt: skip
        # The first node drives this machine's real GPUs when NVML finds some; every other node is simulated.
        if not (index == 0 and real_gpus):
            argv += ["--fake-gpus", str(fake_gpus)]
        if os.geteuid() == 0:
            argv.append("--allow-root")  # otherwise the agent would run demo jobs as `nobody`
        children.append(Child(node, argv))
    return children


def port_in_use(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


class Supervisor:
    def __init__(self, children: list[Child], output: Output, *, port: int = 8000) -> None:
        self.children = children
        self.output = output
        self.port = port
        self.stopping = threading.Event()

    def start(self, child: Child) -> None:
        env = child_env(port=self.port)
        # Own session: the terminal's Ctrl-C reaches only us, and we stop the children in order.
        child.process = subprocess.Popen(
            child.argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        child.reader = threading.Thread(target=self.output.pump, args=(child,), daemon=True)
        child.reader.start()

    def dead_child(self) -> Child | None:
        return next((c for c in self.children if c.process is not None and not c.running), None)

    def wait_for_port(self, port: int) -> bool:
        deadline = time.monotonic() + WEB_START_TIMEOUT
        while time.monotonic() < deadline and not self.stopping.is_set():
            if self.dead_child() is not None:
                return False
            if port_in_use(port):
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        """SIGTERM to each process (its own handler stops its pool or jobs), SIGKILL to its group if it lingers."""
        agents = [c for c in self.children if c.name in NODES]
        rest = [c for c in reversed(self.children) if c not in agents]
        for group, timeout in ((agents, AGENT_STOP_TIMEOUT), (rest, STOP_TIMEOUT)):
            for child in group:
                if child.running:
                    child.process.terminate()
            deadline = time.monotonic() + timeout
            for child in group:
                if child.process is None:
                    continue
                try:
                    child.process.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.output.note(f"{child.name} did not stop within {timeout:.0f}s; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)  # also whatever it forked and left behind
                child.process.wait()
        for child in self.children:
            if child.reader is not None:
                child.reader.join(timeout=2)

    def request_stop(self, signum: int, _frame: object) -> None:
        self.stopping.set()


def banner(port: int, output: Output) -> None:
    output.note(f"Corral is running at http://127.0.0.1:{port}/")
    for username, password, what in LOGINS:
        output.note(f"  log in as {username} / {password}  ({what})")
    output.note(f"  agents: {', '.join(NODES)}; API at http://127.0.0.1:{port}/api/v1/. Press Ctrl-C to stop.")


def main() -> int:
    parser = argparse.ArgumentParser(description="Run Corral's demo processes (what `make run` starts).")
    parser.add_argument("--port", type=int, default=int(os.environ.get("CORRAL_PORT", "8000")))
    parser.add_argument("--fake-gpus", type=int, default=4, help="simulated GPUs per simulated node (default 4)")
    parser.add_argument("--simulate", action="store_true", help="simulate every node's GPUs, even if NVML finds some")
    args = parser.parse_args()

    output = Output()
    if port_in_use(args.port):
        output.note(f"127.0.0.1:{args.port} is already in use; stop what runs there or set CORRAL_PORT")
        return 1
    (data_dir() / "agents").mkdir(parents=True, exist_ok=True)
    children = build_children(port=args.port, fake_gpus=args.fake_gpus, simulate_only=args.simulate)
    supervisor = Supervisor(children, output, port=args.port)
    signal.signal(signal.SIGINT, supervisor.request_stop)
    signal.signal(signal.SIGTERM, supervisor.request_stop)

    status = 0
    try:
        for child in children[:3]:
            supervisor.start(child)
        if supervisor.wait_for_port(args.port):
            for child in children[3:]:  # the agents register as soon as they start: give them a portal to talk to
                supervisor.start(child)
            banner(args.port, output)
        elif not supervisor.stopping.is_set() and supervisor.dead_child() is None:
            output.note(f"the web server did not open port {args.port} within {WEB_START_TIMEOUT:.0f}s")
            status = 1
        while status == 0 and not supervisor.stopping.is_set():
            if (dead := supervisor.dead_child()) is not None:
                output.note(f"{dead.name} exited with status {dead.process.returncode}; stopping the others")
                status = 1
            else:
                supervisor.stopping.wait(0.2)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the shutdown short
        output.note("stopping")
        supervisor.stop()
        output.note("stopped")
    return status


if __name__ == "__main__":
    sys.exit(main())
