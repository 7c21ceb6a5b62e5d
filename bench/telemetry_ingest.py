"""Telemetry ingest rate: samples per second the control plane stores, end to end through the agent endpoint.

Each POST is what an agent sends: ``POST /api/v1/agent/samples/`` with a node token and a JSON body of wire-format
samples, answered after validation (``GpuSample.from_dict``), storage (COPY on PostgreSQL, ``bulk_create`` on
SQLite), the latest-row upsert and the health rules. Requests go through Django's whole stack in-process (no
socket: the figure is the portal's cost, not the network's). Bodies are encoded before the clock starts. Shapes:

- ``backlog``: 496 samples per POST (62 periods of an 8-GPU node; the agent sends at most 500), what an agent sends
  while draining its buffer after an outage. This is the throughput figure.
- ``steady``: one sample per GPU (8) per POST, what every node sends every sampling period.

``--workers N`` posts from N processes at once (as N web workers would serve N agents); each process owns whole
nodes, as each agent posts only its own. Besides wall-clock rates the bench reports the CPU the portal processes
and their PostgreSQL backends spent per sample, read from ``/proc``: on a shared machine the wall clock measures the
neighbours too, while CPU per sample says what the ingest itself costs (``2 / cpu_per_sample`` is what two idle
cores could take).

Run on PostgreSQL (the production database)::

    .venv/bin/python scripts/test_servers.py --no-chromium -- .venv/bin/python bench/telemetry_ingest.py

Without ``DATABASE_URL`` it runs on a throw-away SQLite file in a temporary directory (no PostgreSQL CPU figure).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
if not os.environ.get("DATABASE_URL"):
    os.environ["CORRAL_DATA_DIR"] = tempfile.mkdtemp(prefix="corral-bench-")

import django  # noqa: E402 - settings must be chosen first

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from portal.nodes.services import GpuReport, node_register, node_token_issue  # noqa: E402
from portal.telemetry.models import Sample  # noqa: E402
from telemetry.sample import GpuSample  # noqa: E402

GPUS_PER_NODE = 8
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


def _reading(uuid: str, index: int, ts: float, k: int) -> dict:
    return GpuSample(
        gpu_uuid=uuid, index=index, timestamp=ts, gpu_util=float(k % 100), mem_used_mb=40_000 + k % 1000,
        mem_total_mb=81_559, temperature_c=60.0 + k % 7, power_w=500.0 + k % 50, sm_clock_mhz=1980,
        throttle_reasons=0, ecc_sbe_volatile=0, ecc_dbe_volatile=0, ecc_corrected_total=k // 100,
        ecc_uncorrected_total=0, remapped_rows=0, remapped_rows_pending=False, remapped_rows_failed=False,
        pcie_replay=0, processes=((1234, 40_000),),
    ).to_dict()  # fmt: skip


def _nodes(count: int, prefix: str) -> list[tuple[str, str]]:
    out = []
    for n in range(count):
        name = f"{prefix}{n:03d}"
        node, token = node_token_issue(name=name)
        gpus = [GpuReport(index=i, uuid=f"GPU-{name}-{i}", model="H100", memory_mb=81_559) for i in range(8)]
        node_register(node=node, hostname=name, address="10.0.0.1", agent_version="bench", gpus=gpus)
        out.append((name, token))
    return out


def _prepare(prefix: str, *, nodes: int, samples: int, batch: int) -> list[list[tuple[str, str]]]:
    """Per node, its POST bodies in order: (token, JSON). Timestamps start a day ago, ten seconds apart."""
    cluster = _nodes(nodes, prefix)
    steps = batch // GPUS_PER_NODE
    per_node: list[list[tuple[str, str]]] = [[] for _ in cluster]
    t0 = time.time() - 86_400
    sent = step = 0
    while sent < samples:
        for n, (name, token) in enumerate(cluster):
            items = [
                _reading(f"GPU-{name}-{i}", i, t0 + (step + s) * 10.0, step + s)
                for s in range(steps)
                for i in range(GPUS_PER_NODE)
            ]
            per_node[n].append((token, json.dumps({"samples": items, "xid_events": [], "dropped": 0})))
            sent += len(items)
            if sent >= samples:
                break
        step += steps
    return per_node


def _backend_cpu() -> float:
    """CPU seconds used so far by this connection's PostgreSQL backend (0 when unknown, e.g. on SQLite)."""
    if connection.vendor != "postgresql":
        return 0.0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def _post(bodies: list[tuple[str, str]], start: multiprocessing.synchronize.Event | None, out) -> None:  # noqa: ANN001
    """Send ``bodies`` in order; report latencies and CPU (own and the backend's) through ``out``."""
    clients: dict[str, APIClient] = {}
    for token, _ in bodies:
        if token not in clients:
            clients[token] = APIClient()
            clients[token].credentials(HTTP_AUTHORIZATION=f"Node {token}")
    pg_before = _backend_cpu()
    if start is not None:
        start.wait()
    own_before = time.process_time()
    latencies = []
    for token, body in bodies:
        began = time.perf_counter()
        response = clients[token].post("/api/v1/agent/samples/", body, content_type="application/json")
        latencies.append(time.perf_counter() - began)
        assert response.status_code == 200, response.content
    out.put((latencies, time.process_time() - own_before, _backend_cpu() - pg_before))


def run(prefix: str, *, nodes: int, samples: int, batch: int, workers: int) -> dict[str, float]:
    """POST ``samples`` samples in batches of ``batch`` over ``nodes`` nodes from ``workers`` processes."""
    per_node = _prepare(prefix, nodes=nodes, samples=samples, batch=batch)
    shares = [[b for n in range(w, len(per_node), workers) for b in per_node[n]] for w in range(workers)]
    sent = sum(len(json.loads(b)["samples"]) for share in shares for _, b in share)
    before = Sample.objects.count()
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    if workers == 1:
        began = time.perf_counter()
        _post(shares[0], None, results)
    else:
        connections.close_all()  # each child opens its own connection
        start = ctx.Event()
        children = [ctx.Process(target=_post, args=(share, start, results)) for share in shares]
        for child in children:
            child.start()
        time.sleep(1.0)  # let every child build its clients and connect
        began = time.perf_counter()
        start.set()
    reports = [results.get() for _ in range(workers)]
    elapsed = time.perf_counter() - began
    if workers > 1:
        for child in children:
            child.join()
    stored = Sample.objects.count() - before
    assert stored == sent, (stored, sent)
    latencies = [x for r in reports for x in r[0]]
    web_cpu, pg_cpu = sum(r[1] for r in reports), sum(r[2] for r in reports)
    return {
        "samples": sent,
        "posts": len(latencies),
        "seconds": elapsed,
        "samples_per_s": sent / elapsed,
        "p50_ms": statistics.median(latencies) * 1000,
        "p95_ms": statistics.quantiles(latencies, n=20)[-1] * 1000,
        "cpu_us_per_sample": (web_cpu + pg_cpu) / sent * 1e6,
        "pg_share": pg_cpu / (web_cpu + pg_cpu) if web_cpu + pg_cpu else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=200_000, help="samples per backlog run")
    parser.add_argument("--steady-posts", type=int, default=2_000, help="POSTs per steady-state run")
    parser.add_argument("--nodes", type=int, default=24)
    parser.add_argument("--workers", type=int, action="append", help="processes posting at once (default: 1 and 2)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"database: {connection.vendor}, cores: {os.cpu_count()}, load average before: {load}")
    print(f"{'shape':8s} {'workers':>7s} {'samples':>8s} {'POSTs':>6s} {'seconds':>8s} {'samples/s':>10s} "
          f"{'p50 ms':>7s} {'p95 ms':>7s} {'CPU us/sample':>14s} {'PG share':>8s}")  # fmt: skip
    runs = 0
    for _ in range(args.repeat):
        for workers in args.workers or [1, 2]:
            for shape, total, batch in (
                ("backlog", args.samples, 500),
                ("steady", args.steady_posts * GPUS_PER_NODE, GPUS_PER_NODE),
            ):
                runs += 1
                r = run(f"b{runs}-", nodes=args.nodes, samples=total, batch=batch, workers=workers)
                print(f"{shape:8s} {workers:7d} {r['samples']:8d} {r['posts']:6d} {r['seconds']:8.2f} "
                      f"{r['samples_per_s']:10.0f} {r['p50_ms']:7.1f} {r['p95_ms']:7.1f} "
                      f"{r['cpu_us_per_sample']:14.1f} {r['pg_share']:8.0%}")  # fmt: skip
    print(f"load average after: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
