"""``corral simulate --loan-pool N / --elastic-share F``: the elastic replay against no loaning and no elasticity.

Kept out of :mod:`scheduling.sim.cli` so the reference command stays as it is; ``simulate`` calls :func:`run_elastic`
when a loan pool, an elastic share or a trace's ``max_gpus`` column asks for it. Each policy is replayed twice on the
same fleet (:mod:`scheduling.sim.elastic_sim`): the baseline (the pool serves and never lends, no job grows) and
the elastic run. ``--json`` prints ``{"elastic": {policy: {"baseline": {...}, "elastic": {...}}}}`` with the keys of
``ElasticResult.summary``. Every refusal is one line and exit status 2.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import typer

from scheduling.core.policies import resolve_policy
from scheduling.sim.cluster import Cluster
from scheduling.sim.demand import Demand, Diurnal, read_series
from scheduling.sim.elastic_setup import ElasticSetup, LoanSetup
from scheduling.sim.elastic_sim import simulate_elastic
from scheduling.sim.trace import TraceJob


def run_elastic(
    jobs: Sequence[TraceJob],
    policies: Sequence[str],
    cluster: Cluster,
    *,
    placement: str,
    servers: int,
    server_gpus: int,
    demand_file: Path | None,
    deadline: float,
    share: float,
    factor: int,
    as_json: bool,
) -> None:
    """Replay ``jobs`` under each policy with and without loaning and elastic jobs, and print the comparison."""
    for name in policies:
        policy = resolve_policy(name)
        if policy.preemptive or policy.guarantees:
            _refuse(f"--loan-pool and --elastic-share take non-preemptive policies without quotas, not {name}")
    demand: Demand = Diurnal()
    if demand_file is not None:
        try:
            demand = read_series(demand_file)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            _refuse(str(exc))
    try:
        lending = LoanSetup(servers, server_gpus, demand, deadline=deadline) if servers else None
        serving = LoanSetup(servers, server_gpus, demand, lend=False, deadline=deadline) if servers else None
        elastic = ElasticSetup(share=share, factor=factor)
    except ValueError as exc:
        _refuse(str(exc))
    out: dict[str, dict[str, dict[str, float | int]]] = {}
    for name in policies:
        base = simulate_elastic(jobs, name, cluster=cluster, placement=placement, loan=serving).summary()
        grown = simulate_elastic(
            jobs, name, cluster=cluster, placement=placement, loan=lending, elastic=elastic
        ).summary()
        out[name] = {"baseline": base, "elastic": grown}
    if as_json:
        typer.echo(json.dumps({"elastic": out}, indent=2))
    else:
        _print_table(out)


def _print_table(out: dict[str, dict[str, dict[str, float | int]]]) -> None:
    from rich.console import Console
    from rich.table import Table

    from scheduling.sim.units import time_scale

    scale = time_scale(run[k] for runs in out.values() for run in runs.values() for k in ("avg_jct", "avg_queue"))
    table = Table(title="Loaning and elastic jobs against neither")
    for col in ("policy", "run", f"avg JCT ({scale.unit})", f"avg queue ({scale.unit})", "usage", "preempt",
                "resizes", "reclaims on time"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, runs in out.items():
        for label, s in runs.items():
            reclaims = f"{s['reclaims_on_time']}/{s['reclaims']}" if s["reclaims"] else "-"
            table.add_row(
                name, label, scale.number(s["avg_jct"]), scale.number(s["avg_queue"]), f"{100 * s['usage']:.1f}%",
                str(s["preemptions"]), str(s["resizes"]), reclaims,
            )  # fmt: skip
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    console.print(table)


def _refuse(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)
