"""``corral energy replay``: a small JSON run on a generated file, and bad input as one line and exit 2."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from scheduling.energy import cli as energy_cli

from .helpers import diurnal_minutes

KEYS = {"powered_off_mean_nodes", "short_node_minutes", "wakeups_per_day", "used_rate_powered_on"}


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    energy_cli.register(app)
    return app


@pytest.fixture(scope="module")
def series_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Six days from Monday 2024-01-01, per minute, gzipped like the shared trace."""
    lines = ["time,active,total"] + [f"{t:%Y-%m-%d %H:%M:%S},{a},{n}" for t, a, n in diurnal_minutes(6)]
    path = tmp_path_factory.mktemp("energy") / "series.csv.gz"
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return path


def test_a_small_replay_prints_the_three_policies(app: typer.Typer, series_file: Path) -> None:
    args = ["energy", "replay", "--series", str(series_file), "--test-from", "2024-01-05", "--test-to", "2024-01-06"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    for name in ("forecast", "idle_timeout", "helios_ces"):
        assert KEYS <= set(data[name])
        assert data[name]["powered_off_mean_nodes"] >= 0
    info = data["replay"]
    assert info["steps"] == 2 * 144  # --test-to is inclusive: two whole days
    assert info["from"] == "2024-01-05T00:00" and info["to"] == "2024-01-07T00:00"
    assert info["history_steps"] == 4 * 144  # trained on the four days before --test-from only
    assert data["forecast"]["powered_off_mean_nodes"] > 0  # a quiet night leaves nodes to power down
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "helios_ces" in table.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--test-from", "2024-01-05", "--test-to", "2024-01-06", "--series", "MISSING"], "No such file"),
        (["--test-from", "2024-13-05", "--test-to", "2024-01-06"], "bad date"),
        (["--test-from", "2024-01-05", "--test-to", "tomorrow"], "bad date"),
        (["--test-from", "2024-01-05", "--test-to", "2024-01-09"], "inside the series"),
        (["--test-from", "2023-12-25", "--test-to", "2024-01-02"], "inside the series"),
        (["--test-from", "2024-01-01", "--test-to", "2024-01-02"], "no history"),
        (["--test-from", "2024-01-05", "--test-to", "2024-01-04"], "empty"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    app: typer.Typer, series_file: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    args = [str(tmp_path / "missing.csv") if a == "MISSING" else a for a in args]
    if "--series" not in args:
        args += ["--series", str(series_file)]
    result = CliRunner().invoke(app, ["energy", "replay", *args, "--json"])
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ") and message in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_the_corral_script_has_the_command() -> None:
    corral = Path(sys.executable).with_name("corral")
    result = subprocess.run([str(corral), "energy", "replay", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and "--test-from" in result.stdout


def test_a_run_of_zeros_gets_a_note_and_outage_minutes_fills_it(app: typer.Typer, tmp_path: Path) -> None:
    rows = diurnal_minutes(6)
    outage = range(3 * 1440 + 600, 3 * 1440 + 640)  # 40 minutes of "nothing in use" on a busy day
    lines = ["time,active,total"] + [
        f"{t:%Y-%m-%d %H:%M:%S},{0 if n in outage else a},{total}" for n, (t, a, total) in enumerate(rows)
    ]
    path = tmp_path / "gap.csv"
    path.write_text("\n".join(lines) + "\n")
    args = ["energy", "replay", "--series", str(path), "--test-from", "2024-01-04", "--test-to", "2024-01-05", "--json"]
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0 and plain.stderr.startswith("note: 1 run(s) of zero nodes")
    assert json.loads(plain.stdout)["replay"]["filled_steps"] == 0
    filled = CliRunner().invoke(app, [*args, "--outage-minutes", "30"])
    assert filled.exit_code == 0 and filled.stderr == ""
    assert json.loads(filled.stdout)["replay"]["filled_steps"] == 4
