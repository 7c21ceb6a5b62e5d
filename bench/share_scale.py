"""How long the live share round's placers and the share start forecast take with a long queue of shares (#17).

Every scheduling round runs the configured share placer (``CORRAL_SHARE_PLACER``) over every waiting share, and the
beat runs the share start forecast over them too, so both must stay well inside a round's budget even when
thousands of shares wait. Three clusters of 80 GiB shared GPUs, each with ``--waiting`` shares (0.1 to 0.5 of a
GPU, a few shapes as in a real queue) waiting, their run times known:

- ``full``: every GPU holds one 0.9 offline share (nothing fits until one ends);
- ``half``: half the GPUs hold an online 0.5 share, the other half are empty (a burst lands);
- ``mixed``: every GPU holds a 0.25-0.75 share; some waiting shares fit, most wait.

Pure Python, no database. Run: ``.venv/bin/python bench/share_scale.py [--gpus 400] [--waiting 5000] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from scheduling.core.share_forecast import forecast_share_starts
from scheduling.core.share_placement import PLACERS
from scheduling.core.sharing import GIB, ShareDemand, SharedGpu, SharedGpuState, WorkloadClass, tenant_for

Cluster = tuple[list[SharedGpuState], dict[int, float]]
T = TypeVar("T")


def cluster(kind: str, gpus: int, rng: random.Random) -> Cluster:
    """The shared GPUs and the expected end of every running share (job ids from 1,000,000 up)."""
    states, ends = [], {}
    for i in range(gpus):
        state = SharedGpuState(SharedGpu("n", i, 80 * GIB))
        if kind == "full" or (kind == "half" and i % 2 == 0) or kind == "mixed":
            fraction = {"full": 0.9, "half": 0.5, "mixed": rng.choice([0.25, 0.5, 0.75])}[kind]
            online = kind == "half"
            job = 1_000_000 + i
            demand = ShareDemand(job, fraction, WorkloadClass.ONLINE if online else WorkloadClass.OFFLINE)
            state = state.with_tenant(tenant_for(state, demand))
            ends[job] = rng.uniform(0, 7_200)
        states.append(state)
    return states, ends


def waiting_shares(n: int, rng: random.Random) -> tuple[list[ShareDemand], dict[int, float]]:
    demands = [ShareDemand(j, rng.choice([0.1, 0.25, 0.25, 0.5])) for j in range(n)]
    return demands, {d.job_id: rng.uniform(600, 7_200) for d in demands}


def timed(call: Callable[[], T], repeat: int) -> tuple[float, T]:
    """The median wall time of ``repeat`` calls, and the last call's result."""
    times, result = [], call()  # one call outside the timings (warm caches)
    for _ in range(repeat):
        start = time.perf_counter()
        result = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def rows(kind: str, gpus_count: int, waiting_count: int, repeat: int) -> list[str]:
    rng = random.Random(7)
    gpus, ends = cluster(kind, gpus_count, rng)
    waiting, runs = waiting_shares(waiting_count, rng)
    head = f"| {kind} | {gpus_count:,} | {waiting_count:,} |"
    out = []
    for name, place in PLACERS.items():
        seconds, placed = timed(partial(place, gpus, waiting, 0.0), repeat)
        out.append(f"{head} {name} | {seconds:.2f} | {len(placed.placements):,} |")
    forecast = partial(forecast_share_starts, gpus, waiting, ends=ends, runs=runs, now=0.0, horizon=7 * 86_400)
    seconds, starts = timed(forecast, repeat)
    out.append(f"{head} start forecast | {seconds:.2f} | {sum(1 for f in starts.values() if f.at is not None):,} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gpus", type=int, default=400)
    parser.add_argument("--waiting", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"| cluster | GPUs | waiting | what | seconds (median of {args.repeat}) | placed / given a time |")
    print("|---|---|---|---|---|---|")
    for kind in ("full", "half", "mixed"):
        print("\n".join(rows(kind, args.gpus, args.waiting, args.repeat)), flush=True)


if __name__ == "__main__":
    main()
