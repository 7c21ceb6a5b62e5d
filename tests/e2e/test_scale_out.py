"""Scale-out (issue #16): two web servers and two Celery workers (plus beat) on one PostgreSQL and one Redis, with
two real node agents of 8 simulated GPUs each, one agent talking to each web server. About 200 jobs are submitted
concurrently, spread over both web servers, and run real (short) shell commands.

What must hold, whatever process served or scheduled what: every job runs or finishes (none is left pending); no
GPU is ever held by two allocations at once (the database constraint, and also no two allocation intervals
``[created_at, released_at)`` of one GPU overlap); no two scheduling rounds overlapped (the lease keeps one round
in flight across both workers); every attempt of a job was started once (one ``started`` event per attempt); and
every task assignment ran once: each job process appends one line to a file named after its job, attempt and
rank, so a task started twice (by two rounds, or by two web servers handing out the same start order) shows as
two lines, and a task never started as a missing file.

Nothing here is timed against a goal: speed belongs to ``bench/api_load.py``. Skipped without PostgreSQL and
REDIS_URL, like every end-to-end test (``tests/e2e/harness.py``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import (
    NODES,
    STACK_KEY,
    TENANT,
    USERNAME,
    Stack,
    api_client,
    database_url_of_test_db,
    results,
    skip_reason,
    wait_for,
)

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

WEB_SERVERS = 2
WORKERS = 2
GPUS_PER_AGENT = 8
JOBS = 200
#: The job mix: mostly 1 GPU, some 2, and two gangs of 12 GPUs that span both nodes (a rank on each).
MIX = [1] * 178 + [2] * 20 + [12] * 2
#: Fast clocks; a node timeout that a loaded 2-core machine does not trip by accident.
TIMINGS = {
    "CORRAL_HEARTBEAT_INTERVAL": "0.5",
    "CORRAL_NODE_TIMEOUT": "10",
    "CORRAL_SCHEDULE_EVERY": "1",
    "CORRAL_KILL_GRACE": "2",
}
STARTUP_TIMEOUT = 60.0
RUN_TIMEOUT = 90.0
#: How far apart the wall clock (``SchedulerRound.at``) and a round's own timer may be.
CLOCK_SLACK = timedelta(milliseconds=100)
TERMINAL = {"succeeded", "failed", "cancelled"}


@dataclass
class ScaleOut:
    stack: Stack
    urls: list[str]
    stamps: Path
    token: str  # the demo member's


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def scale_out(request: pytest.FixtureRequest, transactional_db: None, tmp_path: Path) -> Iterator[ScaleOut]:
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from portal.nodes.services import node_token_issue
    from portal.tenants.models import Membership, Tenant

    # Tokens straight from the table POST /api/v1/auth/token/ reads: the test settings hash passwords with MD5,
    # which the servers (production hashers) would not accept.
    user = get_user_model().objects.create_user(USERNAME)
    Membership.objects.create(user=user, tenant=Tenant.objects.create(slug=TENANT, name="Demo"))
    member = Token.objects.create(user=user).key
    staff = Token.objects.create(user=get_user_model().objects.create_user("e2e-staff", is_staff=True)).key

    data_dir = tmp_path / "data"
    (data_dir / "staticfiles").mkdir(parents=True)
    stamps = tmp_path / "stamps"
    stamps.mkdir(mode=0o777)
    stamps.chmod(0o777)  # jobs may run as another user than the agent
    env = {
        **os.environ,
        "DATABASE_URL": database_url_of_test_db(),
        "REDIS_URL": os.environ["REDIS_URL"],
        "CORRAL_DATA_DIR": str(data_dir),
        "PYTHONUNBUFFERED": "1",
        **TIMINGS,
    }
    env.pop("CELERY_TASK_ALWAYS_EAGER", None)
    ports = [_free_port() for _ in range(WEB_SERVERS)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    stack = Stack(url=urls[0], env=env, tmp=tmp_path)
    request.node.stash[STACK_KEY] = stack  # the harness attaches every process's output to a failure
    try:
        for n, port in enumerate(ports, 1):
            stack.spawn(f"web-{n}", [sys.executable, "-m", "gunicorn", "portal.wsgi:application",
                                     "--bind", f"127.0.0.1:{port}", "--workers", "2", "--threads", "4",
                                     "--worker-class", "gthread", "--graceful-timeout", "3",
                                     "--no-control-socket"])  # fmt: skip
        for n in range(1, WORKERS + 1):
            # Named "worker" and "worker-2": the harness's Stack.stop() knows the first by name.
            stack.spawn("worker" if n == 1 else f"worker-{n}",
                        [sys.executable, "-m", "celery", "-A", "portal", "worker", "-l", "info", "--concurrency",
                         "2", "--without-gossip", "--without-mingle", "--without-heartbeat",
                         "-n", f"e2e-{n}@%h"])  # fmt: skip
        stack.start_beat()
        for port in ports:
            wait_for(partial(_port_open, port), timeout=STARTUP_TIMEOUT, what=f"a web server on port {port}",
                     stack=stack)  # fmt: skip
        for n, node in enumerate(NODES):
            _, token = node_token_issue(name=node)
            _start_agent(stack, node, token, urls[n % len(urls)])
        for name in ("worker", *(f"worker-{n}" for n in range(2, WORKERS + 1))):
            stack.wait_for_log(name, r"\bready\.", timeout=STARTUP_TIMEOUT)
        with api_client(urls[1 % len(urls)], staff) as client:
            wait_for(lambda: _nodes_up(client) >= set(NODES), timeout=STARTUP_TIMEOUT,
                     what=f"nodes {', '.join(NODES)} up through the second web server", stack=stack)  # fmt: skip
        yield ScaleOut(stack=stack, urls=urls, stamps=stamps, token=member)
    finally:
        stack.stop()  # agents (they stop their jobs), beat, the first worker, left-over job processes
        for proc in stack.procs.values():  # the second worker and the web servers
            proc.stop()


def _start_agent(stack: Stack, node: str, token: str, url: str) -> None:
    token_file = stack.tmp / "agents" / f"{node}.token"
    token_file.parent.mkdir(parents=True, exist_ok=True)
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    agent = Path(sys.executable).parent / "corral-agent"
    argv = [str(agent)] if agent.exists() else [sys.executable, "-m", "agent.main"]
    argv += ["--server", url, "--token-file", str(token_file), "--name", node, "--fake-gpus", str(GPUS_PER_AGENT),
             "--workdir", str(stack.workdir(node)), "--grace", "2"]  # fmt: skip
    if os.geteuid() == 0:
        argv.append("--allow-root")
    stack.spawn(node, argv)


def _nodes_up(client: httpx.Client) -> set[str]:
    response = client.get("/api/v1/nodes/")
    response.raise_for_status()
    return {n["name"] for n in results(response.json()) if n["state"] == "up" and len(n["gpus"]) == GPUS_PER_AGENT}


def _command(stamps: Path) -> str:
    """One line per process start into a file named after the task; a short run so intervals mean something."""
    target = f"{stamps}/$CORRAL_JOB_ID.$CORRAL_ATTEMPT.$CORRAL_NODE_RANK"
    return f'echo "$CORRAL_JOB_ID $CORRAL_ATTEMPT $CORRAL_NODE_RANK $CUDA_VISIBLE_DEVICES $PWD" >> {target}; sleep 0.3'


def _submit_all(setup: ScaleOut) -> dict[int, str]:
    """Submit the mix concurrently, job i through web server i mod 2; job id -> the URL that accepted it."""
    clients = [api_client(url, setup.token) for url in setup.urls]
    command = _command(setup.stamps)

    def submit(i: int) -> tuple[int, str]:
        client = clients[i % len(clients)]
        body = {"name": f"scale-{i}", "command": command, "gpus": MIX[i % len(MIX)], "tenant": TENANT}
        response = client.post("/api/v1/jobs/", json=body)
        assert response.status_code == 201, response.text
        return int(response.json()["id"]), str(client.base_url)

    try:
        with ThreadPoolExecutor(max_workers=16) as pool:
            accepted = dict(pool.map(submit, range(JOBS)))
    finally:
        for client in clients:
            client.close()
    return accepted


def _states() -> Counter[str]:
    from portal.jobs.models import Job

    return Counter(Job.objects.values_list("state", flat=True))


def test_two_web_servers_and_two_workers_place_every_job_once(scale_out: ScaleOut) -> None:
    from portal.jobs.models import Allocation, Job, JobEvent, JobTask
    from portal.scheduler.models import SchedulerRound

    accepted = _submit_all(scale_out)
    assert len(accepted) == JOBS
    by_server = Counter(accepted.values())
    assert len(by_server) == WEB_SERVERS and min(by_server.values()) >= JOBS // WEB_SERVERS - 1, by_server

    wait_for(lambda: sum(n for s, n in _states().items() if s in TERMINAL) == JOBS, timeout=RUN_TIMEOUT,
             what=f"all {JOBS} jobs to finish (now {dict(_states())})", stack=scale_out.stack)  # fmt: skip
    time.sleep(1.0)  # the last exits' GPU releases and events are in the same transactions, but be generous
    jobs = {j.pk: j for j in Job.objects.all()}
    assert set(jobs) == set(accepted)
    assert not [pk for pk, j in jobs.items() if j.state == "pending"], "a job was left pending"
    failed = {pk: (j.state, j.exit_code) for pk, j in jobs.items() if j.state != "succeeded"}
    assert not failed, f"jobs that did not succeed: {failed}"

    # No GPU is ever held twice: at most one active allocation, and no two intervals of one GPU overlap.
    intervals: dict[int, list[tuple[datetime, datetime | None, int]]] = defaultdict(list)
    for a in Allocation.objects.all():
        intervals[a.gpu_id].append((a.created_at, a.released_at, a.job_id))
    assert intervals, "no allocation was made"
    overlaps = []
    for gpu, spans in intervals.items():
        spans.sort(key=lambda s: s[0])
        assert sum(1 for s in spans if s[1] is None) <= 1, f"GPU {gpu} has two active allocations: {spans}"
        for earlier, later in zip(spans, spans[1:], strict=False):
            if earlier[1] is None or later[0] < earlier[1]:
                overlaps.append((gpu, earlier, later))
    assert not overlaps, f"allocations of one GPU overlap: {overlaps[:5]}"

    # One round in flight at a time, across both workers: each round's [start, end] follows the previous one's.
    rounds = sorted((r.at - timedelta(milliseconds=r.duration_ms), r.at) for r in SchedulerRound.objects.all())
    assert rounds, "no scheduling round was recorded"
    concurrent = [(a, b) for a, b in zip(rounds, rounds[1:], strict=False) if b[0] + CLOCK_SLACK < a[1]]
    assert not concurrent, f"rounds overlapped: {concurrent[:3]}"

    # Every attempt started once.
    started = Counter(JobEvent.objects.filter(kind="started").values_list("job_id", flat=True))
    twice = {pk: (started[pk], j.attempt) for pk, j in jobs.items() if started[pk] != j.attempt or j.attempt < 1}
    assert not twice, f"jobs whose started events do not match their attempts (events, attempt): {twice}"

    # Every task assignment ran once, and nothing ran that was not assigned.
    tasks = {(t.job_id, t.attempt, t.rank): t for t in JobTask.objects.all()}
    assert len(tasks) >= JOBS
    for (job_id, attempt, _), task in tasks.items():
        assert task.state == "exited" and task.exit_code == 0, (job_id, attempt, task.state, task.exit_code)
    # One task per node of the attempt's gang. A job that fits one node may still span two under the default
    # topology placement, when no node has room for it alone (fewest nodes, not one node); a larger one must span.
    gang_nodes: dict[tuple[int, int], set[int]] = defaultdict(set)
    for a in Allocation.objects.all():
        gang_nodes[(a.job_id, a.attempt)].add(a.node_id)
    for job_id, job in jobs.items():
        ranks = sorted(rank for (j, a, rank) in tasks if j == job_id and a == job.attempt)
        assert ranks == list(range(len(ranks))) and ranks, (job_id, ranks)
        assert len(ranks) == len(gang_nodes[(job_id, job.attempt)]), (job_id, ranks, gang_nodes[(job_id, job.attempt)])
        assert job.gpus <= GPUS_PER_AGENT or len(ranks) > 1, (job_id, job.gpus, ranks)
    stamped = {}
    for path in scale_out.stamps.iterdir():
        job_id, attempt, rank = (int(x) for x in path.name.split("."))
        stamped[(job_id, attempt, rank)] = path.read_text().splitlines()
    ran_twice = {key: lines for key, lines in stamped.items() if len(lines) != 1}
    assert not ran_twice, f"task processes started more than once: {ran_twice}"
    assert set(stamped) == set(tasks), (
        f"assigned but never ran: {sorted(set(tasks) - set(stamped))[:10]}; "
        f"ran but never assigned: {sorted(set(stamped) - set(tasks))[:10]}"
    )
    # Each process saw the GPUs its task was given, on the node it was given.
    for key, (line,) in stamped.items():
        _, _, _, gpus, workdir = line.split(" ", 4)
        task = tasks[key]
        assert gpus == ",".join(str(i) for i in task.gpu_indices), (key, gpus, task.gpu_indices)
        assert f"/agents/{task.node.name}" in workdir, (key, workdir, task.node.name)
