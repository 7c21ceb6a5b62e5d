"""Log shipping: how fast a job's output reaches the portal, end to end over HTTP, per node. Ref: #15

The stack is real: the portal in its production shape (gunicorn, gthread, 2 workers x 8 threads) on a port of
its own, and a ``corral-agent`` process with one fake GPU. Each run submits a job whose command writes
``--size-mb`` MB of log text (lines with 1- to 4-byte UTF-8 characters) as fast as ``cat`` can, then exits, so the
agent has the whole log as a backlog: the worst case, and the one issue #15 measured (50 MB took 6 min 40 s after
the exit). The bench places the job itself (one scheduling round in this process, no Celery worker) and watches
the portal's database every 20 ms. Per run it reports:

- **transfer**: from the first log byte the portal stored to the last, and the rate, MB/s (10^6 bytes). The goal
  is at least 10 MB/s per node.
- **after exit**: from when the portal recorded the task's exit (the heartbeat that reported it) to when it held
  the whole log; until then the job says "output still arriving".
- the CPU seconds the web server's processes and the agent spent per MB.

``--heartbeat-only`` measures the path older agents use instead: the log inside heartbeats (an agent without a log
shipper, run in this process; use a smaller ``--size-mb``). The portal keeps at most ``CORRAL_JOB_LOG_MAX_CHARS``
characters per job (16 Mi by default), so most of a 50 MB log is received, counted and then dropped, as in
production; ``--max-chars 0`` stores all of it.

    .venv/bin/python bench/log_shipping.py                      # SQLite (the development default), temp dir
    .venv/bin/python scripts/test_servers.py --no-chromium -- .venv/bin/python bench/log_shipping.py   # PostgreSQL
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RUN_DIR = Path(tempfile.mkdtemp(prefix="corral-logbench-"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
if not os.environ.get("DATABASE_URL"):
    os.environ["CORRAL_DATA_DIR"] = str(RUN_DIR / "data")

import django  # noqa: E402 - settings must be chosen first

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from portal.jobs.models import Job, JobTask  # noqa: E402
from portal.jobs.services import job_submit  # noqa: E402
from portal.nodes.models import Node  # noqa: E402
from portal.nodes.services import node_token_issue  # noqa: E402
from portal.scheduler.services import scheduling_round  # noqa: E402
from portal.tenants.models import Membership, Tenant  # noqa: E402

POLL_SECONDS = 0.02
START_TIMEOUT = 60.0
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
LINE = "step {:>9} épοch ✓ loss 0.2500 lr 3e-4 𝛼=0.9 throughput 1234.5 samples/s\n"


@dataclass(frozen=True)
class Run:
    size: int
    transfer: float
    after_exit: float
    web_cpu: float
    agent_cpu: float

    @property
    def rate(self) -> float:
        return self.size / self.transfer / 1e6


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait(predicate, what: str, timeout: float = START_TIMEOUT):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(POLL_SECONDS)
    return value


def _cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) used so far by ``pids`` and their children that have been reaped."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(value) for value in fields[11:15])
    return total / CLOCK_TICK


def _group(pgid: int) -> list[int]:
    """Processes of process group ``pgid`` (gunicorn's master and its workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _payload(size: int) -> Path:
    path = RUN_DIR / "payload.log"
    with path.open("wb") as out:
        written = step = 0
        while written < size:
            block = "".join(LINE.format(step + i) for i in range(1000)).encode()[: size - written]
            out.write(block)
            written += len(block)
            step += 1000
    return path


def _serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    argv = [str(BIN / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
            "--workers", "2", "--threads", "8", "--worker-class", "gthread", "--no-control-socket",
            "--timeout", "120"]  # fmt: skip
    web = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=(RUN_DIR / "web.log").open("wb"), stderr=subprocess.STDOUT,
                           start_new_session=True)  # fmt: skip

    def answers() -> bool:
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    _wait(answers, "the web server")
    return web


def _agent_process(env: dict[str, str], url: str, name: str, token: str) -> subprocess.Popen[bytes]:
    token_file = RUN_DIR / f"{name}.token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    argv = [str(BIN / "corral-agent"), "--server", url, "--token-file", str(token_file), "--name", name,
            "--fake-gpus", "1", "--workdir", str(RUN_DIR / name), "--log-level", "WARNING"]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return subprocess.Popen(argv, cwd=ROOT, env=env, stdout=(RUN_DIR / f"{name}.log").open("wb"),
                            stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def _agent_in_process(url: str, name: str, token: str, stop: threading.Event) -> threading.Thread:
    """An agent without a log shipper: the log rides in its heartbeats, as with agents before issue #15."""
    from agent.client import GpuDescriptor, PortalClient
    from agent.loop import Agent
    from agent.runner import Runner

    agent = Agent(
        PortalClient(url, lambda: token),
        Runner(RUN_DIR / name),
        hostname=name,
        address="127.0.0.1",
        gpus=[GpuDescriptor(0, f"GPU-{name}-0", "bench", 1024)],
    )
    thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
    thread.start()
    return thread


def _one_run(user: object, payload: Path, size: int, web_pids: list[int], agent_pids: list[int]) -> Run:
    job = job_submit(user=user, name="log-bench", command=f"cat {payload}", gpus=1)  # type: ignore[arg-type]
    scheduling_round()
    task = _wait(lambda: JobTask.objects.filter(job=job).first(), "the job to be placed")
    cpu_before = _cpu(web_pids), _cpu(agent_pids)
    first = exited = done = None
    deadline = time.monotonic() + 3600
    while done is None and time.monotonic() < deadline:
        task.refresh_from_db(fields=["log_received", "log_final_size", "finished_at"])
        now = time.monotonic()
        if first is None and task.log_received > 0:
            first = now
        if exited is None and task.finished_at is not None:
            exited = now
        if task.log_final_size is not None and task.log_received >= task.log_final_size:
            done = now
        time.sleep(POLL_SECONDS)
        connection.close()  # a fresh snapshot each poll (and no long read transaction on SQLite's WAL)
    if done is None or first is None or exited is None:
        raise SystemExit(f"the log did not arrive: {task.log_received} of {size} bytes")
    if task.log_received != size:
        raise SystemExit(f"the portal holds {task.log_received} bytes, the job wrote {size}")
    web_cpu, agent_cpu = (_cpu(web_pids) - cpu_before[0], _cpu(agent_pids) - cpu_before[1])
    _wait(lambda: Job.objects.get(pk=job.pk).is_terminal, "the job to finish")
    return Run(size, max(done - first, POLL_SECONDS), max(0.0, done - exited), web_cpu, agent_cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=float, default=50.0, help="log written per job, in MB (10^6 bytes)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--heartbeat-only", action="store_true", help="the log in heartbeats (older agents)")
    parser.add_argument("--max-chars", type=int, default=None, help="CORRAL_JOB_LOG_MAX_CHARS for the portal")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    if args.max_chars is not None:
        os.environ["CORRAL_JOB_LOG_MAX_CHARS"] = str(args.max_chars)
        from django.conf import settings

        settings.CORRAL_JOB_LOG_MAX_CHARS = args.max_chars
    size = int(args.size_mb * 1e6)

    call_command("migrate", verbosity=0)
    user = get_user_model().objects.create_user(f"bench-{os.getpid()}", password="x")
    tenant = Tenant.objects.create(slug=f"bench-{os.getpid()}", name="bench")
    Membership.objects.create(user=user, tenant=tenant)
    name = f"bench-{'old' if args.heartbeat_only else 'new'}-{os.getpid()}"
    Node.objects.exclude(name=name).update(state="down")  # only the bench's node takes the job
    _, token = node_token_issue(name=name)
    payload = _payload(size)

    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    web = _serve(env, port)
    stop = threading.Event()
    agent: subprocess.Popen[bytes] | None = None
    try:
        if args.heartbeat_only:
            _agent_in_process(url, name, token, stop)
            agent_pids = [os.getpid()]
        else:
            agent = _agent_process(env, url, name, token)
            agent_pids = [agent.pid]
        _wait(lambda: Node.objects.filter(name=name, registered_at__isnull=False).exists(), "the agent to register")
        web_pids = _group(web.pid)
        runs = [_one_run(user, payload, size, web_pids, agent_pids) for _ in range(args.repeat)]
    finally:
        stop.set()
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(30)
        os.killpg(web.pid, signal.SIGTERM)
        web.wait(30)

    how = "heartbeats (older agents)" if args.heartbeat_only else "POST /api/v1/agent/logs/ (log shipper)"
    database = connection.vendor
    print(f"{args.size_mb:g} MB per job through {how}, {database}, {len(runs)} runs:")
    rows = [
        (f"{r.rate:.1f}", f"{r.transfer:.2f}", f"{r.after_exit:.2f}", f"{r.web_cpu / (r.size / 1e6) * 1000:.0f}",
         f"{r.agent_cpu / (r.size / 1e6) * 1000:.0f}")
        for r in runs
    ]  # fmt: skip
    header = ("MB/s", "transfer s", "after exit s", "web CPU ms/MB", "agent CPU ms/MB")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        print("  ".join(f"{h:>15}" for h in header))
        for row in rows:
            print("  ".join(f"{v:>15}" for v in row))
    print(f"median: {statistics.median(r.rate for r in runs):.1f} MB/s, "
          f"{statistics.median(r.after_exit for r in runs):.2f} s after exit")  # fmt: skip
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; run directory {RUN_DIR}")


if __name__ == "__main__":
    main()
