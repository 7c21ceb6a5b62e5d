"""``corral simulate``: replay a trace under one or more policies and compare them.

The command line and the ``--json`` shape are a stable interface: benchmarks and the portal's what-if page build
on them. Heavy imports (numpy, plotly) happen inside the command so other ``corral`` commands start fast.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:  # annotations only: the heavy modules are imported inside the command (see above)
    from scheduling.core.model import TenantLimits
    from scheduling.core.preemption import PreemptionCost
    from scheduling.sim.replay_setup import ReplaySetup
    from scheduling.sim.report import Run
    from scheduling.sim.simulator import Cluster
    from scheduling.sim.trace import TraceJob

PROGRESS_MIN_JOBS = 5000  # below this a run takes about a second: no bar


class PlacementName(StrEnum):
    # Upper-case members: a member called ``count`` would shadow ``str.count``. Typer matches the values.
    COUNT = "count"
    CONSOLIDATE = "consolidate"
    TOPOLOGY = "topology"


class Sharing(StrEnum):
    ON = "on"
    OFF = "off"


class SharePlacerName(StrEnum):
    FIRST_FIT = "first-fit"
    BEST_FIT = "best-fit"
    MATCHING = "matching"


def register(app: typer.Typer) -> None:
    """Add the ``simulate`` command to the ``corral`` app."""
    app.command("simulate")(simulate_command)


def simulate_command(
    trace: Annotated[
        Path,
        typer.Option(
            "--trace", help="CSV or CSV.gz trace in the shared schema.", exists=True, dir_okay=False, readable=True
        ),
    ],
    policy: Annotated[list[str], typer.Option("--policy", help="Policy name; repeat it, or 'all'.")],
    nodes: Annotated[
        int | None, typer.Option("--nodes", min=1, help="Nodes in a uniform simulated cluster (or use --setup).")
    ] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", min=1, help="GPUs per node.")] = None,
    setup: Annotated[
        Path | None,
        typer.Option(
            "--setup",
            help="JSON with the nodes and tenant quotas to replay with: a what-if run as GET /api/v1/whatif/<id>/ "
            "returns it. --nodes/--gpus-per-node replace its cluster; its quotas still apply.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    fair_share_half_life: Annotated[
        float | None,
        typer.Option(
            "--fair-share-half-life",
            min=0,
            help="Hours: +quota policies lend idle quota to the tenant with the least decayed usage first (0: off). "
            "Default: the --setup file's, else off.",
        ),
    ] = None,
    placement: Annotated[PlacementName, typer.Option("--placement", help="Where jobs go.")] = PlacementName.COUNT,
    racks: Annotated[int, typer.Option("--racks", min=1, help="Racks the nodes are spread over.")] = 1,
    preemption_overhead: Annotated[
        str, typer.Option("--preemption-overhead", help="Seconds per resumption, or 'helios' (7/30/60 s by size).")
    ] = "0",
    as_json: Annotated[bool, typer.Option("--json", help="Print the stable JSON summary.")] = False,
    report: Annotated[Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")] = None,
    sharing: Annotated[
        Sharing,
        typer.Option(
            "--sharing",
            help="on: replay the trace's single-GPU tasks with GPU shares (gpu_milli column; vc LS/online is "
            "online work) against a whole-GPU baseline, first come first served (--policy is not used).",
        ),
    ] = Sharing.OFF,
    share_placer: Annotated[
        list[SharePlacerName] | None,
        typer.Option("--share-placer", help="Where shares go with --sharing on; repeat it (default: all three)."),
    ] = None,
    loan_pool: Annotated[
        int,
        typer.Option(
            "--loan-pool",
            min=0,
            help="Servers of a loanable inference pool lent to training while idle (docs/elastic.md); compares "
            "against the same fleet without loaning or elastic jobs.",
        ),
    ] = 0,
    loan_gpus_per_node: Annotated[int, typer.Option("--loan-gpus-per-node", min=1, help="GPUs per pool server.")] = 8,
    loan_demand: Annotated[
        Path | None,
        typer.Option(
            "--loan-demand",
            help="CSV of the pool's busy servers per minute (minute,busy); default: a diurnal curve.",
            exists=True,
            dir_okay=False,
            readable=True,
        ),
    ] = None,
    reclaim_deadline: Annotated[
        float, typer.Option("--reclaim-deadline", min=0, help="Seconds a reclaim gives to empty its servers.")
    ] = 60.0,
    elastic_share: Annotated[
        float,
        typer.Option("--elastic-share", min=0, max=1, help="Share of jobs that may grow to --elastic-factor x size."),
    ] = 0.0,
    elastic_factor: Annotated[int, typer.Option("--elastic-factor", min=1, help="Elastic jobs' max / min.")] = 4,
) -> None:
    """Replay a job trace through the scheduling core under each policy and compare JCT, queueing and usage."""
    from scheduling.core.policies import POLICIES
    from scheduling.core.preemption import PreemptionCost
    from scheduling.sim.replay_setup import MAX_HALF_LIFE_HOURS
    from scheduling.sim.trace import TraceError, read_trace

    names = _policy_names(policy, list(POLICIES))
    if sharing == Sharing.ON:
        from scheduling.sim.share_cli import run_sharing

        shared = _cluster_and_quotas(setup, _setup_json(setup), nodes, gpus_per_node, racks).cluster
        assert shared is not None  # _cluster_and_quotas refuses a setup without one
        placers = [p.value for p in dict.fromkeys(share_placer or list(SharePlacerName))]
        run_sharing(trace, shared, placers, as_json=as_json)
        return
    try:
        overhead = PreemptionCost.parse(preemption_overhead)
    except ValueError:
        raise typer.BadParameter("a number of seconds >= 0 or 'helios'", param_hint="--preemption-overhead") from None
    try:
        jobs = read_trace(trace)
    except (TraceError, OSError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    stored = _setup_json(setup)
    loaded = _cluster_and_quotas(setup, stored, nodes, gpus_per_node, racks)
    cluster, tenants = loaded.cluster, loaded.tenants
    assert cluster is not None  # _cluster_and_quotas refuses a setup without one
    if loan_pool or elastic_share or any(j.max_gpus is not None for j in jobs):
        if report is not None or tenants:
            _refuse("--report and --setup quotas are not available with loaning or elastic jobs")
        from scheduling.sim.elastic_cli import run_elastic

        run_elastic(
            jobs, names, cluster, placement=placement.value, servers=loan_pool, server_gpus=loan_gpus_per_node,
            demand_file=loan_demand, deadline=reclaim_deadline, share=elastic_share, factor=elastic_factor,
            as_json=as_json,
        )  # fmt: skip
        return
    half_life = loaded.usage_half_life
    if fair_share_half_life is not None:
        if not 0 <= fair_share_half_life <= MAX_HALF_LIFE_HOURS:  # also refuses nan and inf
            _refuse(f"--fair-share-half-life must be a number of hours from 0 to {MAX_HALF_LIFE_HOURS:.0f}")
        half_life = fair_share_half_life * 3600.0 if fair_share_half_life > 0 else None
    runs = _run_all(jobs, names, cluster, tenants, placement.value, overhead, half_life)
    live = _live_policy(stored)
    if as_json:
        typer.echo(json.dumps({"policies": {r.metrics.policy: r.metrics.summary() for r in runs}}, indent=2))
    else:
        _print_table(runs, live=live)
    if report is not None:
        from scheduling.sim.report import render_report

        title = f"{trace.name} on {cluster.describe()} ({placement.value} placement)"
        report.write_text(render_report(runs, title=title, live=live), encoding="utf-8")
        typer.echo(f"report written to {report}", err=True)


def _policy_names(requested: list[str], known: list[str]) -> list[str]:
    if any(p == "all" for p in requested):
        return known
    bad = [p for p in requested if p.removesuffix("+quota") not in known]
    if bad:
        raise typer.BadParameter(
            f"unknown {', '.join(bad)}; choose from {', '.join(known)} or all", param_hint="--policy"
        )
    return list(dict.fromkeys(requested))


def _setup_json(setup: Path | None) -> object:
    """The --setup file's JSON (None without one). A file that cannot be read or parsed ends the command with one
    line and exit status 2."""
    if setup is None:
        return None
    try:
        return json.loads(setup.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        _refuse(f"{setup}: {exc}")


def _live_policy(stored: object) -> str | None:
    """The policy the cluster ran, as a what-if run's JSON names it (``live_policy``): the ratio column's baseline
    when it was replayed, as on the what-if page (``baseline_policy``)."""
    live = stored.get("live_policy") if isinstance(stored, dict) else None
    return live if isinstance(live, str) and live else None


def _cluster_and_quotas(
    setup: Path | None, stored: object, nodes: int | None, gpus_per_node: int | None, racks: int
) -> ReplaySetup:
    """The cluster from --nodes/--gpus-per-node/--racks, else from --setup (``stored``, its JSON); the quotas and
    fair-share half-life from --setup (none without). A setup that cannot be used ends the command with one line
    and exit status 2."""
    from scheduling.sim.replay_setup import ReplaySetup, read_setup
    from scheduling.sim.simulator import Cluster

    loaded = ReplaySetup(cluster=None)
    if setup is not None:
        try:
            loaded = read_setup(stored)
        except ValueError as exc:  # SetupError is a ValueError
            _refuse(f"{setup}: {exc}")
    if nodes is not None or gpus_per_node is not None:
        if nodes is None or gpus_per_node is None:
            _refuse("give both --nodes and --gpus-per-node")
        return replace(loaded, cluster=Cluster(nodes, gpus_per_node, racks))
    if loaded.cluster is None:
        _refuse("give --nodes and --gpus-per-node, or a --setup with a cluster")
    return loaded


def _refuse(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def _run_all(
    jobs: Sequence[TraceJob],
    names: list[str],
    cluster: Cluster,
    tenants: dict[str, TenantLimits],
    placement: str,
    overhead: PreemptionCost,
    usage_half_life: float | None,
) -> list[Run]:
    from tqdm import tqdm

    from scheduling.sim.metrics import measure
    from scheduling.sim.report import Run
    from scheduling.sim.simulator import simulate

    runs = []
    for name in names:
        show = len(jobs) >= PROGRESS_MIN_JOBS
        with tqdm(total=len(jobs), desc=name, unit="job", disable=None if show else True, file=sys.stderr) as bar:
            result = simulate(
                jobs,
                name,
                cluster=cluster,
                placement=placement,
                overhead=overhead,
                tenants=tenants,
                progress=bar.update,
                usage_half_life=usage_half_life,
            )
        runs.append(Run(result, measure(result)))
    return runs


def _print_table(runs: Sequence[Run], *, live: str | None = None) -> None:
    """The comparison: each time column in the unit its values call for (``column_scales``), the ratio column
    against the baseline the what-if page uses (``baseline_policy``)."""
    from rich.console import Console
    from rich.table import Table

    from scheduling.sim.report import TIME_COLUMNS, baseline_policy, column_scales, ratio_text

    metrics = [r.metrics for r in runs]
    baseline = baseline_policy([m.policy for m in metrics], live=live)
    base_jct = next((m.avg_jct for m in metrics if m.policy == baseline), None)
    scales = column_scales(metrics)
    times = [f"{title} ({scales[key].unit})" for key, title in TIME_COLUMNS]
    table = Table(title="Simulated policies")
    for col in ("policy", times[0], f"vs {baseline}", *times[1:], "util", "preempt", "fairness"):
        table.add_column(col, justify="right")
    for m in metrics:
        table.add_row(
            m.policy + (" (oracle)" if m.clairvoyant else ""),
            scales["avg_jct"].number(m.avg_jct),
            ratio_text(m.avg_jct, base_jct),
            *(scales[key].number(getattr(m, key)) for key, _ in TIME_COLUMNS[1:]),
            f"{100 * m.utilization:.0f}%",
            str(m.preemptions),
            f"{m.fairness:.3f}",
        )
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)  # piped output: do not squeeze the table into 80 columns
    console.print(table)
    skipped = max((r.metrics.skipped for r in runs), default=0)
    if skipped:
        Console(stderr=True).print(
            f"[yellow]{skipped} jobs can never run on this cluster (or under their quota) and were skipped[/yellow]"
        )
