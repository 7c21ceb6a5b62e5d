"""The real stack the chaos benchmark (``bench/chaos.py``) runs and breaks: PostgreSQL and Redis started by
``scripts/test_servers.py``'s own functions, the portal in its production shape (gunicorn, ``CORRAL_PRODUCTION=1``),
a Celery worker, beat, and ``corral-agent`` processes with fake GPUs. Everything lives under one run directory.

Each portal process and agent is its own session and process group, so a fault reaches all of it (gunicorn's
workers, the worker's pool) and nothing else; an agent's jobs are sessions of their own and survive its death, as
they would on a real node. A supervisor thread restarts any process that dies without being told to (what
``restart: unless-stopped`` or systemd would do) and counts it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent  # the virtualenv's bin/, not resolved: its scripts live next to its python
sys.path.insert(0, str(ROOT / "scripts"))

import test_servers  # noqa: E402  (scripts/ is not a package; reused, not copied)

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0


@dataclass(frozen=True)
class Timings:
    """The portal's clocks for the run (docs/operations.md); the agents' grace follows the kill grace."""

    heartbeat: float = 1.0
    node_timeout: float = 10.0
    schedule_every: float = 2.0
    kill_grace: float = 3.0

    def env(self) -> dict[str, str]:
        return {
            "CORRAL_HEARTBEAT_INTERVAL": str(self.heartbeat),
            "CORRAL_NODE_TIMEOUT": str(self.node_timeout),
            "CORRAL_SCHEDULE_EVERY": str(self.schedule_every),
            "CORRAL_KILL_GRACE": str(self.kill_grace),
        }


@dataclass
class Proc:
    """One supervised process. ``mode``: ``up`` (should run), ``down`` (killed on purpose, to be restarted by
    whoever killed it) or ``stopped`` (SIGSTOPped on purpose)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    logfile: Path
    cwd: Path = ROOT
    popen: subprocess.Popen[bytes] | None = None
    mode: str = "down"
    starts: int = 0
    unexpected_exits: list[tuple[float, int]] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def start(self) -> None:
        with self.lock, open(self.logfile, "ab") as out:
            out.write(f"\n=== start {self.starts + 1} at {time.time():.3f} ===\n".encode())
            out.flush()
            self.popen = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.starts += 1
            self.mode = "up"

    def _group(self, signum: signal.Signals) -> None:
        if self.popen is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signum)

    def kill9(self) -> None:
        with self.lock:
            self.mode = "down"
            self._group(signal.SIGKILL)
            if self.popen is not None:
                self.popen.wait()

    def freeze(self) -> None:
        with self.lock:
            self.mode = "stopped"
            self._group(signal.SIGSTOP)

    def thaw(self) -> None:
        with self.lock:
            self._group(signal.SIGCONT)
            self.mode = "up"

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGCONT (a stopped process cannot act on SIGTERM), SIGTERM, then SIGKILL to the group."""
        with self.lock:
            self.mode = "down"
            if self.popen is None:
                return
            self._group(signal.SIGCONT)
            if self.alive:
                self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
            self._group(signal.SIGKILL)  # whatever it forked and left behind (pool processes, gunicorn workers)


def _pg_ready(port: int) -> bool:
    bindir = test_servers.find_pg_bindir()
    assert bindir is not None
    probe = [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-U", test_servers.PG_ROLE]
    return subprocess.run(probe, stdin=subprocess.DEVNULL).returncode == 0


class Service:
    """PostgreSQL or Redis, started once by ``scripts/test_servers.py`` and restarted here with the same argv.

    PostgreSQL is restarted once at once with ``synchronous_commit=on``: the test servers turn it off for speed,
    and then an immediate shutdown could lose commits the portal had already answered for, which this benchmark
    would count against the portal.
    """

    def __init__(self, name: str, server: test_servers.Server, url: str, cwd: Path, ready: Callable[[], bool]):
        self.name, self.server, self.url, self.cwd, self.ready = name, server, url, cwd, ready
        self.argv = [str(a) for a in server.process.args]  # type: ignore[union-attr]
        self.kwargs: dict[str, object] = {}
        self.outages: list[tuple[float, float]] = []

    def down(self, how: signal.Signals) -> None:
        self.server.process.send_signal(how)
        try:
            self.server.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.server.process.kill()
            self.server.process.wait()

    def up(self) -> None:
        popen = test_servers.spawn(self.name, self.argv, self.server.logfile, cwd=self.cwd, **self.kwargs)
        self.server = test_servers.Server(self.name, popen, self.server.logfile, self.server.stop_signal)
        test_servers.wait_until(self.server, self.ready, "ready after a restart")

    def restart(self, how: signal.Signals, pause: float, wait: Callable[[float], object]) -> tuple[float, float]:
        """Take it down with ``how``, wait ``pause`` seconds, bring it back; returns the outage window."""
        began = time.time()
        self.down(how)
        wait(pause)
        self.up()
        window = (began, time.time())
        self.outages.append(window)
        return window


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _pg_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"}


SETUP_CODE = """
import json, os
from django.contrib.auth import get_user_model
from portal.tenants.models import Membership, Quota, Tenant
spec = json.loads(os.environ["CHAOS_SETUP"])
User = get_user_model()
User.objects.create_user(spec["staff"][0], password=spec["staff"][1], is_staff=True)
for slug, cap, username, password in spec["tenants"]:
    tenant = Tenant.objects.create(slug=slug, name=slug)
    Quota.objects.create(tenant=tenant, gpu_limit=cap)
    Membership.objects.create(user=User.objects.create_user(username, password=password), tenant=tenant)
"""


class Stack:
    """Everything the run starts, and its teardown."""

    def __init__(self, run_dir: Path, timings: Timings, agents: int, gpus_per_agent: int, code: Path = ROOT) -> None:
        self.run_dir, self.timings = run_dir, timings
        self.code = code  # the tree whose portal and agent run (PYTHONPATH), this checkout unless --code
        self.logs = run_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.data = run_dir / "data"
        (self.data / "staticfiles").mkdir(parents=True, exist_ok=True)
        self.stamps = run_dir / "stamps"
        self.stamps.mkdir(mode=0o777, exist_ok=True)
        self.stamps.chmod(0o777)  # jobs may run as another user than the agent
        self.agent_names = [f"chaos-{n + 1}" for n in range(agents)]
        self.gpus_per_agent = gpus_per_agent
        self.pg: Service | None = None
        self.redis: Service | None = None
        self.procs: dict[str, Proc] = {}
        self.port = test_servers.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env: dict[str, str] = {}
        self._stop = threading.Event()
        self._supervisor: threading.Thread | None = None

    # --- start-up -----------------------------------------------------------------------------------------------
    def start_services(self) -> None:
        """PostgreSQL (restarted at once with ``synchronous_commit=on``), then Redis; each is known to the
        teardown as soon as its process exists."""
        test_servers.ensure_packages(want_chromium=False)
        root = self.run_dir / "services"
        root.mkdir(parents=True)
        root.chmod(0o755)  # the unprivileged PostgreSQL user must traverse it
        server, url = test_servers.start_postgres(root)
        self.pg = Service("postgres", server, url, root / "postgres", lambda: _pg_ready(_port(url)))
        self.pg.argv = [a.replace("synchronous_commit=off", "synchronous_commit=on") for a in self.pg.argv]
        self.pg.kwargs = {**test_servers.Unprivileged.for_postgres().popen_kwargs(), "env": _pg_env()}
        self.pg.down(signal.SIGINT)
        self.pg.up()
        server, rurl = test_servers.start_redis(root)
        self.redis = Service("redis", server, rurl, root / "redis", lambda: test_servers.redis_answers(_port(rurl)))
        keep = {k: v for k, v in os.environ.items() if not k.startswith(("CORRAL_", "DJANGO_", "CELERY_"))}
        for name in ("DATABASE_URL", "REDIS_URL", "DEBUG", "SECRET_KEY", "LOG_LEVEL"):
            keep.pop(name, None)
        self.env = {
            **keep,
            "DATABASE_URL": self.pg.url,
            "REDIS_URL": self.redis.url,
            "CORRAL_DATA_DIR": str(self.data),
            "CORRAL_PRODUCTION": "1",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "PYTHONUNBUFFERED": "1",
            **self.timings.env(),
        }
        if self.code != ROOT:  # ahead of the editable install's finder, which comes last in sys.meta_path
            self.env["PYTHONPATH"] = str(self.code)

    def manage(self, *args: str, extra_env: dict[str, str] | None = None) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=self.code,
            env={**self.env, **(extra_env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
        return done.stdout

    def set_up_database(self, setup_spec: str) -> None:
        """Migrate, create the tenants (caps), their users and a staff user, and issue every node's token."""
        self.manage("migrate", "--noinput", "-v", "0")
        self.manage("shell", "-c", SETUP_CODE, extra_env={"CHAOS_SETUP": setup_spec})
        tokens = self.run_dir / "tokens"
        tokens.mkdir(mode=0o700, exist_ok=True)
        for node in self.agent_names:
            token = self.manage("node_token", node).strip()
            path = tokens / f"{node}.token"
            path.write_text(token + "\n")
            path.chmod(0o600)

    def _proc(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.env, self.logs / f"{name}.log", cwd=self.code)
        self.procs[name] = proc
        return proc

    def start_portal(self) -> None:
        self._proc("web", [str(BIN / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{self.port}",
                           "--workers", "2", "--threads", "8", "--worker-class", "gthread",
                           "--graceful-timeout", "5", "--no-control-socket"]).start()  # fmt: skip
        self._proc("worker", [str(BIN / "celery"), "-A", "portal", "worker", "-l", "info", "--concurrency", "2",
                              "-n", "chaos@%h"]).start()  # fmt: skip
        self._proc("beat", [str(BIN / "celery"), "-A", "portal", "beat", "-l", "info",
                            "-s", str(self.data / "celerybeat-schedule")]).start()  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while not _port_open(self.port):
            if time.monotonic() > deadline or not self.procs["web"].alive:
                raise RuntimeError(f"the web server did not open port {self.port}:\n{_tail(self.procs['web'])}")
            time.sleep(0.2)

    def agent_workdir(self, node: str) -> Path:
        return self.run_dir / "agents" / node

    def start_agents(self) -> None:
        for node in self.agent_names:
            argv = [str(BIN / "corral-agent"), "--server", self.url,
                    "--token-file", str(self.run_dir / "tokens" / f"{node}.token"), "--name", node,
                    "--fake-gpus", str(self.gpus_per_agent), "--workdir", str(self.agent_workdir(node)),
                    "--grace", str(self.timings.kill_grace)]  # fmt: skip
            if os.geteuid() == 0:
                argv.append("--allow-root")  # else jobs run as `nobody`, who cannot enter the run directory
            self._proc(node, argv).start()

    # --- supervision --------------------------------------------------------------------------------------------
    def supervise(self) -> None:
        self._supervisor = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._supervisor.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            for proc in list(self.procs.values()):
                with proc.lock:
                    if proc.mode == "up" and proc.popen is not None and proc.popen.poll() is not None:
                        proc.unexpected_exits.append((time.time(), proc.popen.returncode))
                        proc.start()

    def all_up(self) -> None:
        """Make sure nothing is left stopped or down (after the chaos phase)."""
        for service in (self.pg, self.redis):
            if service is not None and service.server.process.poll() is not None:
                service.up()
        for proc in self.procs.values():
            with proc.lock:
                if proc.mode == "stopped":
                    proc.thaw()
                elif proc.mode == "down" or not proc.alive:
                    proc.start()

    # --- the end --------------------------------------------------------------------------------------------
    def job_processes(self) -> list[tuple[int, str]]:
        """Live processes (pid, working directory) inside the agents' workdirs: their jobs."""
        return processes_under(self.run_dir / "agents")

    def teardown(self) -> None:
        """Agents first (they stop their jobs), then beat, worker, web, then whatever job processes are left,
        then the servers. Safe to call twice and after a failed start."""
        self._stop.set()
        for group in ([self.procs[n] for n in self.agent_names if n in self.procs],
                      [self.procs[n] for n in ("beat", "worker", "web") if n in self.procs]):  # fmt: skip
            threads = [threading.Thread(target=p.stop) for p in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        for pid, _ in self.job_processes():
            for kill in (os.killpg, os.kill):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    kill(pid, signal.SIGKILL)
        for service in (self.redis, self.pg):
            if service is not None:
                service.server.stop()


def processes_under(directory: Path) -> list[tuple[int, str]]:
    prefix = str(directory.resolve())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and (cwd == prefix or cwd.startswith(prefix + os.sep)):
            found.append((int(entry.name), cwd))
    return found


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tail(proc: Proc, lines: int = 30) -> str:
    try:
        return "\n".join(proc.logfile.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _proc_state(pid: int) -> tuple[str, int] | None:
    """(state letter, start time in clock ticks) of ``pid``, or None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


class DeathWatch:
    """Notices within about ``POLL`` seconds when the process behind each stamp file is gone (no such pid, a
    zombie, or a pid reused by another process), so that a process killed without a last stamp gets an upper
    bound on its end far tighter than its last stamp plus the slack. File names end in the writer's pid."""

    POLL = 0.1

    def __init__(self, stamps: Path) -> None:
        self.stamps = stamps
        self.started: dict[str, int] = {}  # file -> its writer's start ticks, seen alive
        self.dead: dict[str, float] = {}  # file -> epoch seconds at which its writer was first seen gone
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="death-watch", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self._stop.set()
        self.thread.join()
        self.poll()

    def _run(self) -> None:
        while not self._stop.wait(self.POLL):
            self.poll()

    def poll(self) -> None:
        now = time.time()
        with os.scandir(self.stamps) as entries:
            names = [e.name for e in entries if e.name not in self.dead]
        for name in names:
            try:
                pid = int(name.rsplit(".", 1)[1])
            except (IndexError, ValueError):
                continue
            state = _proc_state(pid)
            alive = state is not None and state[0] != "Z" and self.started.setdefault(name, state[1]) == state[1]
            if not alive:
                self.dead[name] = now
