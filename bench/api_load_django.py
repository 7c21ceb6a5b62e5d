"""The database side of ``bench/api_load.py``: set-up, seeding, resets, round and forecast timings and profiles.

Runs inside ``manage.py shell -c`` with the stack's environment (and, under ``--code``, the other tree's portal on
``PYTHONPATH``), so it reads and writes through the portal's own models and services:

    API_LOAD_OP=<operation> API_LOAD_SPEC=<json> python manage.py shell -c \
        "import sys; sys.path.insert(0, '<bench>'); import api_load_django; api_load_django.main()"

Each operation prints one line ``@@API_LOAD@@ <json>``, which the benchmark reads (the portal may log other lines).
Not imported by the benchmark process itself: it needs Django configured.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import random
import re
import sysconfig
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

MARKER = "@@API_LOAD@@"
NAME_KINDS = ("train", "eval", "sweep", "finetune", "preprocess")
#: GPUs a pending job asks for, and how often (a research cluster's mix: mostly small, a few whole nodes and gangs).
PENDING_GPUS = ((1, 0.59), (2, 0.2), (4, 0.12), (8, 0.08), (16, 0.01))
#: How jobs fill a busy node of 8 GPUs.
PACKINGS = ((8,), (4, 4), (4, 2, 2), (2, 2, 2, 2), (1, 1, 2, 4), (1,) * 8)


def emit(payload: dict[str, Any]) -> None:
    print(MARKER, json.dumps(payload, default=str), flush=True)


def main() -> None:
    op = os.environ["API_LOAD_OP"]
    spec: dict[str, Any] = json.loads(os.environ.get("API_LOAD_SPEC", "{}"))
    emit(OPERATIONS[op](spec))


# --- set-up and resets ----------------------------------------------------------------------------------------------
def setup(spec: dict[str, Any]) -> dict[str, Any]:
    """The tenant (no limits), its member, a staff user, and the small cluster of the submission phases."""
    from django.contrib.auth import get_user_model

    from portal.tenants.models import Membership, Quota, Tenant

    user_model = get_user_model()
    tenant = Tenant.objects.create(slug=spec["tenant"], name=spec["tenant"])
    Quota.objects.create(tenant=tenant)  # every limit empty: a generous quota
    member = user_model.objects.create_user(spec["member"][0], password=spec["member"][1])
    Membership.objects.create(user=member, tenant=tenant)
    user_model.objects.create_user(spec["staff"][0], password=spec["staff"][1], is_staff=True)
    gpus = create_nodes(spec["nodes"], spec["gpus_per_node"], prefix="small")
    return {"tenant": tenant.slug, "gpus": gpus}


def create_nodes(count: int, gpus_per_node: int, *, prefix: str, per_rack: int = 32) -> int:
    """``count`` nodes, up with a fresh heartbeat, each with ``gpus_per_node`` healthy GPUs; returns the GPUs."""
    from django.utils import timezone

    from portal.nodes.models import Gpu, Node, NodeState

    now = timezone.now()
    nodes = Node.objects.bulk_create(
        Node(
            name=f"{prefix}-{n + 1:04d}",
            hostname=f"{prefix}-{n + 1:04d}.sim",
            address=f"10.{n // 65536 % 256}.{n // 256 % 256}.{n % 256}",
            rack=f"rack-{n // per_rack + 1:03d}",
            state=NodeState.UP,
            last_heartbeat=now,
            registered_at=now,
            agent_version="simulated",
        )
        for n in range(count)
    )
    gpus = [
        Gpu(node=node, index=i, uuid=f"GPU-{node.name}-{i}", model="Simulated H100 80GB", memory_mb=81559)
        for node in nodes
        for i in range(gpus_per_node)
    ]
    Gpu.objects.bulk_create(gpus, batch_size=5000)
    return len(gpus)


def reset_jobs(spec: dict[str, Any]) -> dict[str, Any]:
    """Empty every table of the jobs app (and whatever refers to them): the next phase starts from no jobs."""
    from django.apps import apps
    from django.db import connection

    began = time.perf_counter()
    existing = set(connection.introspection.table_names())  # a model newer than the migrations run has none
    tables = [m._meta.db_table for m in apps.get_app_config("jobs").get_models() if m._meta.db_table in existing]
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(connection.ops.quote_name(t) for t in tables) + " CASCADE")
    return {"tables": tables, "seconds": round(time.perf_counter() - began, 2)}


@contextmanager
def explicit_times(*fields: Any) -> Iterator[None]:
    """Let bulk_create keep the given ``auto_now_add`` fields' values (a seed backdates its rows)."""
    saved = [(f, f.auto_now_add) for f in fields]
    for f in fields:
        f.auto_now_add = False
    try:
        yield
    finally:
        for f, value in saved:
            f.auto_now_add = value


# --- the cluster at scale ---------------------------------------------------------------------------------------------
def seed_scale(spec: dict[str, Any]) -> dict[str, Any]:
    """``gpus`` simulated GPUs on nodes of ``gpus_per_node``, ``busy`` of them held by running jobs, ``pending``
    pending jobs, ``finished`` finished jobs (the run-time history policies and forecasts learn from), spread over
    ``tenants`` tenants of ``users_per_tenant`` users. The member and staff of the set-up keep their tokens."""
    from django.contrib.auth import get_user_model
    from django.db import transaction
    from django.utils import timezone

    from portal.jobs.models import Allocation, Job, JobTask
    from portal.nodes.models import Gpu, Node
    from portal.tenants.models import Membership, Quota, Tenant

    began = time.perf_counter()
    rng = random.Random(spec.get("seed", 16))
    reset_jobs({})
    user_model = get_user_model()
    with transaction.atomic():
        Node.objects.all().delete()
        gpn = int(spec["gpus_per_node"])
        total = create_nodes(-(-int(spec["gpus"]) // gpn), gpn, prefix="sim")
        # Tenants and users: the set-up's tenant and member are the first; the others are made here.
        main_tenant = Tenant.objects.get(slug=spec["tenant"])
        member = user_model.objects.get(username=spec["member"])
        staff = user_model.objects.get(username=spec["staff"])  # staff may submit to any tenant, member or not
        owners: list[tuple[Any, Any]] = [(main_tenant, member), (main_tenant, staff)]
        for t in range(int(spec["tenants"])):
            slug = f"lab-{t + 1}"
            tenant = main_tenant if t == 0 else Tenant.objects.get_or_create(slug=slug, name=slug)[0]
            Quota.objects.get_or_create(tenant=tenant)
            for u in range(int(spec["users_per_tenant"]) - (1 if t == 0 else 0)):
                user, _ = user_model.objects.get_or_create(username=f"{tenant.slug}-u{u + 2}")
                Membership.objects.get_or_create(user=user, tenant=tenant)
                owners.append((tenant, user))
        now = timezone.now()
        fields = [Job._meta.get_field("submitted_at"), JobTask._meta.get_field("created_at")]
        fields.append(Allocation._meta.get_field("created_at"))
        with explicit_times(*fields):
            finished = seed_finished(int(spec["finished"]), owners, now, rng)
            running, allocations = seed_running(int(spec["busy"]), owners, now, rng)
            pending = seed_pending(int(spec["pending"]), owners, now, rng)
    counts = {
        "gpus": total,
        "nodes": Node.objects.count(),
        "busy_gpus": allocations,
        "running_jobs": running,
        "pending_jobs": pending,
        "finished_jobs": finished,
        "tenants": int(spec["tenants"]),
        "users": len(owners),
        "present_gpus": Gpu.objects.filter(present=True).count(),
    }
    return {**counts, "seconds": round(time.perf_counter() - began, 1)}


def job_name(rng: random.Random) -> str:
    return f"{rng.choice(NAME_KINDS)}-{rng.randrange(20)}"


def seed_finished(count: int, owners: list[tuple[Any, Any]], now: datetime, rng: random.Random) -> int:
    from portal.jobs.models import Job

    jobs = []
    for _ in range(count):
        tenant, user = rng.choice(owners)
        submitted = now - timedelta(seconds=rng.uniform(3600, 7 * 86400))
        started = submitted + timedelta(seconds=rng.uniform(5, 1800))
        finished = started + timedelta(seconds=min(86400.0, rng.lognormvariate(7.5, 1.2)))
        ok = rng.random() < 0.9
        jobs.append(
            Job(
                tenant=tenant,
                user=user,
                name=job_name(rng),
                command="python train.py",
                gpus=rng.choice((1, 1, 1, 2, 4, 8)),
                state="succeeded" if ok else "failed",
                attempt=1,
                exit_code=0 if ok else 1,
                submitted_at=submitted,
                queued_at=submitted,
                started_at=started,
                finished_at=min(finished, now),
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)
    return len(jobs)


def seed_running(busy: int, owners: list[tuple[Any, Any]], now: datetime, rng: random.Random) -> tuple[int, int]:
    """Running jobs packed onto the first nodes until ``busy`` GPUs are held; each with its task and allocations."""
    from portal.jobs.models import Allocation, Job, JobTask
    from portal.nodes.models import Gpu, Node

    plans: list[tuple[Any, list[Any]]] = []  # (node, [gpu rows of one job])
    held = 0
    for node in Node.objects.order_by("name"):
        if held >= busy:
            break
        gpus = list(Gpu.objects.filter(node=node).order_by("index"))
        at = 0
        for size in rng.choice(PACKINGS):
            size = min(size, busy - held, len(gpus) - at)
            if size <= 0:
                break
            plans.append((node, gpus[at : at + size]))
            at += size
            held += size
    jobs = []
    for _, gpus in plans:
        tenant, user = rng.choice(owners)
        started = now - timedelta(seconds=rng.uniform(10, 3600))
        submitted = started - timedelta(seconds=rng.uniform(1, 600))
        jobs.append(
            Job(
                tenant=tenant,
                user=user,
                name=job_name(rng),
                command="python train.py",
                gpus=len(gpus),
                state="running",
                attempt=1,
                submitted_at=submitted,
                queued_at=submitted,
                started_at=started,
                time_limit=rng.choice((None, None, 86400, 3 * 86400)),
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)
    tasks, allocations = [], []
    for job, (node, gpus) in zip(jobs, plans, strict=True):
        assert job.started_at is not None
        tasks.append(
            JobTask(
                job=job,
                attempt=1,
                rank=0,
                node=node,
                gpu_indices=[g.index for g in gpus],
                state="running",
                pid=rng.randrange(1000, 4_000_000),
                created_at=job.started_at,
                started_at=job.started_at,
            )
        )
        allocations += [
            Allocation(job=job, attempt=1, gpu=g, node=node, rank=0, created_at=job.started_at) for g in gpus
        ]
    JobTask.objects.bulk_create(tasks, batch_size=2000)
    Allocation.objects.bulk_create(allocations, batch_size=5000)
    return len(jobs), len(allocations)


def seed_pending(count: int, owners: list[tuple[Any, Any]], now: datetime, rng: random.Random) -> int:
    """Pending jobs submitted over the last hours, oldest first."""
    from portal.jobs.models import Job

    sizes = [g for g, _ in PENDING_GPUS]
    weights = [w for _, w in PENDING_GPUS]
    spread = 6 * 3600.0
    jobs = []
    for n in range(count):
        tenant, user = rng.choice(owners)
        submitted = now - timedelta(seconds=spread * (1 - n / max(1, count)))
        jobs.append(
            Job(
                tenant=tenant,
                user=user,
                name=job_name(rng),
                command="python train.py --seed $RANDOM",
                gpus=rng.choices(sizes, weights)[0],
                state="pending",
                submitted_at=submitted,
                queued_at=submitted,
                time_limit=rng.choice((None, None, None, 3600, 7200, 4 * 3600, 86400)),
            )
        )
    Job.objects.bulk_create(jobs, batch_size=2000)
    return len(jobs)


# --- reading what ran -------------------------------------------------------------------------------------------------
def rounds(spec: dict[str, Any]) -> dict[str, Any]:
    """Every ``SchedulerRound`` written from ``since`` (epoch seconds) to ``until`` (or now)."""
    from portal.scheduler.models import SchedulerRound

    rows = SchedulerRound.objects.filter(at__gte=datetime.fromtimestamp(float(spec["since"]), UTC))
    if spec.get("until") is not None:
        rows = rows.filter(at__lt=datetime.fromtimestamp(float(spec["until"]), UTC))
    found = [
        {"at": r.at.timestamp(), "ms": r.duration_ms, "pending": r.pending, "started": r.started}
        for r in rows.order_by("at")
    ]
    return {"rounds": found}


def job_counts(spec: dict[str, Any]) -> dict[str, Any]:
    from django.db.models import Count

    from portal.jobs.models import Job

    by_state = dict(Job.objects.values_list("state").annotate(n=Count("pk")).values_list("state", "n"))
    return {"by_state": by_state, "total": sum(by_state.values())}


# --- timing and profiling the scheduler's work ------------------------------------------------------------------------
def _round_once(deadline: float) -> tuple[Any, float]:
    """One live round, waiting for the lease (a worker's round may hold it); (result, seconds)."""
    from portal.scheduler.services import scheduling_round

    while True:
        began = time.perf_counter()
        result = scheduling_round()
        took = time.perf_counter() - began
        if result is not None or time.monotonic() > deadline:
            return result, took
        time.sleep(0.05)


def _forecast_once() -> tuple[Any, float]:
    from portal.scheduler.services import start_forecast_refresh

    began = time.perf_counter()
    result = start_forecast_refresh()
    return result, time.perf_counter() - began


def time_rounds(spec: dict[str, Any]) -> dict[str, Any]:
    """``times`` live rounds in a row, each timed here (and written as ``SchedulerRound`` rows by the round)."""
    _warm_up(None)
    deadline = time.monotonic() + float(spec.get("timeout", 300))
    out = []
    for _ in range(int(spec.get("times", 1))):
        result, took = _round_once(deadline)
        out.append(
            {
                "seconds": round(took, 4),
                "ran": result is not None,
                "started": getattr(result, "started", None),
                "pending": getattr(result, "pending", None),
                "duration_ms": getattr(result, "duration_ms", None),
            }
        )
    return {"rounds": out}


def time_forecasts(spec: dict[str, Any]) -> dict[str, Any]:
    """``times`` start-forecast refreshes in a row, timed here; and the interval they must fit in."""
    from django.conf import settings

    _warm_up(None)
    out = []
    for _ in range(int(spec.get("times", 3))):
        result, took = _forecast_once()
        out.append(
            {
                "seconds": round(took, 3),
                "pending": getattr(result, "pending", None),
                "estimated": getattr(result, "estimated", None),
            }
        )
    return {"forecasts": out, "every_s": float(settings.CORRAL_FORECAST_EVERY)}


class QueryTimer:
    """A connection wrapper that sums the time spent in SQL, per statement shape."""

    def __init__(self) -> None:
        self.total = 0.0
        self.count = 0
        self.by_sql: dict[str, list[float]] = {}

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any) -> Any:
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            took = time.perf_counter() - began
            self.total += took
            self.count += 1
            entry = self.by_sql.setdefault(" ".join(sql.split())[:300], [0.0, 0])
            entry[0] += took
            entry[1] += 1

    def top(self, n: int = 10) -> list[dict[str, Any]]:
        ranked = sorted(self.by_sql.items(), key=lambda kv: -kv[1][0])[:n]
        return [{"ms": round(v[0] * 1000, 1), "calls": int(v[1]), "sql": sql} for sql, v in ranked]


def _submissions(token: str, count: int) -> Callable[[], Any]:
    """``count`` submissions through the whole Django stack in this process (middleware, DRF, the service)."""
    from django.test import Client

    client = Client(HTTP_HOST="127.0.0.1", HTTP_AUTHORIZATION=f"Token {token}")
    body = json.dumps({"command": "true", "gpus": 1})

    def submit() -> Any:
        answers: Counter[str] = Counter()
        for _ in range(count):
            answers[str(client.post("/api/v1/jobs/", body, content_type="application/json").status_code)] += 1
        return dict(answers)  # never None: no retry

    return submit


def _warm_up(token: str | None) -> None:
    """Open the database and cache connections and import what the first call would import lazily, so a profile
    shows the work rather than this process's start-up."""
    from django.conf import settings
    from django.core.cache import cache
    from django.db import connection

    from portal.scheduler.policy_cache import live_policy

    connection.ensure_connection()
    cache.get("api-load-warm-up")
    # The policies learn the finished jobs' history on first use, once per worker process: a long-lived worker
    # has done so long ago, so a timing from a fresh process starts after it.
    live_policy(settings.CORRAL_POLICY)
    live_policy("qssf")  # the forecast's run-time history
    if token:  # a few submissions: the URL map, DRF's classes, the serializers
        _submissions(token, 5)()


def profile(spec: dict[str, Any]) -> dict[str, Any]:
    """cProfile of one live round (``kind`` = round), one forecast refresh (``forecast``) or ``count``
    submissions through the Django stack without gunicorn (``submit``, as ``token``'s user): the top ``top``
    entries by cumulative time, and the time spent in SQL with the costliest statements."""
    from django.db import connection

    kind = spec["kind"]
    work: Callable[[], Any]
    if kind == "round":
        work = lambda: _round_once(time.monotonic())[0]  # noqa: E731
    elif kind == "forecast":
        work = lambda: _forecast_once()[0]  # noqa: E731
    else:
        work = _submissions(spec["token"], int(spec.get("count", 200)))
    _warm_up(spec.get("token"))
    deadline = time.monotonic() + float(spec.get("timeout", 300))
    while True:
        timer = QueryTimer()
        profiler = cProfile.Profile()
        with connection.execute_wrapper(timer):
            profiler.enable()
            began = time.perf_counter()
            result = work()
            took = time.perf_counter() - began
            profiler.disable()
        if result is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(int(spec.get("top", 25)))
    return {
        "kind": kind,
        "count": int(spec.get("count", 200)) if kind == "submit" else 1,
        "seconds": round(took, 3),
        "ran": result is not None,
        "answers": result if kind == "submit" else None,
        "sql_seconds": round(timer.total, 3),
        "sql_queries": timer.count,
        "sql_top": timer.top(),
        "cumulative": trim_stats(text.getvalue()),
    }


def trim_stats(text: str) -> str:
    """pstats' table without its preamble, with paths shortened to the part after site-packages or the tree."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    prefixes = (
        os.getcwd(),
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        sysconfig.get_paths()["stdlib"],
    )
    out = []
    for line in lines[start:]:
        for prefix in prefixes:
            line = line.replace(prefix + "/", "")
        out.append(re.sub(r"\S*/site-packages/", "", line).rstrip())
    return "\n".join(line for line in out if line)


OPERATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "setup": setup,
    "reset": reset_jobs,
    "seed_scale": seed_scale,
    "rounds": rounds,
    "counts": job_counts,
    "time_rounds": time_rounds,
    "time_forecasts": time_forecasts,
    "profile": profile,
}
