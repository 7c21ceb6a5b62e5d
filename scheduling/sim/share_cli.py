"""``corral simulate --sharing on``: replay a trace's single-GPU tasks with GPU shares (issue #17).

Kept out of :mod:`scheduling.sim.cli` so the whole-GPU command stays as it was. The replay is
:func:`scheduling.sim.sharing.simulate_sharing`: the whole-GPU baseline first, then each chosen share placer, on
the cluster's GPUs taken as 80 GiB Volta-or-later GPUs that accept shares.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import typer

from scheduling.core.sharing import GIB, SharedGpu
from scheduling.sim.cluster import Cluster
from scheduling.sim.share_metrics import ShareMetrics, measure_sharing
from scheduling.sim.share_trace import read_share_trace
from scheduling.sim.sharing import simulate_sharing
from scheduling.sim.trace import TraceError

GPU_MEMORY = 80 * GIB


def cluster_gpus(cluster: Cluster) -> list[SharedGpu]:
    """The cluster's GPUs as shared GPUs: each node's, numbered from 0 on that node."""
    sizes = [g for g, _ in cluster.layout] if cluster.layout else [cluster.gpus_per_node] * cluster.nodes
    return [SharedGpu(f"node{n}", k, GPU_MEMORY) for n, size in enumerate(sizes) for k in range(size)]


def run_sharing(trace: Path, cluster: Cluster, placers: Sequence[str], *, as_json: bool) -> None:
    """Replay, then print the table (or the JSON: ``{"sharing": {mode: summary}}``). A trace that cannot be
    read ends the command with one line and exit status 2."""
    try:
        tasks = read_share_trace(trace)
    except (TraceError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if not tasks:
        typer.echo("error: the trace has no single-GPU tasks to share GPUs", err=True)
        raise typer.Exit(2)
    gpus = cluster_gpus(cluster)
    metrics = [measure_sharing(simulate_sharing(tasks, gpus, sharing=False))]
    metrics += [measure_sharing(simulate_sharing(tasks, gpus, placer=p)) for p in placers]
    if as_json:
        typer.echo(json.dumps({"sharing": {m.mode: m.summary() for m in metrics}}, indent=2))
    else:
        _print_table(metrics)


def _print_table(metrics: Sequence[ShareMetrics]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="GPU sharing (first come, first served)")
    cols = ("placement", "util (allocated)", "offline JCT (s)", "offline queue (s)", "online slowdown", "evictions")
    for col in cols:
        table.add_column(col, justify="right")
    for m in metrics:
        table.add_row(
            m.mode,
            f"{100 * m.utilization_allocated:.0f}%",
            f"{m.offline_jct_mean:,.0f}",
            f"{m.offline_queue_mean:,.0f}",
            f"{100 * m.online_slowdown_mean:.1f}% (max {100 * m.online_slowdown_max:.1f}%)",
            str(m.evictions),
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)
