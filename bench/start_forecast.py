"""How long one start forecast (``scheduling.core.forecast.forecast_starts``) takes on a busy cluster.

The beat runs the forecast every ``CORRAL_FORECAST_EVERY`` seconds (30 by default) over the whole queue, so its cost
must stay well inside that period. The cluster is ``sim_decide_speed.big_snapshot`` scaled down: about 90% of the
GPUs held by running jobs, the rest of the jobs queued, Philly's GPU-count mix; every job's remaining run time is
known (the generator's duration minus what it ran). Run:
``.venv/bin/python bench/start_forecast.py [--repeat 3] [--sizes 64:1000,256:5000]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_decide_speed import big_snapshot  # noqa: E402  (a sibling script, not a package)

from scheduling.core.engine import needs_preemptive_walk  # noqa: E402
from scheduling.core.forecast import DEFAULT_WORK, StartOutlook, forecast_starts, round_budget  # noqa: E402
from scheduling.core.model import JobState  # noqa: E402
from scheduling.core.policies import resolve_policy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sizes", default="64:1000,256:5000", help="nodes:jobs pairs (8 GPUs per node)")
    parser.add_argument("--policy", action="append")
    parser.add_argument("--work", type=int, default=DEFAULT_WORK, help="job-rounds budget (CORRAL_FORECAST_WORK)")
    args = parser.parse_args()
    policies = args.policy or ["fifo", "fifo-backfill", "qssf", "tiresias-las", "fifo-backfill+quota"]
    print(f"{'GPUs':>6s} {'jobs':>6s} {'pending':>7s} {'rounds':>6s} {'policy':20s} {'median s':>9s} {'estimated':>9s}")
    for size in args.sizes.split(","):
        nodes, jobs = (int(x) for x in size.split(":"))
        snap = big_snapshot(nodes=nodes, jobs=jobs)
        remaining = {j.id: (j.duration or 0.0) - j.executed_time for j in snap.jobs}
        pending = sum(1 for j in snap.jobs if j.state == JobState.PENDING)
        for policy in policies:
            rounds = round_budget(
                len(snap.jobs), preemptive=needs_preemptive_walk(resolve_policy(policy)), work=args.work
            )
            times = []
            out = {}
            for _ in range(args.repeat):
                began = time.perf_counter()
                out = forecast_starts(
                    snap, now=float(jobs), remaining=remaining, policy=policy, placement="topology", max_rounds=rounds
                )
                times.append(time.perf_counter() - began)
            estimated = sum(1 for f in out.values() if f.outlook == StartOutlook.ESTIMATED)
            median = statistics.median(times)
            print(f"{nodes * 8:6d} {jobs:6d} {pending:7d} {rounds:6d} {policy:20s} {median:9.2f} {estimated:9d}")


if __name__ == "__main__":
    main()
