"""GPU space-sharing (issue #17) on the Alibaba GPU-sharing trace: whole GPUs vs first-fit, best-fit, matching.

Tasks: the share tasks (``num_gpu`` 1, ``gpu_milli`` < 1000) of ``alibaba_openb_pod_list_default.csv.gz`` that
ran (505 never did: no run time), from day 100 on (4 isolated earlier tasks are left out: they would stretch the
measured span over 100 idle days). ``LS`` is online, the rest offline. Arrivals are compressed ``--compress``
times (durations kept) so that the trace's few concurrent tasks load a cluster at all. Cluster: ``--gpus`` GPUs
taken evenly through the node list (every k-th GPU: its mix of models; P100s take no shares). Read in place from
``../shared/traces/``, never copied. Cite Weng et al., ATC '23 with the figures.

Run: ``.venv/bin/python bench/sharing.py [--compress 20] [--gpus 64] [--markdown]``  (about a minute).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from scheduling.core.sharing import GIB, SharingPolicy
from scheduling.sim.share_metrics import ShareMetrics, measure_sharing
from scheduling.sim.share_trace import ShareTask, openb_gpus, read_openb_nodes, read_openb_pods
from scheduling.sim.sharing import simulate_sharing

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces"
OUT = REPO / "bench" / "out"
FIRST_DAY = 100


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--compress", type=float, default=20.0)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--budgets", type=float, nargs="+", default=[0.05, 0.15], help="online slowdown budgets")
    parser.add_argument(
        "--memory-scale",
        type=float,
        default=0.5,
        help="also replay with each task's memory limit at this part of its default (0: not), budget 15%%",
    )
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()

    tasks, never_ran = read_openb_pods(TRACES / "alibaba_openb_pod_list_default.csv.gz")
    tasks = [t for t in tasks if t.submit_time >= FIRST_DAY * 86400]
    t0 = tasks[0].submit_time
    tasks = [replace(t, submit_time=t0 + (t.submit_time - t0) / args.compress) for t in tasks]
    every = openb_gpus(read_openb_nodes(TRACES / "alibaba_openb_node_list_gpu_node.csv.gz"))
    step = max(1, len(every) // args.gpus)
    gpus = every[::step][: args.gpus]
    online = sum(t.workload_class == "online" for t in tasks)
    print(
        f"{len(tasks)} share tasks ({online} online, {never_ran} never ran), {len(gpus)} GPUs "
        f"({sum(g.sharing for g in gpus)} take shares), arrivals compressed {args.compress:g}x"
    )
    rows: list[tuple[str, ShareMetrics, float]] = []
    runs: list[tuple[str, bool, str, SharingPolicy]] = [("whole-gpu", False, "first-fit", SharingPolicy())]
    for budget in args.budgets:
        suffix = "" if budget == 0.05 else f" (budget {budget:.0%})"
        for placer in ("first-fit", "best-fit", "matching"):
            runs.append((placer + suffix, True, placer, SharingPolicy(slowdown_budget=budget)))
    light: list[ShareTask] = []
    if args.memory_scale > 0:
        # The trace states no GPU memory: this variant gives each task a limit below its compute share's part of
        # a 16 GiB GPU, the case where compute, not memory, decides how much offline work fits (and evictions).
        light = [replace(t, gpu_memory_bytes=int(args.memory_scale * t.gpu_fraction * 15 * GIB)) for t in tasks]
        for placer in ("first-fit", "best-fit", "matching"):
            label = f"{placer} (budget 15%, memory {args.memory_scale:g}x)"
            runs.append((label, True, placer, SharingPolicy(slowdown_budget=0.15)))
    for label, sharing, placer, policy in runs:
        t = time.perf_counter()
        replay = light if "memory" in label else tasks
        m = measure_sharing(simulate_sharing(replay, gpus, sharing=sharing, placer=placer, policy=policy))
        rows.append((label, m, time.perf_counter() - t))
        print(f"{label}: {rows[-1][2]:.1f} s", flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sharing.json").write_text(json.dumps({label: m.summary() for label, m, _ in rows}, indent=2))
    base = rows[0][1]
    header = (
        "| placement | GPUs allocated | utilization (all / allocated) | vs whole | fragmented GPUs | offline JCT "
        "mean / p50 / p95 (s) | offline queue (s) | online queue (s) | online slowdown mean / max | evictions |"
    )
    print(header)
    print("|" + "---|" * 10)
    for label, m, _ in rows:
        print(
            f"| {label} | {m.allocation:.0%} | {m.utilization:.0%} / {m.utilization_allocated:.0%} | "
            f"{m.utilization_allocated / base.utilization_allocated:.2f}x | {m.fragmented_gpus:.1f} | "
            f"{m.offline_jct_mean:,.0f} / {m.offline_jct_p50:,.0f} / {m.offline_jct_p95:,.0f} | "
            f"{m.offline_queue_mean:,.0f} | {m.online_queue_mean:,.0f} | "
            f"{m.online_slowdown_mean:.1%} / {m.online_slowdown_max:.1%} | {m.evictions} ({m.evicted_tasks} tasks) |"
        )


if __name__ == "__main__":
    main()
