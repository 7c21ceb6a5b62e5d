"""``corral telemetry ...`` and ``corral failures ...``: synthetic fleets and failure-predictor evaluation.

Both work on CSV files, so they run anywhere (no portal, no database). ``corral telemetry export`` (writing the
same CSVs from a portal's database) is added to :data:`telemetry_app` by the portal side. Heavy imports (numpy,
scikit-learn) happen inside the commands so other ``corral`` commands start fast. Bad input prints one line on
stderr and exits with status 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

# The spans these commands take ("1h", "24h", "7d"): the one duration grammar's single-unit form, under the name
# this module has always exported it by.
from scheduling.core.durations import parse_span as parse_duration

telemetry_app = typer.Typer(help="GPU telemetry files: generate a synthetic fleet.", no_args_is_help=True)
failures_app = typer.Typer(help="GPU failure prediction: evaluate on telemetry and labels.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(telemetry_app, name="telemetry")
    app.add_typer(failures_app, name="failures")


def _fail(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@telemetry_app.command("synth")
def synth(
    out: Annotated[Path, typer.Option(help="Directory for telemetry.csv and labels.csv (created if missing).")],
    gpus: Annotated[int, typer.Option(help="GPUs in the fleet (8 per node).")] = 256,
    days: Annotated[float, typer.Option(help="Days of history.")] = 30.0,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same files.")] = 0,
    interval: Annotated[str, typer.Option(help="Row interval, e.g. 1h or 10m.")] = "1h",
    failure_rate: Annotated[float, typer.Option(help="Fatal failures per GPU-year.")] = 0.15,
    sudden_fraction: Annotated[float, typer.Option(help="Fraction of failures with no precursor.")] = 0.3,
    false_precursor_rate: Annotated[
        float, typer.Option(help="Precursor-like episodes per GPU-year on GPUs that do not fail.")
    ] = 0.4,
    marginal_bank_share: Annotated[
        float, typer.Option(help="Share of memory look-alikes that are marginal banks (the difficulty knob).")
    ] = 0.15,
) -> None:
    """Write a synthetic fleet with failures (fault model: docs/telemetry.md)."""
    try:
        from telemetry.csvio import write_labels, write_telemetry
        from telemetry.synth import FleetConfig, generate

        config = FleetConfig(
            gpus=gpus,
            days=days,
            seed=seed,
            interval_s=int(parse_duration(interval)),
            failure_rate=failure_rate,
            sudden_fraction=sudden_fraction,
            false_precursor_rate=false_precursor_rate,
            marginal_bank_share=marginal_bank_share,
        )
        fleet = generate(config)
        out.mkdir(parents=True, exist_ok=True)
        rows = write_telemetry(out / "telemetry.csv", fleet.table)
        failures = write_labels(out / "labels.csv", fleet.labels)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    typer.echo(
        f"wrote {rows} rows for {len(fleet.table.gpu_names)} GPUs to {out / 'telemetry.csv'} "
        f"and {failures} failures to {out / 'labels.csv'}"
    )


@failures_app.command("evaluate")
def evaluate(
    telemetry: Annotated[Path, typer.Option(help="telemetry.csv (schema: docs/telemetry.md).")],
    labels: Annotated[Path, typer.Option(help="labels.csv with gpu_uuid,failed_at.")],
    horizon: Annotated[str, typer.Option(help="Predict failures this far ahead.")] = "24h",
    model: Annotated[str, typer.Option(help="gbdt, ensemble or cascade.")] = "gbdt",
    test_fraction: Annotated[float, typer.Option(help="Later fraction of the history used as the test part.")] = 1 / 3,
    retrain_every: Annotated[str, typer.Option(help="Sliding training: retrain this often.")] = "7d",
    train_window: Annotated[str, typer.Option(help="Sliding training: train on this much recent history.")] = "60d",
    sliding: Annotated[
        bool, typer.Option("--sliding/--static", help="Retrain during the test part, or keep the split's model.")
    ] = True,
    target_precision: Annotated[float, typer.Option(help="Precision the threshold aims for (training part).")] = 0.84,
    seed: Annotated[int, typer.Option(help="Random seed for the learners.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Train with sliding windows on the earlier history and report alarm precision/recall on the later part."""
    try:
        from telemetry.csvio import read_labels, read_telemetry
        from telemetry.predict.estimators import ModelKind
        from telemetry.predict.evaluate import EvalConfig
        from telemetry.predict.evaluate import evaluate as run_evaluation

        try:
            kind = ModelKind(model)
        except ValueError:
            raise ValueError(f"unknown model {model!r}: choose gbdt, ensemble or cascade") from None
        if not 0 < target_precision <= 1:
            raise ValueError("target precision must be in (0, 1]")
        config = EvalConfig(
            kind=kind,
            horizon_s=parse_duration(horizon),
            test_fraction=test_fraction,
            retrain_every_s=parse_duration(retrain_every),
            train_window_s=parse_duration(train_window),
            sliding=sliding,
            target_precision=target_precision,
            seed=seed,
        )
        table = read_telemetry(telemetry)
        failure_labels = read_labels(labels)
        report = run_evaluation(table, failure_labels, config)
    except (ValueError, OSError) as exc:
        _fail(str(exc))
    data = report.as_dict()
    if as_json:
        json.dump(data, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    _print_report(data)


def _print_report(data: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Failure prediction ({data['model']}, horizon {data['horizon_hours']:g} h)")
    table.add_column("measure")
    table.add_column("test part", justify="right")
    table.add_column("training part (threshold choice)", justify="right")
    validation = data["validation"]
    assert isinstance(validation, dict)
    for key in (
        "precision",
        "recall",
        "median_lead_hours",
        "alarms",
        "true_alarms",
        "false_alarms",
        "early_false_alarms",
        "failures",
    ):
        table.add_row(key, _cell(data.get(key)), _cell(validation.get(key)))
    console = Console()
    console.print(table)
    met = "met" if data["target_met_on_training_part"] else "NOT met"
    console.print(
        f"threshold {data['threshold']:.4g} (target precision {data['target_precision']} {met} on the training "
        f"part); {data['folds']} sliding-window fits, training {data['train_seconds']} s",
        soft_wrap=True,
    )
    period = data["sampling_period_s"]
    assert isinstance(period, float)
    console.print(
        f"sampling period {_span(period)} (median gap between a GPU's rows): windows, horizon and retraining are "
        f"spans of time; persistence {data['persist_rows']} rows ({data['persist_hours']:g} h)",
        soft_wrap=True,
    )
    if data["nothing_to_measure"]:
        console.print(str(data["nothing_to_measure"]), soft_wrap=True)


def _span(seconds: float) -> str:
    for unit, size in (("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
