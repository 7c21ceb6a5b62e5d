#!/usr/bin/env python3
"""Run a command against throw-away PostgreSQL and Redis servers on loopback, then tear them down.

    python scripts/test_servers.py -- pytest -x        # what `make test` does (via a make target)
    python scripts/test_servers.py                     # start them, print the exports, wait for Ctrl-C

Both servers are started from the binaries on PATH (or /usr/lib/postgresql/*/bin), each on a free loopback port,
with all their state in one temporary directory that is removed afterwards. When a binary is missing and we run as
root, the Debian package is installed first (`postgresql`, `redis-server`, and `chromium` for the browser tests).

The command sees DATABASE_URL, REDIS_URL and CORRAL_DATA_DIR (a scratch directory, so tests never write into the
checkout's var/). Its exit status is ours; the servers are stopped on success, failure, Ctrl-C and SIGTERM alike.

PostgreSQL refuses to run as root, so as root initdb/postgres run as the `postgres` user the Debian package creates
(or a system user created here). Trust authentication on loopback only; the superuser role is `corral`, so
pytest-django can create and drop its test database.

Standard library only: it must run before anything is installed, and from any Python 3.11.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PG_ROLE = "corral"
PG_DATABASE = "corral"
PG_SYSTEM_USER_FALLBACK = "corral-pg"  # created only when running as root and no `postgres` user exists
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0

# Debian package that provides each binary we may need.
PACKAGES = {"postgres": "postgresql", "redis-server": "redis-server", "chromium": "chromium"}
CHROMIUM = "/usr/bin/chromium"


def log(message: str) -> None:
    print(f"[test-services] {message}", file=sys.stderr, flush=True)


# --- Finding (or installing) the binaries ----------------------------------------------------------------------


def find_pg_bindir() -> Path | None:
    """The directory holding `initdb` and `postgres`: PATH first, then Debian's versioned directories."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name.split(".")[0]), reverse=True
    )
    for candidate in candidates:
        if (Path(candidate) / "initdb").exists() and (Path(candidate) / "postgres").exists():
            return Path(candidate)
    return None


def missing_packages(*, want_chromium: bool) -> list[str]:
    missing = []
    if find_pg_bindir() is None:
        missing.append(PACKAGES["postgres"])
    if shutil.which("redis-server") is None:
        missing.append(PACKAGES["redis-server"])
    if want_chromium and not Path(CHROMIUM).exists():
        missing.append(PACKAGES["chromium"])
    return missing


def ensure_packages(*, want_chromium: bool) -> None:
    missing = missing_packages(want_chromium=want_chromium)
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        needed = [p for p in missing if p != PACKAGES["chromium"]]
        if needed:
            raise SystemExit(
                f"[test-services] missing: {' '.join(needed)}. Install them (apt-get install {' '.join(needed)}) "
                "or run as root on Debian/Ubuntu so this script can."
            )
        log(f"{CHROMIUM} is missing and we are not root: the browser tests will be skipped")
        return
    log(f"installing {' '.join(missing)} with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
    ):
        if subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode != 0:
            raise SystemExit(f"[test-services] `{' '.join(argv)}` failed; install {' '.join(missing)} by hand")


# --- Running the servers ----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Unprivileged:
    """Who the PostgreSQL processes run as: ourselves, or (as root) an unprivileged system user."""

    uid: int | None = None
    gid: int | None = None
    name: str | None = None

    @classmethod
    def for_postgres(cls) -> Unprivileged:
        if os.geteuid() != 0:
            return cls()
        for name in ("postgres", PG_SYSTEM_USER_FALLBACK):
            with contextlib.suppress(KeyError):
                entry = pwd.getpwnam(name)
                return cls(entry.pw_uid, entry.pw_gid, name)
        log(f"creating system user {PG_SYSTEM_USER_FALLBACK} to run PostgreSQL (it refuses to run as root)")
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PG_SYSTEM_USER_FALLBACK],
            check=True,
        )
        entry = pwd.getpwnam(PG_SYSTEM_USER_FALLBACK)
        return cls(entry.pw_uid, entry.pw_gid, PG_SYSTEM_USER_FALLBACK)

    def give(self, path: Path) -> None:
        if self.uid is not None:
            os.chown(path, self.uid, self.gid)

    def popen_kwargs(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.gid, "extra_groups": []}


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    logfile: Path
    stop_signal: signal.Signals

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.process.poll() is not None:
            return
        self.process.send_signal(self.stop_signal)
        try:
            self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            log(f"{self.name} did not stop within {STOP_TIMEOUT:.0f}s, killing it")
            self.process.kill()
            self.process.wait()


@dataclass
class Services:
    root: Path
    servers: list[Server] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def stop(self) -> None:
        for server in reversed(self.servers):
            server.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def spawn(name: str, argv: list[str], logfile: Path, *, cwd: Path, **kwargs: object) -> subprocess.Popen[bytes]:
    with open(logfile, "ab") as out:
        # Own session: a Ctrl-C in the terminal reaches the command under test, not the servers, which we stop in
        # order afterwards.
        return subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            **kwargs,
        )


def redis_answers(port: int) -> bool:
    """Whether the Redis on loopback ``port`` answers PING (also used by bench/chaos_stack.py after a restart)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def wait_until(server: Server, ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited with {server.process.returncode}:\n{server.tail()}")
        if ready():
            return
        time.sleep(0.1)
    raise RuntimeError(f"{server.name} not {what} after {START_TIMEOUT:.0f}s:\n{server.tail()}")


def start_postgres(root: Path) -> tuple[Server, str]:
    bindir = find_pg_bindir()
    assert bindir is not None, "ensure_packages() should have installed PostgreSQL"
    runas = Unprivileged.for_postgres()
    pgroot = root / "postgres"
    pgroot.mkdir()
    runas.give(pgroot)
    data, sockets, logfile = pgroot / "data", pgroot / "sockets", pgroot / "postgres.log"
    kwargs = {**runas.popen_kwargs(), "env": {"PATH": os.environ.get("PATH", ""), "LC_ALL": "C.UTF-8"}}

    initdb = subprocess.run(
        [str(bindir / "initdb"), "-D", str(data), "-U", PG_ROLE, "--auth=trust", "--encoding=UTF8", "--no-sync"],
        cwd=pgroot,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        **kwargs,
    )
    if initdb.returncode != 0:
        raise RuntimeError(f"initdb failed ({initdb.returncode}):\n{initdb.stdout}\n{initdb.stderr}")
    (sockets).mkdir()
    runas.give(sockets)

    port = free_port()
    argv = [
        str(bindir / "postgres"),
        "-D", str(data),
        "-h", "127.0.0.1",
        "-p", str(port),
        "-k", str(sockets),
        # A throw-away cluster: durability buys nothing, and these make the suite's many TRUNCATEs fast.
        "-c", "fsync=off",
        "-c", "synchronous_commit=off",
        "-c", "full_page_writes=off",
        "-c", "max_connections=200",
    ]  # fmt: skip
    server = Server("postgres", spawn("postgres", argv, logfile, cwd=pgroot, **kwargs), logfile, signal.SIGINT)
    # SIGINT is PostgreSQL's "fast shutdown": it disconnects clients instead of waiting for them.

    def accepts_connections() -> bool:
        probe = subprocess.run(
            [str(bindir / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port), "-U", PG_ROLE, "-d", "postgres"],
            stdin=subprocess.DEVNULL,
        )
        return probe.returncode == 0

    wait_until(server, accepts_connections, "accepting connections")
    created = subprocess.run(
        [str(bindir / "psql"), "-h", "127.0.0.1", "-p", str(port), "-U", PG_ROLE, "-d", "postgres", "-q",
         "-v", "ON_ERROR_STOP=1", "-c", f"CREATE DATABASE {PG_DATABASE}"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )  # fmt: skip
    if created.returncode != 0:
        raise RuntimeError(f"CREATE DATABASE failed:\n{created.stderr}")
    return server, f"postgres://{PG_ROLE}@127.0.0.1:{port}/{PG_DATABASE}"


def start_redis(root: Path) -> tuple[Server, str]:
    rroot = root / "redis"
    rroot.mkdir()
    logfile = rroot / "redis.log"
    port = free_port()
    argv = [
        "redis-server",
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(rroot),
        "--daemonize", "no",
    ]  # fmt: skip
    server = Server("redis", spawn("redis", argv, logfile, cwd=rroot), logfile, signal.SIGTERM)

    wait_until(server, lambda: redis_answers(port), "answering PING")
    return server, f"redis://127.0.0.1:{port}/0"


@contextlib.contextmanager
def services() -> Iterator[Services]:
    # The directory must be traversable by the unprivileged PostgreSQL user; everything inside is private.
    root = Path(tempfile.mkdtemp(prefix="corral-test-services-"))
    root.chmod(0o755)
    started = Services(root)
    try:
        pg, database_url = start_postgres(root)
        started.servers.append(pg)
        redis, redis_url = start_redis(root)
        started.servers.append(redis)
        data_dir = root / "data"
        (data_dir / "staticfiles").mkdir(parents=True)  # STATIC_ROOT: whitenoise warns on every request without it
        started.env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "CORRAL_DATA_DIR": str(data_dir)}
        log(f"PostgreSQL at {database_url}, Redis at {redis_url}")
        yield started
    finally:
        # A second Ctrl-C must not leave a server behind half-way through the teardown.
        previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
        started.stop()
        log("PostgreSQL and Redis stopped")
        for s, handler in previous.items():
            signal.signal(s, handler)


# --- Running the command ----------------------------------------------------------------------------------------


class Terminated(Exception):
    """SIGTERM arrived while no command was running (start-up, or the interactive mode)."""


def raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def run_command(argv: list[str], env: dict[str, str]) -> int:
    """Run `argv` in our process group (so the terminal's Ctrl-C reaches it directly) and return its status."""
    child = subprocess.Popen(argv, env={**os.environ, **env})

    def forward(signum: int, _frame: object) -> None:
        # Ctrl-C already reached the child through the terminal; SIGTERM (a CI cancel) did not: pass it on.
        if signum == signal.SIGTERM and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        status = child.wait()
        return 128 - status if status < 0 else status  # killed by a signal: the shell's convention
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def wait_forever(env: dict[str, str]) -> int:
    for key, value in env.items():
        print(f"export {key}={value}")
    log("running; press Ctrl-C to stop")
    with contextlib.suppress(KeyboardInterrupt, Terminated):
        signal.pause()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-chromium", action="store_true", help="do not install chromium when it is missing")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="command to run (after --)")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    ensure_packages(want_chromium=not args.no_chromium)
    # SIGTERM during start-up must still tear down what was started: turn it into an exception.
    signal.signal(signal.SIGTERM, raise_terminated)
    try:
        with services() as started:
            return run_command(command, started.env) if command else wait_forever(started.env)
    except (Terminated, KeyboardInterrupt):
        log("interrupted")
        return 130
    except RuntimeError as exc:
        log(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
