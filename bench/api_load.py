"""Load benchmark of the control plane (issue #16): submissions/s, job arrays, and rounds, forecasts and job lists
at 50,000 pending jobs on 10,000 simulated GPUs, on the production shape.

    .venv/bin/python bench/api_load.py --smoke                     # ~1.5 min: 3 s levels, 1,000 pending, 800 GPUs
    .venv/bin/python bench/api_load.py --snapshot                  # ~9 min: 60 s levels, 50k pending, 10k GPUs
    .venv/bin/python bench/api_load.py --phases submit --web 2 --workers 2     # scale-out: two web servers
    git archive HEAD | tar -x -C /tmp/head && .venv/bin/python bench/api_load.py --code /tmp/head   # a commit

What runs (all under one temporary directory, removed at the end unless ``--keep``): PostgreSQL and Redis started
by ``scripts/test_servers.py``'s functions through ``bench/chaos_stack.py`` (PostgreSQL with
``synchronous_commit=on``), ``--web`` gunicorn servers (``--gunicorn-workers 3 --gunicorn-threads 8``, gthread,
each on its own port), ``--workers`` Celery workers (``--concurrency 2`` each) and beat, with
``CORRAL_PRODUCTION=1`` and production clocks except ``CORRAL_NODE_TIMEOUT``, set so large that simulated nodes
(database rows, no agents) are never marked down. ``--env KEY=VALUE`` adds settings (e.g. ``CORRAL_POLICY``).
A tenant with no limits, a member and a staff user get their API tokens through ``POST /api/v1/auth/token/``.

The load comes from ``bench/api_load_gen.py`` in its own process: closed-loop keep-alive HTTP/1.1 connections on
raw asyncio sockets, spread round-robin over the web servers. It is first timed against a null server
(``calibration``): its ceiling there is far above every goal, and its own CPU is reported with every level.

Phases (``--phases``, in this order):

- ``submit``: ``POST /api/v1/jobs/`` ``{"command": "true", "gpus": 1}`` at each of ``--levels`` concurrent
  connections for ``--seconds`` each, on a small cluster (``--submit-gpus``, two simulated 8-GPU nodes, like the
  issue's two agents): requests/s, p50/p95/p99, answers other than 201, CPU-seconds of the worker(s), web
  server(s) and PostgreSQL (every process of each one's session, from /proc, reaped children included), the
  rounds written meanwhile, and ``LLEN celery`` after the level. Each level starts from no jobs and an empty queue
  (``--no-reset`` keeps them).
- ``array``: ``"array": "0-9999"`` (``--array-size``) on ``POST /api/v1/jobs/``, ``--array-reps`` times: accept
  time and tasks/s. "not available" when the API refuses the field (400) or ignores it (201 without an array).
- ``scale``: seeds ``--gpus`` GPUs (8 per node, racks of 32 nodes), ``--busy`` of them held by running jobs,
  ``--pending`` pending jobs and ``--finished`` finished ones over ``--tenants`` tenants (ORM bulk inserts in a
  ``manage.py shell``: ``bench/api_load_django.py``); runs one round to fill the free GPUs, then for ``--seconds``
  lets the worker run whatever rounds it runs, then times ``--direct-rounds`` rounds run directly; reads every
  ``SchedulerRound.duration_ms`` since; times ``start_forecast_refresh()`` 3 times against
  ``CORRAL_FORECAST_EVERY``; times pages of ``GET /api/v1/jobs/`` (unfiltered, ``?state=pending``,
  ``?mine=true``, ``?tenant=<slug>``, as staff and as a member) at concurrency 1 for ``--list-seconds`` each; and
  measures the worker's CPU over ``--idle-seconds`` after ``--idle-wait`` seconds with nothing changing. When the
  round or forecast goal is missed (or ``--profile always``), one round and one refresh are run under cProfile,
  with the time spent in SQL and the costliest statements.

Every figure is printed as its phase ends, with PASS/MISS next to its goal; the whole report goes to
``--out`` (default ``bench/out/api_load/<time>/``) as ``report.json`` and ``report.md``. Exit status 0 when the
run completed (goals missed or not), 2 when the stack could not be set up, 130 on Ctrl-C or SIGTERM; every
process it started is stopped in every case.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import api_load_report as report_mod  # noqa: E402  (siblings: bench/ is not a package)
import redis  # noqa: E402
import test_servers  # noqa: E402  (scripts/ is not a package either)
from chaos_stack import BIN, ROOT, Proc, Stack, Timings, _port_open, _tail, processes_under  # noqa: E402

BENCH = Path(__file__).resolve().parent
GENERATOR = BENCH / "api_load_gen.py"
MARKER = "@@API_LOAD@@"
READY_TIMEOUT = 90.0
#: Large enough that no simulated node is ever marked down (about three years).
NODE_TIMEOUT = 1e8
CLK_TCK = os.sysconf("SC_CLK_TCK")
TENANT, MEMBER, STAFF = "bench", ("bench-user", "bench-user-pw"), ("bench-staff", "bench-staff-pw")


class Interrupted(Exception):
    """SIGTERM: tear down and leave."""


def _interrupt(_signum: int, _frame: object) -> None:
    raise Interrupted


def note(message: str) -> None:
    print(f"[api-load {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- arguments --------------------------------------------------------------------------------------------------------
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="quick check: 3 s levels, 1,000 pending, 800 GPUs")
    p.add_argument("--phases", default="submit,array,scale", help="comma-separated: submit, array, scale")
    p.add_argument("--seconds", type=float, default=None, help="seconds per submit level and round window (60)")
    p.add_argument("--levels", default="1,8,32,64", help="submission concurrencies (default 1,8,32,64)")
    p.add_argument("--no-reset", action="store_true", help="keep jobs and the queue from one level to the next")
    p.add_argument("--submit-gpus", type=int, default=16, help="simulated GPUs during submit/array (16)")
    p.add_argument("--array-size", type=int, default=None, help="tasks per array (10000)")
    p.add_argument("--array-reps", type=int, default=None, help="arrays submitted (3)")
    p.add_argument("--pending", type=int, default=None, help="pending jobs in the scale phase (50000)")
    p.add_argument("--gpus", type=int, default=None, help="simulated GPUs in the scale phase (10000)")
    p.add_argument("--busy", type=int, default=None, help="GPUs held by running jobs when seeded (half of --gpus)")
    p.add_argument("--finished", type=int, default=None, help="finished jobs of history (3000)")
    p.add_argument("--tenants", type=int, default=4, help="tenants the scale phase's jobs belong to (4)")
    p.add_argument("--users-per-tenant", type=int, default=8, help="users per tenant (8)")
    p.add_argument("--direct-rounds", type=int, default=None, help="rounds timed directly after the window (10)")
    p.add_argument("--list-seconds", type=float, default=None, help="seconds per job-list variant (10)")
    p.add_argument("--idle-wait", type=float, default=None, help="seconds with nothing changing before (10)")
    p.add_argument("--idle-seconds", type=float, default=None, help="seconds the idle worker is measured (30)")
    p.add_argument("--profile", choices=("auto", "always", "never"), default="auto",
                   help="cProfile a round and a forecast: when a goal is missed (auto), always or never")  # fmt: skip
    p.add_argument("--web", type=int, default=1, help="gunicorn servers, each on its own port (1)")
    p.add_argument("--workers", type=int, default=1, help="Celery workers (1)")
    p.add_argument("--gunicorn-workers", type=int, default=3, help="gunicorn --workers per server (3)")
    p.add_argument("--gunicorn-threads", type=int, default=8, help="gunicorn --threads (8)")
    p.add_argument("--gunicorn-class", default="gthread", help="gunicorn --worker-class (gthread)")
    p.add_argument("--concurrency", type=int, default=2, help="Celery worker --concurrency (2)")
    p.add_argument("--celery-loglevel", default="info", help="Celery -l (info, as docker-compose.yml)")
    p.add_argument("--schedule-every", type=float, default=5.0, help="CORRAL_SCHEDULE_EVERY (5, the default)")
    p.add_argument("--env", action="append", default=[], metavar="KEY=VALUE", help="extra setting for the stack")
    p.add_argument("--out", type=Path, default=None, help="report directory (bench/out/api_load/<time>/)")
    p.add_argument("--code", type=Path, default=ROOT, help="run the portal of this tree (default: this checkout)")
    p.add_argument("--snapshot", action="store_true",
                   help="copy --code's working tree (tracked and untracked, not ignored) into the run directory at"
                        " the start and run that copy: others' edits during the run do not reach it")  # fmt: skip
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs) for debugging")
    args = p.parse_args(argv)
    smoke = args.smoke
    defaults = {
        "seconds": 3.0 if smoke else 60.0,
        "array_size": 1000 if smoke else 10_000,
        "array_reps": 1 if smoke else 3,
        "pending": 1000 if smoke else 50_000,
        "gpus": 800 if smoke else 10_000,
        "finished": 300 if smoke else 3000,
        "direct_rounds": 2 if smoke else 10,
        "list_seconds": 2.0 if smoke else 10.0,
        "idle_wait": 2.0 if smoke else 10.0,
        "idle_seconds": 5.0 if smoke else 30.0,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.busy is None:
        args.busy = args.gpus // 2
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if unknown := set(args.phases) - {"submit", "array", "scale"}:
        p.error(f"--phases: unknown {', '.join(sorted(unknown))}")
    args.levels = [int(x) for x in args.levels.split(",") if x.strip()]
    if args.web < 1 or args.workers < 1 or min(args.levels or [0]) < 1 or args.seconds <= 0:
        p.error("--web, --workers, --levels and --seconds must be positive")
    if args.busy > args.gpus:
        p.error("--busy cannot exceed --gpus")
    for item in args.env:
        if "=" not in item:
            p.error(f"--env {item}: expected KEY=VALUE")
    args.code = args.code.resolve()
    if not (args.code / "manage.py").exists():
        p.error(f"--code {args.code}: no manage.py there")
    if args.out is None:
        args.out = ROOT / "bench" / "out" / "api_load" / time.strftime("%Y%m%d-%H%M%S")
    return args


# --- the stack --------------------------------------------------------------------------------------------------------
class LoadStack(Stack):
    """chaos_stack's Stack without agents: ``webs`` gunicorn servers, ``workers`` Celery workers and beat."""

    def __init__(self, run_dir: Path, args: argparse.Namespace) -> None:
        timings = Timings(heartbeat=2.0, node_timeout=NODE_TIMEOUT, schedule_every=args.schedule_every,
                          kill_grace=10.0)  # fmt: skip
        super().__init__(run_dir, timings, agents=0, gpus_per_agent=0, code=args.code)
        self.args = args
        self.ports = [test_servers.free_port() for _ in range(args.web)]
        self.extra_env = dict(item.split("=", 1) for item in args.env)

    @property
    def targets(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.ports]

    def webs(self) -> list[Proc]:
        return [p for n, p in self.procs.items() if n.startswith("web-")]

    def workers(self) -> list[Proc]:
        return [p for n, p in self.procs.items() if n.startswith("worker-")]

    def start_services(self) -> None:
        super().start_services()
        self.env.update(self.extra_env)

    def start_portal(self) -> None:
        a = self.args
        for i, port in enumerate(self.ports):
            self._proc(f"web-{i + 1}", [str(BIN / "gunicorn"), "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
                                        "--workers", str(a.gunicorn_workers), "--threads", str(a.gunicorn_threads),
                                        "--worker-class", a.gunicorn_class, "--graceful-timeout", "5",
                                        "--no-control-socket"]).start()  # fmt: skip
        for i in range(a.workers):
            argv = [str(BIN / "celery"), "-A", "portal", "worker", "-l", a.celery_loglevel,
                    "--concurrency", str(a.concurrency), "-n", f"bench{i + 1}@%h"]  # fmt: skip
            self._proc(f"worker-{i + 1}", argv).start()
        self._proc("beat", [str(BIN / "celery"), "-A", "portal", "beat", "-l", "info",
                            "-s", str(self.data / "celerybeat-schedule")]).start()  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT
        for proc, port in zip(self.webs(), self.ports, strict=True):
            while not _port_open(port):
                if time.monotonic() > deadline or not proc.alive:
                    raise RuntimeError(f"{proc.name} did not open port {port}:\n{_tail(proc)}")
                time.sleep(0.2)
        for proc in self.workers():
            while "ready." not in proc.logfile.read_text(errors="replace"):
                if time.monotonic() > deadline or not proc.alive:
                    raise RuntimeError(f"{proc.name} is not ready:\n{_tail(proc)}")
                time.sleep(0.2)

    def teardown(self) -> None:
        """Beat first (no new tasks), then workers and web servers together, then the servers (chaos_stack)."""
        self._stop.set()
        groups = [[p for n, p in self.procs.items() if n == "beat"], [p for n, p in self.procs.items() if n != "beat"]]
        for group in groups:
            threads = [threading.Thread(target=p.stop) for p in group]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        super().teardown()
        # A server interrupted between its start and its registration (Ctrl-C during start-up) is known only by
        # its working directory, inside the run directory.
        for pid, _ in processes_under(self.run_dir):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def django(self, op: str, spec: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run one operation of ``bench/api_load_django.py`` in a ``manage.py shell`` with the stack's env."""
        code = f"import sys; sys.path.insert(0, {str(BENCH)!r}); import api_load_django; api_load_django.main()"
        out = self.manage("shell", "-c", code, extra_env={"API_LOAD_OP": op, "API_LOAD_SPEC": json.dumps(spec or {})})
        for line in reversed(out.splitlines()):
            if line.startswith(MARKER):
                parsed: dict[str, Any] = json.loads(line[len(MARKER) :])
                return parsed
        raise RuntimeError(f"{op}: no answer in\n{out[-2000:]}")

    # --- measuring ---------------------------------------------------------------------------------------------------
    def cpu_seconds(self) -> dict[str, float]:
        """CPU-seconds so far of every process in each part's session (reaped children included)."""
        sessions: dict[str, list[int]] = {
            "worker": [p.popen.pid for p in self.workers() if p.popen],
            "web": [p.popen.pid for p in self.webs() if p.popen],
            "beat": [p.popen.pid for p in self.procs.values() if p.name == "beat" and p.popen],
            "postgres": [self.pg.server.process.pid] if self.pg else [],
            "redis": [self.redis.server.process.pid] if self.redis else [],
        }
        owner = {sid: part for part, sids in sessions.items() for sid in sids}
        totals = dict.fromkeys(sessions, 0.0)
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            part = owner.get(int(fields[3]))  # field 6 of stat, the session id
            if part is not None:
                totals[part] += sum(int(f) for f in fields[11:15]) / CLK_TCK  # utime, stime, cutime, cstime
        totals["machine"] = machine_busy_seconds()
        return totals

    def redis_client(self) -> redis.Redis:
        assert self.redis is not None
        return redis.Redis.from_url(self.redis.url)


def machine_busy_seconds() -> float:
    """CPU-seconds every core of the machine has spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / CLK_TCK


def cpu_delta(before: dict[str, float], after: dict[str, float], *, generator: float = 0.0) -> dict[str, float]:
    """CPU-seconds of each part between two readings, and ``others``: what the rest of the machine used (this
    benchmark's own control process, and whatever else runs here: another test suite disturbs the figures)."""
    delta = {k: round(after[k] - before[k], 2) for k in before}
    parts = sum(v for k, v in delta.items() if k != "machine")
    delta["others"] = round(max(0.0, delta["machine"] - parts - generator), 2)
    return delta


# --- the load generator -----------------------------------------------------------------------------------------------
_children: list[subprocess.Popen[bytes]] = []  # what must die with us: the generator, the null server


def generate(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``bench/api_load_gen.py`` in its own process with ``spec``; its result."""
    child = subprocess.Popen([sys.executable, str(GENERATOR)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             start_new_session=True)  # fmt: skip
    _children.append(child)
    try:
        out, _ = child.communicate(json.dumps(spec).encode(), timeout=spec["seconds"] + spec.get("timeout", 30) + 60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        _children.remove(child)
    if child.returncode != 0:
        raise RuntimeError(f"the load generator exited with {child.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


def load_spec(stack: LoadStack, *, method: str, path: str, token: str, body: Any, concurrency: int, seconds: float,
              targets: list[tuple[str, int]] | None = None) -> dict[str, Any]:  # fmt: skip
    headers = {"Authorization": f"Token {token}", "Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    return {
        "targets": targets or stack.targets,
        "method": method,
        "path": path,
        "headers": headers,
        "body": "" if body is None else json.dumps(body),
        "concurrency": concurrency,
        "seconds": seconds,
        "timeout": 60,
    }


def calibrate(seconds: float) -> dict[str, Any]:
    """The generator against a null server (its own process): how fast it can go, and at what CPU."""
    port = test_servers.free_port()
    server = subprocess.Popen([sys.executable, str(GENERATOR), "--null-server", str(port)], stdout=subprocess.PIPE,
                              start_new_session=True)  # fmt: skip
    _children.append(server)
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "listening"
        spec = {"targets": [("127.0.0.1", port)], "method": "POST", "path": "/api/v1/jobs/",
                "headers": {"Content-Type": "application/json"}, "body": '{"command": "true", "gpus": 1}',
                "concurrency": 32, "seconds": seconds}  # fmt: skip
        result = generate(spec)
    finally:
        server.kill()
        server.wait()
        _children.remove(server)
    return {
        "concurrency": 32,
        "rate_per_s": result["rate_per_s"],
        "latency_ms": result["latency_ms"],
        "generator_cpu_percent": round(100 * result["generator_cpu_s"] / result["elapsed_s"], 1),
    }


def kill_children() -> None:
    for child in list(_children):
        with contextlib.suppress(ProcessLookupError):
            child.kill()
        child.wait()
        _children.remove(child)


# --- plain HTTP calls -------------------------------------------------------------------------------------------------
def call(port: int, method: str, path: str, body: Any = None, token: str | None = None,
         timeout: float = 300) -> tuple[int, Any]:  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Token {token}"
    payload = None if body is None else json.dumps(body).encode()
    if payload is not None:
        headers["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=payload, headers=headers)
        response = conn.getresponse()
        raw = response.read()
    finally:
        conn.close()
    try:
        return response.status, json.loads(raw)
    except ValueError:
        return response.status, raw.decode(errors="replace")


def obtain_token(port: int, username: str, password: str) -> str:
    status, body = call(port, "POST", "/api/v1/auth/token/", {"username": username, "password": password})
    if status != 200:
        raise RuntimeError(f"token for {username}: {status} {body}")
    return str(body["token"])


# --- phases -----------------------------------------------------------------------------------------------------------
def fresh_start(stack: LoadStack) -> None:
    """No jobs and an empty Celery queue."""
    stack.django("reset")
    stack.redis_client().delete("celery")


def round_stats(stack: LoadStack, since: float, until: float) -> dict[str, Any]:
    rows = stack.django("rounds", {"since": since, "until": until})["rounds"]
    ms = [r["ms"] for r in rows]
    return {
        "count": len(rows),
        "p50_ms": report_mod.percentile(ms, 50) if ms else None,
        "max_ms": max(ms) if ms else None,
        "started": sum(r["started"] for r in rows),
    }


def submit_phase(
    stack: LoadStack, args: argparse.Namespace, token: str, profiles: dict[str, Any]
) -> list[dict[str, Any]]:
    levels = []
    for level in args.levels:
        if not args.no_reset:
            fresh_start(stack)
            time.sleep(1.0)
        spec = load_spec(stack, method="POST", path="/api/v1/jobs/", token=token,
                         body={"command": "true", "gpus": 1}, concurrency=level, seconds=args.seconds)  # fmt: skip
        before, since = stack.cpu_seconds(), time.time()
        result = generate(spec)
        after, until = stack.cpu_seconds(), time.time()
        queue = stack.redis_client().llen("celery")
        entry = {
            "concurrency": level,
            "load": result,
            "cpu_s": cpu_delta(before, after, generator=result["generator_cpu_s"]),
            "queue_after": queue,
            "rounds": round_stats(stack, since, until),
        }
        levels.append(entry)
        for row in report_mod.submit_rows([entry]):
            note(f"{row.figure}: {row.value} {row.verdict}")
        if result["bodies"]:
            note(f"  first answers other than 2xx: {result['bodies'][:2]}")
    judged = [lv for lv in levels if lv["concurrency"] == report_mod.SUBMIT_LEVEL]
    missed = any(not report_mod.submit_ok(lv) for lv in judged)
    if args.profile == "always" or (args.profile == "auto" and missed):
        fresh_start(stack)
        note("profiling 200 submissions through Django in one process (no gunicorn)")
        profiles["submit"] = stack.django("profile", {"kind": "submit", "token": token, "count": 200})
        print(report_mod.profile_text(profiles["submit"]), flush=True)
    if not args.no_reset:
        fresh_start(stack)
    return levels


ARRAY_KEYS = ("array", "array_spec", "array_size", "array_tasks", "tasks_count", "task_count")


def array_phase(stack: LoadStack, args: argparse.Namespace, token: str) -> dict[str, Any]:
    size = args.array_size
    spec = f"0-{size - 1}"
    out: dict[str, Any] = {"size": size, "spec": spec, "reps": [], "available": False}
    for rep in range(args.array_reps):
        fresh_start(stack)
        time.sleep(1.0)
        began = time.perf_counter()
        status, body = call(stack.ports[0], "POST", "/api/v1/jobs/",
                            {"command": "true", "gpus": 1, "array": spec}, token)  # fmt: skip
        took = time.perf_counter() - began
        if status == 400:
            out["why"] = f"400: {json.dumps(body)[:300]}"
            break
        if status != 201:
            out["why"] = f"{status}: {str(body)[:300]}"
            break
        found = {k: body[k] for k in ARRAY_KEYS if isinstance(body, dict) and body.get(k) not in (None, "", 0)}
        if not found:
            out["why"] = "201 without any array in the answer: the field was ignored"
            break
        counts = stack.django("counts")
        tasks = found["task_count"] if isinstance(found.get("task_count"), int) else size
        out["available"] = True
        out["reps"].append({"seconds": round(took, 4), "tasks": tasks, "answer_array": found,
                            "jobs_in_db": counts["total"]})  # fmt: skip
        note(f"array {rep + 1}: {tasks:,} tasks accepted in {took:.3f} s ({tasks / took:,.0f}/s); {found}")
    for row in report_mod.array_rows(out):
        note(f"{row.figure}: {row.value} {row.verdict}")
    fresh_start(stack)
    return out


def scale_phase(stack: LoadStack, args: argparse.Namespace, tokens: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    note(f"seeding {args.gpus:,} GPUs ({args.busy:,} busy), {args.pending:,} pending, {args.finished:,} finished")
    out["seed"] = stack.django("seed_scale", {
        "gpus": args.gpus, "gpus_per_node": 8, "busy": args.busy, "pending": args.pending, "finished": args.finished,
        "tenants": args.tenants, "users_per_tenant": args.users_per_tenant, "tenant": TENANT, "member": MEMBER[0],
        "staff": STAFF[0],
    })  # fmt: skip
    stack.redis_client().delete("celery")
    note(f"seeded in {out['seed']['seconds']} s: {out['seed']}")
    fill = stack.django("time_rounds", {"times": 1})["rounds"][0]
    out["fill_round"] = fill
    note(f"first round: {fill['seconds']:.2f} s, {fill['started']} started, {fill['pending']} pending")

    window_start = time.time()
    before = stack.cpu_seconds()
    time.sleep(args.seconds)
    after = stack.cpu_seconds()
    direct_start = time.time()
    direct = stack.django("time_rounds", {"times": args.direct_rounds})["rounds"]
    rows = stack.django("rounds", {"since": window_start})["rounds"]
    out["rounds"] = rows
    out["rounds_in_window"] = sum(1 for r in rows if r["at"] < direct_start)
    out["direct_rounds"] = direct
    out["window_s"] = direct_start - window_start
    out["window_worker_cpu_percent"] = round(100 * (after["worker"] - before["worker"]) / out["window_s"], 1)
    out["window_cpu_s"] = cpu_delta(before, after)
    out["pending_in_rounds"] = rows[-1]["pending"] if rows else None
    note(f"{len(rows)} rounds; ms: {[round(r['ms']) for r in rows]}")

    note("timing the start-forecast refresh 3 times")
    out["forecast"] = stack.django("time_forecasts", {"times": 3})
    note(f"forecast: {out['forecast']}")

    out["lists"] = []
    for who in ("staff", "member"):
        for query in ("", "?state=pending", "?mine=true", f"?tenant={TENANT}"):
            path = f"/api/v1/jobs/{query}"
            status, body = call(stack.ports[0], "GET", path, token=tokens[who])
            count = body.get("count") if isinstance(body, dict) else None
            spec = load_spec(stack, method="GET", path=path, token=tokens[who], body=None, concurrency=1,
                             seconds=args.list_seconds, targets=stack.targets[:1])  # fmt: skip
            before = stack.cpu_seconds()
            load = generate(spec)
            others = cpu_delta(before, stack.cpu_seconds(), generator=load["generator_cpu_s"])["others"]
            out["lists"].append({"path": path, "who": who, "first_status": status, "count": count, "load": load,
                                 "others_cpu_s": others})  # fmt: skip
            lat = load["latency_ms"]
            note(f"GET {path} as {who}: p50 {lat['p50']} ms, p99 {lat['p99']} ms, count {count}")

    note(f"nothing changing: waiting {args.idle_wait:.0f} s, then measuring the worker for {args.idle_seconds:.0f} s")
    time.sleep(args.idle_wait)
    before, since = stack.cpu_seconds(), time.time()
    time.sleep(args.idle_seconds)
    after, until = stack.cpu_seconds(), time.time()
    cpu = after["worker"] - before["worker"]
    out["idle"] = {
        "wait_s": args.idle_wait,
        "seconds": until - since,
        "cpu_s": round(cpu, 2),
        "percent": round(100 * cpu / (until - since), 1),
        "all_cpu_s": cpu_delta(before, after),
        "rounds": len(stack.django("rounds", {"since": since, "until": until})["rounds"]),
    }
    note(f"idle worker: {out['idle']}")

    out["profiles"] = {}
    want = {
        "round": args.profile == "always" or (args.profile == "auto" and report_mod.round_missed(out)),
        "forecast": args.profile == "always" or (args.profile == "auto" and report_mod.forecast_missed(out)),
    }
    for kind, wanted in want.items():
        if wanted:
            note(f"profiling one {kind}")
            prof = stack.django("profile", {"kind": kind, "top": 25})
            out["profiles"][kind] = prof
            print(report_mod.profile_text(prof), flush=True)
    out["counts_after"] = stack.django("counts")
    return out


# --- the run ----------------------------------------------------------------------------------------------------------
def code_state(code: Path) -> str:
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=code, capture_output=True, text=True).stdout.strip()

    if not (code / ".git").exists():
        return f"{code} (an export, no git)"
    dirty = git("status", "--porcelain")
    return git("rev-parse", "HEAD") + (" with uncommitted changes" if dirty else "")


def snapshot(code: Path, into: Path) -> None:
    """Copy ``code``'s working tree as git sees it (tracked files and untracked ones not ignored) into ``into``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=code,
                            capture_output=True, check=True).stdout  # fmt: skip
    for name in listed.decode().split("\0"):
        source = code / name
        if name and source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def run(args: argparse.Namespace, stack: LoadStack) -> int:
    code = code_state(args.code)
    if args.snapshot:
        copy = stack.run_dir / "code"
        snapshot(args.code, copy)
        code += f" (a snapshot of its working tree at {time.strftime('%H:%M:%S')})"
        stack.code = args.code = copy
    info: dict[str, Any] = {
        "code": code,
        "machine": f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}",
        "shape": f"{args.web} web server(s) × gunicorn {args.gunicorn_workers} workers × {args.gunicorn_threads}"
        f" threads ({args.gunicorn_class}), {args.workers} Celery worker(s) × concurrency {args.concurrency},"
        f" beat; PostgreSQL + Redis on loopback; CORRAL_PRODUCTION=1" + (f"; {' '.join(args.env)}" if args.env else ""),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
    }
    report: dict[str, Any] = {"run": info}
    note(f"code {info['code']}; run directory {stack.run_dir}")
    try:
        stack.start_services()
        stack.manage("migrate", "--noinput", "-v", "0")
        nodes = max(1, -(-args.submit_gpus // 8))
        stack.django("setup", {"tenant": TENANT, "member": MEMBER, "staff": STAFF, "nodes": nodes,
                               "gpus_per_node": min(8, args.submit_gpus)})  # fmt: skip
        stack.start_portal()
        tokens = {"member": obtain_token(stack.ports[0], *MEMBER), "staff": obtain_token(stack.ports[0], *STAFF)}
    except (RuntimeError, OSError, subprocess.SubprocessError, SystemExit) as exc:
        note(f"could not set up the stack: {exc}")
        return 2
    note(f"stack up: web on {', '.join(str(p) for p in stack.ports)}")
    # Warm every gunicorn thread up (the first requests of a worker load the URL map and the API's classes).
    warm = load_spec(stack, method="GET", path="/api/v1/jobs/", token=tokens["member"], body=None,
                     concurrency=args.gunicorn_workers * args.gunicorn_threads * args.web, seconds=2)  # fmt: skip
    generate(warm)
    report["calibration"] = calibrate(min(3.0, args.seconds))
    note(f"generator against a null server: {report['calibration']}")
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        (args.out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
        (args.out / "report.md").write_text(report_mod.markdown(report))

    if "submit" in args.phases:
        report["submit_profiles"] = {}
        report["submit"] = submit_phase(stack, args, tokens["member"], report["submit_profiles"])
        save()
    if "array" in args.phases:
        report["array"] = array_phase(stack, args, tokens["member"])
        save()
    if "scale" in args.phases:
        report["scale"] = scale_phase(stack, args, tokens)
        save()
    save()
    print(report_mod.markdown(report), flush=True)
    note(f"report: {args.out / 'report.md'} and report.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="corral-api-load-"))
    run_dir.chmod(0o755)  # the unprivileged PostgreSQL user must traverse it
    signal.signal(signal.SIGTERM, _interrupt)
    stack = LoadStack(run_dir, args)
    try:
        return run(args, stack)
    except (Interrupted, KeyboardInterrupt):
        note("interrupted")
        return 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the teardown short
            signal.signal(signum, signal.SIG_IGN)
        note("tearing down")
        kill_children()
        stack.teardown()
        if args.keep:
            note(f"kept {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
