"""Dashboard cost: how long the usage dashboard's selector (and the whole htmx fragment) takes on a month of history.

Seeds a month on 64 GPUs (8 nodes x 8): ``--jobs`` finished jobs (default 20,000) of 1-8 GPUs over 30 days across
8 tenants and 96 users, one ``Allocation`` per GPU per attempt (a tenth of the jobs were requeued once, so they
have two attempts), 1-hour rollups of every GPU for 30 days, 1-minute rollups for the last day, and a scheduling
round every 5 s for the last day. Then, per window (24h, 7d, 30d), times ``dashboard_get`` for a staff user (every
tenant) and for a member of one tenant, and the htmx fragment request of the staff user (view, selector, charts,
template), each the median of ``--repeat`` runs after one warm-up, with the number of queries.

Run on PostgreSQL (the production database)::

    .venv/bin/python scripts/test_servers.py --no-chromium -- .venv/bin/python bench/dashboard.py

Without ``DATABASE_URL`` it runs on a throw-away SQLite file in a temporary directory (what ``make run`` uses).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
if not os.environ.get("DATABASE_URL"):
    os.environ["CORRAL_DATA_DIR"] = tempfile.mkdtemp(prefix="corral-bench-")

import django  # noqa: E402 - settings must be chosen first

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from portal.dashboards.selectors import WINDOWS, dashboard_get, window_of  # noqa: E402
from portal.jobs.models import Allocation, Job  # noqa: E402
from portal.nodes.models import Gpu  # noqa: E402
from portal.nodes.services import GpuReport, node_register, node_token_issue  # noqa: E402
from portal.scheduler.models import SchedulerRound  # noqa: E402
from portal.telemetry.models import Rollup, RollupPeriod  # noqa: E402
from portal.tenants.models import Membership, Tenant  # noqa: E402

NODES, GPUS_PER_NODE, TENANTS, USERS = 8, 8, 8, 96
DAYS = 30
BATCH = 5000


@contextlib.contextmanager
def stored_as_given(*fields: tuple[type, str]) -> Iterator[None]:
    """Let bulk_create store the timestamps we give instead of "now" (``auto_now_add``), for seeding history."""
    touched = [model._meta.get_field(name) for model, name in fields]  # type: ignore[attr-defined]
    for field in touched:
        field.auto_now_add = False
    try:
        yield
    finally:
        for field in touched:
            field.auto_now_add = True


def seed(jobs: int, now: datetime, rng: random.Random) -> tuple[object, object]:
    """The month of history; returns (staff user, a member of one tenant)."""
    User = get_user_model()
    tenants = [Tenant.objects.create(slug=f"t{k}", name=f"Tenant {k}") for k in range(TENANTS)]
    users = [User.objects.create_user(f"u{k}", password="pw") for k in range(USERS)]
    Membership.objects.bulk_create(Membership(user=u, tenant=tenants[k % TENANTS]) for k, u in enumerate(users))
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    for n in range(NODES):
        node, _ = node_token_issue(name=f"gpu{n:02d}")
        reports = [GpuReport(index=i, uuid=f"GPU-{n}-{i}", model="H100", memory_mb=81_559) for i in range(8)]
        node_register(node=node, hostname=node.name, address="10.0.0.1", agent_version="bench", gpus=reports)
    gpus = list(Gpu.objects.select_related("node"))
    start = now - timedelta(days=DAYS)

    rows: list[Job] = []
    plans: list[list[tuple[datetime, datetime]]] = []
    for k in range(jobs):
        submitted = start + timedelta(seconds=rng.uniform(0, DAYS * 86_400 - 6 * 3600))
        first = submitted + timedelta(seconds=rng.expovariate(1 / 1200))
        attempts = [(first, first + timedelta(seconds=min(rng.expovariate(1 / 3000), 86_400)))]
        if rng.random() < 0.1:  # requeued once: a second attempt after a wait
            again = attempts[0][1] + timedelta(seconds=rng.expovariate(1 / 600))
            attempts.append((again, again + timedelta(seconds=rng.expovariate(1 / 3000))))
        finished = min(attempts[-1][1], now - timedelta(seconds=1))
        user = users[k % USERS]
        rows.append(
            Job(
                tenant=tenants[k % USERS % TENANTS], user=user, name=f"job{k}", command="train",
                gpus=rng.choice((1, 1, 1, 2, 2, 4, 8)), state=rng.choice(("succeeded",) * 8 + ("failed", "cancelled")),
                submitted_at=submitted, started_at=attempts[-1][0], finished_at=finished, attempt=len(attempts),
            )
        )  # fmt: skip
        plans.append(attempts)
    with stored_as_given((Job, "submitted_at"), (Allocation, "created_at"), (SchedulerRound, "at")):
        created = Job.objects.bulk_create(rows, batch_size=BATCH)
        allocations = [
            Allocation(job=job, attempt=a + 1, gpu=g, node=g.node, rank=0, created_at=begin, released_at=min(end, now))
            for job, attempts in zip(created, plans, strict=True)
            for a, (begin, end) in enumerate(attempts)
            for g in rng.sample(gpus, job.gpus)
        ]
        Allocation.objects.bulk_create(allocations, batch_size=BATCH)
        rounds = [
            SchedulerRound(at=now - timedelta(seconds=5 * k), duration_ms=3.0, policy="fifo",
                           pending=rng.randint(0, 40), started=0, preempted=0)
            for k in range(86_400 // 5)
        ]  # fmt: skip
        SchedulerRound.objects.bulk_create(rounds, batch_size=BATCH)
    hour0 = now.replace(minute=0, second=0, microsecond=0)
    minute0 = now.replace(second=0, microsecond=0)
    for period, first, count in (
        (RollupPeriod.HOUR, hour0 - timedelta(hours=DAYS * 24), DAYS * 24 + 1),
        (RollupPeriod.MINUTE, minute0 - timedelta(minutes=1440), 1441),
    ):
        Rollup.objects.bulk_create(
            (
                Rollup(period=period, gpu=g, bucket=first + timedelta(seconds=period * b), samples=6,
                       gpu_util=rng.uniform(0, 100))
                for g in gpus
                for b in range(count)
            ),
            batch_size=BATCH,
        )  # fmt: skip
    print(
        f"seeded: {len(created):,} jobs, {len(allocations):,} allocations, "
        f"{Rollup.objects.filter(period=RollupPeriod.HOUR).count():,} hourly and "
        f"{Rollup.objects.filter(period=RollupPeriod.MINUTE).count():,} 1-minute rollups, {len(rounds):,} rounds"
    )
    member = users[0]
    return staff, member


def timed(fn: object, repeat: int) -> tuple[float, int]:
    """Median seconds of ``repeat`` calls after one warm-up, and the queries of one call (counted as they run:
    a request clears ``connection.queries`` when it starts)."""
    assert callable(fn)
    fn()
    queries: list[str] = []

    def count(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        queries.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(count):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), len(queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    now = timezone.now()
    t0 = time.perf_counter()
    staff, member = seed(args.jobs, now, random.Random(args.seed))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("ANALYZE")
    print(f"seeding took {time.perf_counter() - t0:.0f} s; database: {connection.vendor}, cores: {os.cpu_count()}, "
          f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    client = Client()
    client.force_login(staff)  # type: ignore[arg-type]
    print("| window | selector, staff (8 tenants) | selector, member (1 tenant) | htmx fragment, staff | queries |")
    print("|---|---|---|---|---|")
    for key in WINDOWS:
        now = timezone.now()
        window = window_of(key, now=now)
        all_s, queries = timed(lambda w=window: dashboard_get(user=staff, window=w), args.repeat)  # type: ignore[misc]
        one_s, _ = timed(lambda w=window: dashboard_get(user=member, window=w), args.repeat)  # type: ignore[misc]
        page_s, page_q = timed(lambda k=key: client.get(f"/dashboard/?window={k}", HTTP_HX_REQUEST="true"), args.repeat)
        cells = [f"{s * 1000:.0f} ms" for s in (all_s, one_s, page_s)]
        print(f"| {key} | {' | '.join(cells)} | {queries} ({page_q}) |")
    board = dashboard_get(user=staff, window=window_of("30d", now=timezone.now()))
    print(
        f"30d check: {board.total.finished:,} finished, {board.total.usage.allocated_hours:,.0f} GPU-h allocated, "
        f"efficiency {board.total.usage.efficiency or 0:.2f}, cluster util {board.cluster.util or 0:.1f} %"
    )


if __name__ == "__main__":
    main()
