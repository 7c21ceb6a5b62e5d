"""Fair share by decayed usage: what it changes in replays, what it costs the simulator, and the live usage query.

1. Effect. The shared ``philly_poisson_n1000_g64_load0.9_seed0`` trace and more contended ones drawn with the shared
   ``derive.py poisson`` (load 1.2, seeds 0-5) into ``bench/out/``, on 8 x 8 GPUs, ``count`` placement. The traces
   name no tenant, so each job gets one by a fixed rule: in submission order, tenant
   ``random.Random(seed).choices("abcd", weights=(2, 1, 1, 1))``, so "a" (the heavy tenant) has about 40 % of the
   jobs and b, c, d about 20 % each. Every tenant is guaranteed a quarter of the GPUs (16) and has no cap. At load
   0.9 the trace is the same for every seed and only the tenants change; at 1.2 seed ``s`` also draws the trace.
   Each ``+quota`` policy is replayed without fair share and with each half-life.
2. Simulator overhead. The wall time of those replays (median of ``--repeat``), and of ``--big-policy`` on larger
   traces (``--big``: jobs:GPUs:load, tenants as above with a quarter of the GPUs each).
3. Live query cost. ``bench/dashboard.py``'s month of history (20k finished jobs, about 60k allocations), then
   ``tenant_usage`` (the one query a live round adds) and ``build_snapshot`` with and without fair share, each the
   median of ``--repeat`` calls after a warm-up. PostgreSQL when ``DATABASE_URL`` is set, else a throw-away SQLite
   file, as ``dashboard.py`` does.

Run (PostgreSQL and Redis on loopback)::

    .venv/bin/python scripts/test_servers.py --no-chromium -- .venv/bin/python bench/fair_share.py --markdown

``--no-live`` skips part 3 (and Django altogether).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_policies import OUT, trace_path  # noqa: E402  (a sibling script, not a package)

from scheduling.core.model import TenantLimits  # noqa: E402
from scheduling.sim.metrics import PolicyMetrics, measure  # noqa: E402
from scheduling.sim.simulator import Cluster, SimResult, simulate  # noqa: E402
from scheduling.sim.trace import TraceJob, read_trace  # noqa: E402

TENANTS = ("a", "b", "c", "d")
WEIGHTS = (2, 1, 1, 1)  # "a" is the heavy tenant: about 40 % of the jobs
HEAVY = "a"
DAY = 86_400.0


def with_tenants(trace: Sequence[TraceJob], seed: int) -> list[TraceJob]:
    """The trace with each job's tenant drawn by the documented rule (submission order, one draw per job)."""
    rng = random.Random(seed)
    return [replace(job, tenant=rng.choices(TENANTS, weights=WEIGHTS)[0]) for job in trace]


def quarter_each(gpus: int) -> dict[str, TenantLimits]:
    return {t: TenantLimits(guaranteed_gpus=gpus // len(TENANTS)) for t in TENANTS}


def label(half_life: float | None) -> str:
    return "off" if half_life is None else f"{half_life / DAY:g} d"


def simulated(
    trace: Sequence[TraceJob], policy: str, gpus: int, half_life: float | None, observer: SwapCounter | None = None
) -> SimResult:
    """``trace`` under ``policy`` on nodes of 8 GPUs, each tenant guaranteed a quarter of them."""
    return simulate(
        trace,
        policy,
        cluster=Cluster(gpus // 8, 8),
        placement="count",
        tenants=quarter_each(gpus),
        usage_half_life=half_life,
        observer=observer,
    )


def replay(
    trace: Sequence[TraceJob], policy: str, gpus: int, half_life: float | None, repeat: int
) -> tuple[SimResult, float]:
    """One replay's result and the median wall seconds of ``repeat`` (the simulator is deterministic)."""
    times, result = [], None
    for _ in range(max(repeat, 1)):
        t0 = time.perf_counter()
        result = simulated(trace, policy, gpus, half_life)
        times.append(time.perf_counter() - t0)
    assert result is not None
    return result, statistics.median(times)


class SwapCounter:
    """Counts preemptions undone at the very next event: job P is preempted at one instant while others start, and
    at the next instant P starts again while a job started at the first one is preempted. (A simulator observer;
    it is run apart from the timed replays.)"""

    def __init__(self) -> None:
        self.at: dict[float, tuple[set[str], set[str]]] = {}  # instant -> (started, preempted)

    def started(self, job_id: str, slots: object, now: float) -> None:
        self.at.setdefault(now, (set(), set()))[0].add(job_id)

    def stopped(self, job_id: str, slots: object, now: float, *, finished: bool) -> None:
        if not finished:
            self.at.setdefault(now, (set(), set()))[1].add(job_id)

    def round_done(self, now: float, free_gpus: int, waiting: object) -> None:
        """Not needed."""

    def swaps(self) -> int:
        times = sorted(self.at)
        count = 0
        for t, t_next in zip(times, times[1:], strict=False):
            (started, preempted), (started_next, preempted_next) = self.at[t], self.at[t_next]
            if started & preempted_next:
                count += len(preempted & started_next)
        return count


def count_swaps(trace: Sequence[TraceJob], policy: str, gpus: int, half_life: float | None) -> int:
    counter = SwapCounter()
    simulated(trace, policy, gpus, half_life, observer=counter)
    return counter.swaps()


@dataclass
class Cell:
    """One (load, policy, half-life) setting, accumulated over seeds."""

    avg_jct: list[float] = field(default_factory=list)
    avg_queue: list[float] = field(default_factory=list)
    fairness: list[float] = field(default_factory=list)
    preemptions: list[int] = field(default_factory=list)
    swaps: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    light_jobs: int = 0
    light_jct_sum: float = 0.0
    heavy_jobs: int = 0
    heavy_jct_sum: float = 0.0

    def add(self, m: PolicyMetrics, swaps: int, seconds: float) -> None:
        self.avg_jct.append(m.avg_jct)
        self.avg_queue.append(m.avg_queue)
        self.fairness.append(m.fairness)
        self.preemptions.append(m.preemptions)
        self.swaps.append(swaps)
        self.seconds.append(seconds)
        for tenant, group in m.per_tenant.items():
            if tenant == HEAVY:
                self.heavy_jobs += group.jobs
                self.heavy_jct_sum += group.jobs * group.avg_jct
            else:
                self.light_jobs += group.jobs
                self.light_jct_sum += group.jobs * group.avg_jct

    @property
    def light_jct(self) -> float:
        return self.light_jct_sum / max(self.light_jobs, 1)

    @property
    def heavy_jct(self) -> float:
        return self.heavy_jct_sum / max(self.heavy_jobs, 1)


def effect(args: argparse.Namespace, half_lives: list[float | None], raw: list[dict[str, object]]) -> list[list[str]]:
    cells: dict[tuple[float, str, float | None], Cell] = {}
    for load in args.loads:
        for seed in args.seeds:
            # The shared 0.9 trace exists for seed 0 only: there the seed draws only the tenants.
            base = read_trace(trace_path(load, 0 if load == 0.9 else seed, args.jobs, 64))
            trace = with_tenants(base, seed)
            for policy in args.policies:
                for half_life in half_lives:
                    result, seconds = replay(trace, policy, 64, half_life, args.repeat)
                    m = measure(result)
                    swaps = count_swaps(trace, policy, 64, half_life)
                    cell = cells.setdefault((load, policy, half_life), Cell())
                    cell.add(m, swaps, seconds)
                    raw.append({"part": "effect", "load": load, "seed": seed, "policy": policy,
                                "half_life": half_life, "seconds": seconds, "fairness": m.fairness, "swaps": swaps,
                                "per_tenant_jct": {t: g.avg_jct for t, g in m.per_tenant.items()},
                                **m.summary()})  # fmt: skip
                shares = ", ".join(
                    f"{label(h)}: {cells[load, policy, h].seconds[-1] * 1000:.0f} ms" for h in half_lives
                )
                print(f"load {load} seed {seed} {policy}: {shares}", file=sys.stderr, flush=True)
    rows = []
    for (load, policy, half_life), cell in cells.items():
        off = cells[load, policy, None]
        ms = statistics.mean(cell.seconds) * 1000
        rows.append([
            f"{load}", policy, label(half_life),
            f"{statistics.mean(cell.avg_jct) / 3600:.1f}",
            f"{statistics.mean(cell.avg_queue) / 3600:.1f}",
            f"{statistics.mean(cell.fairness):.3f}",
            f"{cell.light_jct / 3600:.1f}",
            f"{cell.heavy_jct / 3600:.1f}",
            f"{cell.heavy_jct / cell.light_jct:.2f}",
            f"{statistics.mean(cell.preemptions):.0f}",
            f"{statistics.mean(cell.swaps):.0f}",
            f"{ms:.0f}",
            f"{ms / (statistics.mean(off.seconds) * 1000):.2f}x",
        ])  # fmt: skip
    return rows


def big(args: argparse.Namespace, half_lives: list[float | None], raw: list[dict[str, object]]) -> list[list[str]]:
    rows = []
    for spec in args.big:
        jobs, gpus, load = (float(x) for x in spec.split(":"))
        trace = with_tenants(read_trace(trace_path(load, 0, int(jobs), int(gpus))), 0)
        base = 0.0
        for half_life in half_lives:
            result, seconds = replay(trace, args.big_policy, int(gpus), half_life, args.big_repeat)
            m = measure(result)
            base = base or seconds
            raw.append({"part": "big", "jobs": int(jobs), "gpus": int(gpus), "load": load,
                        "policy": args.big_policy, "half_life": half_life, "seconds": seconds,
                        "rounds": result.rounds, **m.summary()})  # fmt: skip
            rows.append([
                f"{int(jobs):,}", f"{int(gpus):,}", f"{load}", args.big_policy, label(half_life),
                f"{seconds:.2f}", f"{seconds / base:.2f}x", f"{result.rounds:,}", f"{m.preemptions:,}",
                f"{m.avg_jct / 3600:.1f}",
            ])  # fmt: skip
            print(f"{int(jobs)} jobs on {int(gpus)} GPUs, load {load}, {label(half_life)}: {seconds:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
    return rows


def live(args: argparse.Namespace, raw: list[dict[str, object]]) -> tuple[list[list[str]], str]:
    """Seed dashboard.py's month and time the fair-share reads. Imported here: it sets Django up on import."""
    import dashboard
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from portal.jobs.models import Allocation
    from portal.scheduler.selectors import build_snapshot
    from portal.tenants.selectors import tenant_usage

    call_command("migrate", verbosity=0)
    now = timezone.now()
    t0 = time.perf_counter()
    dashboard.seed(args.live_jobs, now, random.Random(0))
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    allocations = Allocation.objects.count()
    note = (
        f"{connection.vendor}, {args.live_jobs:,} jobs, {allocations:,} allocations, "
        f"CORRAL_FAIR_SHARE_HALF_LIFE_HOURS={settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS:g}, "
        f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}"
    )
    print(f"seeding took {time.perf_counter() - t0:.0f} s; {note}", file=sys.stderr, flush=True)
    if connection.vendor == "postgresql":
        _print_plan(lambda: tenant_usage(now=now, half_life=7 * DAY))
    calls: list[tuple[str, Callable[[], object]]] = [
        ("`tenant_usage`, half-life 7 d", lambda: tenant_usage(now=now, half_life=7 * DAY)),
        ("`tenant_usage`, half-life 1 d", lambda: tenant_usage(now=now, half_life=DAY)),
        ("`build_snapshot(fair_share=False)`", lambda: build_snapshot(now=now, fair_share=False)),
        ("`build_snapshot(fair_share=True)`", lambda: build_snapshot(now=now, fair_share=True)),
    ]
    rows = []
    for name, fn in calls:
        seconds, queries = dashboard.timed(fn, args.repeat)
        raw.append({"part": "live", "call": name, "seconds": seconds, "queries": queries, "db": connection.vendor})
        rows.append([name, f"{seconds * 1000:.1f}", f"{queries}"])
        print(f"{name}: {seconds * 1000:.1f} ms, {queries} queries", file=sys.stderr, flush=True)
    usage = tenant_usage(now=now, half_life=7 * DAY)
    # The same sum in Python, one allocation at a time, as a check on the SQL.
    k, expected = math.log(2) / (7 * DAY), dict.fromkeys(usage, 0.0)
    for slug, created, released in Allocation.objects.values_list("job__tenant__slug", "created_at", "released_at"):
        end = min((released or now).timestamp(), now.timestamp())
        start = min(created.timestamp(), now.timestamp())
        expected[slug] = expected.get(slug, 0.0) + (math.exp(k * (end - now.timestamp())) -
                                                    math.exp(k * (start - now.timestamp()))) / k  # fmt: skip
    worst = max(abs(usage.get(t, 0.0) - u) / max(u, 1.0) for t, u in expected.items())
    print("usage (GPU-h, 7 d): " + ", ".join(f"{t}={u / 3600:,.0f}" for t, u in sorted(usage.items()))
          + f"; largest relative difference from a Python sum: {worst:.1e}", file=sys.stderr)  # fmt: skip
    return rows, note


def _print_plan(fn: Callable[[], object]) -> None:
    """PostgreSQL's plan for the one query ``fn`` runs (its scan nodes), to see which index it uses."""
    from django.db import connection

    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        fn()
    sql, params = captured[-1]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN ANALYZE " + sql, params)
        plan = [line for (line,) in cursor.fetchall()]
    for line in plan:
        if "Scan" in line or "Execution Time" in line:
            print(f"plan: {line.strip()}", file=sys.stderr)


def table(head: list[str], rows: list[list[str]], markdown: bool) -> None:
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for cells in rows:
            print("| " + " | ".join(cells) + " |")
        return
    widths = [max(len(c) for c in col) for col in zip(head, *rows, strict=True)]
    for cells in [head, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.9, 1.2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--policies", nargs="+", default=["fifo+quota", "tiresias-las+quota"])
    parser.add_argument("--half-lives", type=float, nargs="+", default=[1, 7], help="days")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per small replay and per live call")
    parser.add_argument("--big", nargs="*", default=["25000:512:0.9", "12500:512:1.2"], help="jobs:GPUs:load")
    parser.add_argument("--big-policy", default="tiresias-las+quota")
    parser.add_argument("--big-repeat", type=int, default=3)
    parser.add_argument("--no-live", action="store_true", help="skip the database part")
    parser.add_argument("--live-jobs", type=int, default=20_000)
    parser.add_argument("--markdown", action="store_true", help="print the tables for docs/benchmarks.md")
    args = parser.parse_args()
    half_lives: list[float | None] = [None, *(d * DAY for d in args.half_lives)]
    raw: list[dict[str, object]] = []
    began = time.perf_counter()

    effect_rows = effect(args, half_lives, raw)
    big_rows = big(args, half_lives, raw)
    live_rows, live_note = ([], "") if args.no_live else live(args, raw)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "fair_share.json").write_text(json.dumps(raw, indent=1))
    print(f"total {time.perf_counter() - began:.0f} s on {os.cpu_count()} cores", file=sys.stderr)

    print(f"Effect, 8 x 8 GPUs, seeds {' '.join(map(str, args.seeds))} (JCT and queue in hours; light = b, c, d)\n")
    table(
        ["load", "policy", "fair share", "avg JCT", "avg queue", "Jain (tenants)", "light JCT", "heavy JCT",
         "heavy / light", "preemptions", "swapped back", "ms per replay", "time vs off"],
        effect_rows, args.markdown,
    )  # fmt: skip
    if big_rows:
        print(f"\nLarger traces, median of {args.big_repeat}\n")
        table(
            ["jobs", "GPUs", "load", "policy", "fair share", "seconds", "vs off", "rounds", "preemptions", "avg JCT"],
            big_rows, args.markdown,
        )  # fmt: skip
    if live_rows:
        print(f"\nLive reads ({live_note}), median of {args.repeat}\n")
        table(["call", "ms", "queries"], live_rows, args.markdown)
    elif args.no_live:
        print("\nLive reads: skipped (--no-live)")


if __name__ == "__main__":
    main()
