"""Elastic capacity (#19): loaning an inference pool's idle servers to training and growing elastic jobs into them.

Training: Philly-derived traces, the shared ``philly_poisson_n1000_g64_load0.9_seed0`` and more drawn with the
shared ``derive.py poisson`` into ``bench/out/`` (``--loads``, ``--seeds``), on 8 nodes x 8 GPUs, ``count``
placement, under ``--policy`` (FIFO by default, the house default). Inference: a pool of ``--servers`` 8-GPU
servers whose busy share follows the default diurnal curve of :mod:`scheduling.sim.demand` (20 % at 04:00, 95 %
at 16:00, stepped every 10 minutes); the serving side reclaims with a 60 s deadline. Elastic jobs: ``--share`` of
jobs may grow to 4x their size in multiples of it, on the default Amdahl curve (95 % parallel).

Arms, each against ``base`` (the same fleet, no loaning, no elastic jobs):

- ``loan``: idle servers are lent to training; reclaims shrink, then preempt, by least server preemption cost.
- ``elastic``: no loaning; elastic jobs grow into idle training GPUs (knapsack on JCT reduction).
- ``loan+elastic``: both (Aryl's setting). The knapsack values JCT reduction from each job's remaining work,
  which the simulator knows (an oracle estimate).
- ``loan+elastic (throughput)``: both, valuing sizes by throughput gain: needs no remaining-time estimate.

Run: ``.venv/bin/python bench/elastic.py [--loads 0.9 1.2 1.5] [--seeds 0 1 2] [--markdown]`` (65-100 s on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from sim_policies import trace_path

from scheduling.core.elastic import Objective
from scheduling.sim.cluster import Cluster
from scheduling.sim.elastic_sim import ElasticSetup, LoanSetup, simulate_elastic
from scheduling.sim.trace import read_trace

#: Aryl's reported gains over no loaning and no elasticity (Li et al., EuroSys '23): the goal of issue #19.
ARYL = {"queue": 1.53, "jct": 1.50, "usage": 0.269}

Arm = tuple[LoanSetup, ElasticSetup | None]


def arms(servers: int, share: float, deadline: float) -> dict[str, Arm]:
    serving_only = LoanSetup(servers, lend=False, deadline=deadline)
    lending = LoanSetup(servers, deadline=deadline)
    return {
        "base": (serving_only, None),
        "loan": (lending, None),
        "elastic": (serving_only, ElasticSetup(share)),
        "loan+elastic": (lending, ElasticSetup(share)),
        "loan+elastic (throughput)": (lending, ElasticSetup(share, objective=Objective.THROUGHPUT)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loads", type=float, nargs="+", default=[0.9, 1.2, 1.5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--servers", type=int, default=8, help="8-GPU servers in the inference pool")
    parser.add_argument("--share", type=float, default=0.5, help="share of jobs that are elastic")
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--deadline", type=float, default=60.0, help="reclaim deadline, seconds (checkpoints: 30 s)")
    parser.add_argument("--markdown", action="store_true", help="print the table for docs/benchmarks.md")
    args = parser.parse_args()

    cluster = Cluster(8, 8)
    rows: list[tuple[float, str, dict[str, float]]] = []
    for load in args.loads:
        per_arm: dict[str, list[dict[str, float]]] = {}
        for seed in args.seeds:
            trace = read_trace(trace_path(load, seed, 1000, 64))
            base: dict[str, float] | None = None
            for name, (loan, elastic) in arms(args.servers, args.share, args.deadline).items():
                started = time.perf_counter()
                s = simulate_elastic(trace, args.policy, cluster=cluster, loan=loan, elastic=elastic).summary()
                wall = time.perf_counter() - started
                base = base or s
                per_arm.setdefault(name, []).append(
                    {
                        "queue": base["avg_queue"] / s["avg_queue"],
                        "jct": base["avg_jct"] / s["avg_jct"],
                        "usage": s["usage"] / base["usage"] - 1.0,
                        "usage_abs": s["usage"],
                        "preemptions": s["preemptions"],
                        "resizes": s["resizes"],
                        "reclaims": s["reclaims"],
                        "on_time": s["reclaims_on_time"],
                        "cost": s["reclaim_cost_gpu_hours"],
                        "wall": wall,
                    }
                )
                print(f"load {load} seed {seed} {name}: {_line(per_arm[name][-1])}", flush=True)
        for name, runs in per_arm.items():
            rows.append((load, name, {k: statistics.fmean(r[k] for r in runs) for k in runs[0]} | _sums(runs)))
    if args.markdown:
        _markdown(rows, args)


def _sums(runs: list[dict[str, float]]) -> dict[str, float]:
    return {"reclaims": sum(r["reclaims"] for r in runs), "on_time": sum(r["on_time"] for r in runs)}


def _line(r: dict[str, float]) -> str:
    return (
        f"queue x{r['queue']:.2f}, JCT x{r['jct']:.2f}, usage {100 * r['usage']:+.1f} % ({100 * r['usage_abs']:.1f} %),"
        f" {r['preemptions']:.0f} preemptions, {r['resizes']:.0f} resizes,"
        f" reclaims {r['on_time']:.0f}/{r['reclaims']:.0f} on time, {r['wall']:.1f} s"
    )


def _markdown(rows: list[tuple[float, str, dict[str, float]]], args: argparse.Namespace) -> None:
    fmt: dict[str, Callable[[float], str]] = {
        "queue": lambda v: f"{v:.2f}x",
        "jct": lambda v: f"{v:.2f}x",
        "usage": lambda v: f"{100 * v:+.1f} %",
        "usage_abs": lambda v: f"{100 * v:.1f} %",
        "preemptions": lambda v: f"{v:.0f}",
        "resizes": lambda v: f"{v:.0f}",
        "cost": lambda v: f"{v:.1f}",
        "wall": lambda v: f"{v:.1f}",
    }
    print(
        f"\n{args.policy}, {args.servers} loanable 8-GPU servers, reclaim deadline {args.deadline:g} s, elastic share "
        f"{args.share}, seeds "
        f"{' '.join(map(str, args.seeds))} (means; reclaims summed). Aryl: queueing {ARYL['queue']}x, "
        f"JCT {ARYL['jct']}x, usage +{100 * ARYL['usage']:.1f} %.\n"
    )
    print(
        "| load | arm | queueing reduction | JCT reduction | usage vs base | usage | preemptions | resizes "
        "| reclaims on time | reclaim cost (GPU-h) | wall (s) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for load, name, r in rows:
        cells = [fmt[k](r[k]) for k in ("queue", "jct", "usage", "usage_abs", "preemptions", "resizes")]
        reclaims = f"{r['on_time']:.0f} / {r['reclaims']:.0f}" if r["reclaims"] else "-"
        print(f"| {load} | {name} | {' | '.join(cells)} | {reclaims} | {fmt['cost'](r['cost'])} | {r['wall']:.1f} |")


if __name__ == "__main__":
    main()
