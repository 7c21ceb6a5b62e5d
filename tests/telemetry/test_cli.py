from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from telemetry import cli as telemetry_cli
from telemetry.csvio import read_labels, read_telemetry


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    telemetry_cli.register(app)
    return app


@pytest.fixture(scope="module")
def fleet_dir(app: typer.Typer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    result = CliRunner().invoke(
        app,
        ["telemetry", "synth", "--out", str(out), "--gpus", "64", "--days", "24", "--seed", "3", "--failure-rate", "6"],
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stdout
    return out


def test_synth_writes_both_files(fleet_dir: Path) -> None:
    table = read_telemetry(fleet_dir / "telemetry.csv")
    labels = read_labels(fleet_dir / "labels.csv")
    assert len(table.node_names) == 8 and labels
    assert {lb.gpu_uuid for lb in labels} <= set(table.gpu_names)


def test_evaluate_prints_json(app: typer.Typer, fleet_dir: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "failures",
            "evaluate",
            "--telemetry",
            str(fleet_dir / "telemetry.csv"),
            "--labels",
            str(fleet_dir / "labels.csv"),
            "--horizon",
            "24h",
            "--retrain-every",
            "4d",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert {"precision", "recall", "median_lead_hours", "threshold", "validation"} <= set(data)
    assert data["horizon_hours"] == 24.0 and data["model"] == "gbdt"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["failures", "evaluate", "--telemetry", "/nonexistent.csv", "--labels", "/x.csv"], "No such file"),
        (["failures", "evaluate", "--telemetry", "T", "--labels", "L", "--horizon", "soon"], "bad duration"),
        (["failures", "evaluate", "--telemetry", "T", "--labels", "L", "--model", "magic"], "unknown model"),
        (["telemetry", "synth", "--out", "/tmp/x", "--gpus", "0"], "gpus"),
    ],
)
def test_bad_input_is_one_line_on_stderr(app: typer.Typer, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output


def test_parse_duration() -> None:
    assert telemetry_cli.parse_duration("90m") == 5400
    assert telemetry_cli.parse_duration("7d") == 7 * 86_400
    with pytest.raises(ValueError, match="bad duration"):
        telemetry_cli.parse_duration("1w")
