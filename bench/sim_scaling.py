"""How simulator time grows with the number of jobs and of GPUs (one core, wall time per policy).

Traces are drawn with the shared ``derive.py poisson`` into ``bench/out/`` (Philly job sizes, Poisson arrivals at
the given offered load). Two sweeps: more jobs on 2,048 GPUs, and 25k jobs on more GPUs (arrivals scale with the
cluster, so the offered load stays the same). The headline goal: a 100k-job trace on 2,048 GPUs in under 30 s per
policy.

Run: ``.venv/bin/python bench/sim_scaling.py [--load 0.9] [--policies fifo tiresias-las ...] [--markdown]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_policies import OUT, trace_path  # noqa: E402

from scheduling.sim.simulator import Cluster, simulate  # noqa: E402
from scheduling.sim.trace import read_trace  # noqa: E402

DEFAULT_POLICIES = ["fifo", "fifo-backfill", "sjf", "qssf", "srtf", "srsf", "tiresias-las", "tiresias-gittins"]


def timed(jobs: int, gpus: int, load: float, policy: str) -> tuple[float, int, int]:
    trace = read_trace(trace_path(load, 0, jobs, gpus))
    t0 = time.perf_counter()
    result = simulate(trace, policy, cluster=Cluster(gpus // 8, 8), placement="count")
    return time.perf_counter() - t0, result.rounds, result.preemptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--load", type=float, default=0.9)
    parser.add_argument("--policies", nargs="+", default=DEFAULT_POLICIES)
    parser.add_argument("--jobs", type=int, nargs="+", default=[12_500, 25_000, 50_000, 100_000])
    parser.add_argument("--gpus", type=int, nargs="*", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = []
    for jobs in args.jobs:
        rows.append(("jobs", jobs, 2048, [timed(jobs, 2048, args.load, p) for p in args.policies]))
        print(f"{jobs} jobs on 2048 GPUs: " + ", ".join(f"{t:.1f}s" for t, _, _ in rows[-1][3]), file=sys.stderr)
    for gpus in args.gpus:
        jobs = 25_000  # same number of jobs; arrivals scale with the cluster so the offered load stays the same
        rows.append(("gpus", jobs, gpus, [timed(jobs, gpus, args.load, p) for p in args.policies]))
        print(f"{jobs} jobs on {gpus} GPUs: " + ", ".join(f"{t:.1f}s" for t, _, _ in rows[-1][3]), file=sys.stderr)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"sim_scaling_load{args.load}.json").write_text(
        json.dumps([{"sweep": s, "jobs": j, "gpus": g, "times": dict(zip(args.policies, [t for t, _, _ in r],
                                                                              strict=True))}
                    for s, j, g, r in rows], indent=1)
    )  # fmt: skip
    head = ["sweep", "jobs", "GPUs", *args.policies]
    sep = " | " if args.markdown else "  "
    print(("| " if args.markdown else "") + sep.join(head) + (" |" if args.markdown else ""))
    if args.markdown:
        print("|" + "---|" * len(head))
    for sweep, jobs, gpus, results in rows:
        cells = [sweep, f"{jobs:,}", f"{gpus:,}", *[f"{t:.1f} s" for t, _, _ in results]]
        print(("| " if args.markdown else "") + sep.join(cells) + (" |" if args.markdown else ""))


if __name__ == "__main__":
    main()
