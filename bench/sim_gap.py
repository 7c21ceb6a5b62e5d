"""Where ``tiresias-gittins`` loses average JCT to the SRSF oracle, and three more ways it could have ordered jobs.

For each trace, every job's JCT under Gittins minus its JCT under SRSF is summed per class of job (service decile,
GPU count) and divided by SRSF's total JCT. The shares add up to the ratio minus one, so they say which jobs the gap
is made of. Averaged over seeds.

Then three variants that change only how Gittins orders jobs, each a guess at where the loss comes from:

- ``coarser grid``: service levels 2x or 3x apart instead of 1.5x, so a job keeps its GPUs longer between index
  changes (the 10x finer grid in ``sim_policies.py`` was worse; this is the other direction);
- ``running job first``: among jobs with the same index, the one holding GPUs keeps them, instead of the earliest
  submitted taking them over. Tests whether large jobs lose by taking turns at the same index;
- ``more service first``: among jobs with the same index, the one with more attained service goes first (finish one
  large job rather than share among many).

Run: ``.venv/bin/python bench/sim_gap.py [--loads 1.0 1.2 1.5] [--seeds 0 1 2 3 4 5] [--markdown]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_policies import trace_path  # noqa: E402

from scheduling.core.gittins import geometric_grid  # noqa: E402
from scheduling.core.model import JobState, JobView  # noqa: E402
from scheduling.core.policies.base import Key  # noqa: E402
from scheduling.core.policies.gittins import TiresiasGittins  # noqa: E402
from scheduling.sim.simulator import Cluster, SimResult, simulate  # noqa: E402
from scheduling.sim.trace import read_trace  # noqa: E402


class RunningFirstGittins(TiresiasGittins):
    """Same index; among equal indexes the running job ranks first. Simulator-only (``order`` is not changed)."""

    def key_and_expiry(self, job: JobView, now: float) -> tuple[Key, float]:
        (neg_index, level, submit), expiry = super().key_and_expiry(job, now)
        return (neg_index, 0.0 if job.state == JobState.RUNNING else 1.0, level, submit), expiry


class MoreServiceFirstGittins(TiresiasGittins):
    """Same index; among equal indexes the higher service level ranks first. Simulator-only."""

    def key_and_expiry(self, job: JobView, now: float) -> tuple[Key, float]:
        (neg_index, level, submit), expiry = super().key_and_expiry(job, now)
        return (neg_index, -level, submit), expiry


VARIANTS: dict[str, Callable[[], TiresiasGittins]] = {
    "tiresias-gittins": TiresiasGittins,
    "coarser grid (2x)": lambda: TiresiasGittins(grid=geometric_grid(ratio=2.0)),
    "coarser grid (3x)": lambda: TiresiasGittins(grid=geometric_grid(ratio=3.0)),
    "running job first": RunningFirstGittins,
    "more service first": MoreServiceFirstGittins,
}


def excess_shares(oracle: SimResult, policy: SimResult) -> dict[str, float]:
    """Each job class's share of ``policy``'s excess JCT over ``oracle``, as a fraction of the oracle's total."""
    theirs = {o.job_id: o.jct for o in policy.outcomes}
    total = sum(o.jct for o in oracle.outcomes)
    by_service = sorted(oracle.outcomes, key=lambda o: o.gpus * o.duration)
    n = len(by_service)
    shares: dict[str, float] = defaultdict(float)
    for rank, o in enumerate(by_service):
        excess = (theirs[o.job_id] - o.jct) / total
        decile = min(9, rank * 10 // n)
        shares["service: smallest 90 %" if decile < 9 else "service: largest 10 %"] += excess
        shares[f"{o.gpus} GPU"] += excess
    return shares


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loads", type=float, nargs="+", default=[1.0, 1.2, 1.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5])
    parser.add_argument("--placements", nargs="+", default=["count", "consolidate"])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    cluster = Cluster(8, 8)
    shares: dict[tuple[str, float], dict[str, list[float]]] = {}
    ratios: dict[tuple[str, float], dict[str, list[float]]] = {}
    largest: dict[tuple[str, float], list[float]] = {}
    for placement in args.placements:
        for load in args.loads:
            col = (placement, load)
            for seed in args.seeds:
                trace = read_trace(trace_path(load, seed, 1000, cluster.total_gpus))
                oracle = simulate(trace, "srsf", cluster=cluster, placement=placement)
                base = sum(o.jct for o in oracle.outcomes)
                top = sorted(o.gpus * o.duration for o in oracle.outcomes)[9 * len(oracle.outcomes) // 10]
                largest.setdefault(col, []).append(
                    sum(o.jct for o in oracle.outcomes if o.gpus * o.duration >= top) / base
                )
                for name, make in VARIANTS.items():
                    result = simulate(trace, make(), cluster=cluster, placement=placement)
                    ratios.setdefault(col, {}).setdefault(name, []).append(sum(o.jct for o in result.outcomes) / base)
                    if name == "tiresias-gittins":
                        for key, value in excess_shares(oracle, result).items():
                            shares.setdefault(col, {}).setdefault(key, []).append(value)
                print(f"{placement} load {load} seed {seed} done", file=sys.stderr)

    columns = sorted(ratios)
    header = ["", *[f"{p} {load}" for p, load in columns]]
    gap_rows = [
        ["ratio to SRSF", *[f"{statistics.mean(ratios[c]['tiresias-gittins']):.2f}x" for c in columns]],
        ["SRSF's own JCT in its largest 10 %", *[f"{statistics.mean(largest[c]):.0%}" for c in columns]],
    ]
    keys = ["service: smallest 90 %", "service: largest 10 %", "1 GPU", "2 GPU", "4 GPU", "8 GPU"]
    for k in keys:
        gap_rows.append([f"excess from {k}", *[f"{statistics.mean(shares[c].get(k, [0.0])):+.3f}" for c in columns]])
    variant_rows = [[name, *[f"{statistics.mean(ratios[c][name]):.2f}x" for c in columns]] for name in VARIANTS]
    for rows in (gap_rows, variant_rows):
        if args.markdown:
            print("| " + " | ".join(header) + " |")
            print("|" + "---|" * len(header))
            for cells in rows:
                print("| " + " | ".join(cells) + " |")
        else:
            for cells in [header, *rows]:
                print("".join(c.ljust(40 if i == 0 else 16) for i, c in enumerate(cells)))
        print()


if __name__ == "__main__":
    main()
