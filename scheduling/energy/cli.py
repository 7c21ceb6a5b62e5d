"""``corral energy replay``: replay a node-demand series under Corral's power policy and two baselines.

Runs anywhere (no portal, no database). numpy and scikit-learn are imported inside the command so other
``corral`` commands start fast. Bad input prints one ``error:`` line on stderr and exits with status 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, NoReturn

import typer

OUTAGE_HINT_STEPS = 3  # 30 minutes of nothing in use after a busy step: worth a note

energy_app = typer.Typer(help="Energy saving: replay node demand under power-down policies.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add the ``energy`` command group to the ``corral`` app."""
    app.add_typer(energy_app, name="energy")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@energy_app.command("replay")
def replay_command(
    series: Annotated[Path, typer.Option("--series", help="time,active,total per minute (CSV or CSV.gz).")],
    test_from: Annotated[
        str, typer.Option("--test-from", help="First day replayed (YYYY-MM-DD); before it: training.")
    ],
    test_to: Annotated[str, typer.Option("--test-to", help="Last day replayed, inclusive (YYYY-MM-DD).")],
    wake_minutes: Annotated[
        int, typer.Option("--wake-minutes", min=0, max=120, help="Minutes from power-on to a node that runs work.")
    ] = 10,
    buffer: Annotated[
        int | None, typer.Option("--buffer", min=0, help="Corral policy: nodes kept above the forecast.")
    ] = None,
    floor: Annotated[int, typer.Option("--floor", min=0, help="Corral policy: never fewer powered nodes.")] = 0,
    suspend_minutes: Annotated[
        int, typer.Option("--suspend-minutes", min=10, help="Idle-timeout baseline: SuspendTime.")
    ] = 30,
    outage_minutes: Annotated[
        int,
        typer.Option(
            "--outage-minutes",
            min=0,
            help="Treat a run of at least this many minutes with no node in use (after a busy step) as a "
            "monitoring outage and repeat the demand before it (0: off).",
        ),
    ] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the comparison as JSON.")] = False,
) -> None:
    """Train the forecaster on the history before --test-from, replay --test-from..--test-to under Corral's
    forecast policy, a Slurm-style idle timeout and the Helios CES rule, and compare nodes powered off against
    node-minutes short of demand."""
    import math
    from dataclasses import replace

    from scheduling.energy.compare import compare, parse_when, window_of
    from scheduling.energy.policies import ForecastPolicy, HeliosCesPolicy, IdleTimeoutPolicy
    from scheduling.energy.replay import ReplayConfig
    from scheduling.energy.series import STEP_MINUTES, SeriesError, fill_outages, read_series, zero_runs

    try:
        start = parse_when(test_from, end_of_day=False)
        until = parse_when(test_to, end_of_day=True)
        raw = read_series(series)
        steps = fill_outages(raw, min_steps=math.ceil(outage_minutes / STEP_MINUTES))
        window = window_of(steps, start, until)
    except SeriesError as exc:
        _fail(str(exc))
    if outage_minutes == 0:
        suspect = zero_runs(raw, min_steps=OUTAGE_HINT_STEPS)
        if suspect:
            first, length = max(suspect, key=lambda run: run[1])
            typer.echo(
                f"note: {len(suspect)} run(s) of zero nodes in use right after busy steps, the longest "
                f"{length * STEP_MINUTES} min from {raw.starts[first]}; if the monitoring was down, replay with "
                "--outage-minutes",
                err=True,
            )
    corral = ForecastPolicy(floor=floor)
    if buffer is not None:
        corral = replace(corral, buffer=buffer)
    policies = (corral, IdleTimeoutPolicy(suspend_steps=math.ceil(suspend_minutes / STEP_MINUTES)), HeliosCesPolicy())
    config = ReplayConfig(wake_minutes=wake_minutes)
    result = compare(steps, window, policies=policies, replay_config=config)
    data = result.as_dict(steps, config)
    if as_json:
        typer.echo(json.dumps(data, indent=2))
        return
    _print_table(data)


def _print_table(data: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    info = data["replay"]
    assert isinstance(info, dict)
    table = Table(title=f"Energy replay {info['from']} to {info['to']} (wake-up {info['wake_minutes']} min)")
    for col in ("policy", "powered off (mean nodes)", "short (node-min)", "wake-ups/day", "used rate (powered)"):
        table.add_column(col, justify="right")
    for name in ("forecast", "idle_timeout", "helios_ces"):
        row = data[name]
        assert isinstance(row, dict)
        table.add_row(
            name,
            f"{row['powered_off_mean_nodes']:.1f}",
            str(row["short_node_minutes"]),
            f"{row['wakeups_per_day']:.1f}",
            f"{100 * row['used_rate_powered_on']:.1f}%",
        )
    console = Console()
    console.print(table)
    console.print(
        f"{info['nodes_mean']:g} nodes, mean demand {info['demand_mean']:g}; forecast error "
        f"{info['forecast_mae_nodes']:g} nodes (mean absolute, one wake-up ahead)",
        soft_wrap=True,
    )
