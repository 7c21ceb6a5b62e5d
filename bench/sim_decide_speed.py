"""How long one ``decide()`` call takes on a big cluster: 10k GPUs, 25k jobs in the system.

The live loop calls ``decide`` every few seconds with the whole queue, so its cost bounds how large a cluster one
scheduler process can drive. Run: ``.venv/bin/python bench/sim_decide_speed.py [--repeat 15]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from scheduling.core import GpuSlot, JobState, JobView, NodeView, Snapshot, decide
from scheduling.core.policies import resolve_policy


def big_snapshot(*, nodes: int = 1250, gpus_per_node: int = 8, jobs: int = 25_000, seed: int = 0) -> Snapshot:
    """A busy cluster: about 90% of GPUs held by running jobs, the rest of the jobs queued."""
    rng = random.Random(seed)
    sizes = [1] * 76 + [2] * 2 + [4] * 10 + [8] * 12  # roughly Philly's GPU-count mix
    free: list[list[int]] = [list(range(n * gpus_per_node, (n + 1) * gpus_per_node)) for n in range(nodes)]
    views: list[JobView] = []
    target_busy = int(0.9 * nodes * gpus_per_node)
    busy = 0
    cursor = dict.fromkeys(sizes, 0)  # per job size, the first node that may still fit one: scans stay linear
    for i in range(jobs):
        gpus = rng.choice(sizes)
        node = cursor[gpus]
        submit = float(i)
        duration = float(rng.randint(3600, 200_000))
        while node < nodes and len(free[node]) < gpus:
            node += 1
        cursor[gpus] = node
        if busy + gpus <= target_busy and node < nodes:
            slots = tuple(GpuSlot(f"n{node}", free[node].pop()) for _ in range(gpus))
            busy += gpus
            executed = float(rng.randint(0, 3600))
            views.append(JobView(id=i, tenant=f"t{i % 20}", user=f"u{i % 300}", gpus=gpus, submit_time=submit,
                                 state=JobState.RUNNING, allocation=slots, attained_service=executed * gpus,
                                 executed_time=executed, last_started=submit, duration=duration))  # fmt: skip
        else:
            views.append(JobView(id=i, tenant=f"t{i % 20}", user=f"u{i % 300}", gpus=gpus, submit_time=submit,
                                 duration=duration))  # fmt: skip
    node_views = tuple(NodeView(f"n{n}", gpus_per_node, tuple(free[n]), rack=f"r{n // 32}") for n in range(nodes))
    return Snapshot(node_views, tuple(views))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--policy", action="append")
    args = parser.parse_args()
    snap = big_snapshot()
    gpus = sum(n.total_gpus for n in snap.nodes)
    print(f"{gpus} GPUs, {len(snap.jobs)} jobs, {sum(len(n.free_gpus) for n in snap.nodes)} GPUs free")
    policies = args.policy or ["fifo", "fifo-backfill", "sjf", "srsf", "tiresias-las", "tiresias-gittins", "qssf"]
    print(f"{'policy':18s} {'placement':12s} {'median ms':>10s} {'p90 ms':>8s}")
    for name in policies:
        for placement in ("topology", "count", "consolidate"):
            policy = resolve_policy(name)
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                decide(snap, now=30_000.0, policy=policy, placement=placement)
                times.append((time.perf_counter() - t0) * 1000)
            times.sort()
            print(f"{name:18s} {placement:12s} {statistics.median(times):10.1f} {times[int(0.9 * len(times))]:8.1f}")


if __name__ == "__main__":
    main()
