"""``corral failures evaluate`` on a fleet written by another tool (Ref: #15).

The files here come from a small generator of their own, not from :mod:`telemetry.synth`: 10-minute samples
instead of hourly ones, ISO times with an explicit offset, no optional columns, a constant column, columns that are
always empty, GPUs that never fail. Whatever the evaluation learns from it is beside the point; what is tested is
that the command measures what can be measured and says plainly what cannot.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner, Result

from telemetry import cli as telemetry_cli
from telemetry.predict.alarms import AlarmMetrics, rows_for
from telemetry.predict.estimators import ModelKind, fit
from telemetry.predict.evaluate import NOTHING_TO_MEASURE, EvalConfig, EvaluationReport
from telemetry.predict.features import build_features, sampling_period
from telemetry.schema import REQUIRED_COLUMNS
from tests.telemetry.helpers import HOUR, hourly_table

PERIOD_S = 600
DAYS = 24
GPUS = 20
START = datetime(2025, 3, 1, tzinfo=UTC)
#: Failing GPUs and the day they fail; every other GPU never fails.
BOTH_PARTS = {1: 4.3, 3: 6.7, 4: 8.1, 6: 9.6, 8: 11.2, 9: 12.9, 11: 13.4, 13: 18.5, 16: 20.2, 18: 22.6}
TRAINING_PART_ONLY = {g: day for g, day in BOTH_PARTS.items() if day < 15}
TEST_PART_ONLY = {g: day for g, day in BOTH_PARTS.items() if day > 17}


def write_fleet(out: Path, failures: dict[int, float], *, seed: int = 0) -> Path:
    """telemetry.csv and labels.csv in the documented schema, 10-minute rows. A failing GPU's corrected-ECC count
    climbs for 36 h before it dies (and its rows stop there); any GPU may have a short harmless burst."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    steps = DAYS * 86_400 // PERIOD_S
    offsets = PERIOD_S * np.arange(1, steps + 1)
    with (out / "telemetry.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(REQUIRED_COLUMNS)
        for g in range(GPUS):
            fail_s = failures[g] * 86_400 if g in failures else None
            t = offsets if fail_s is None else offsets[offsets <= fail_s]
            noise = rng.random(t.size) < 0.002
            climbing = np.zeros(t.size, dtype=bool) if fail_s is None else (fail_s - t) < 36 * HOUR
            ecc = np.cumsum(rng.poisson(3, t.size) * (climbing | noise))
            xid = np.zeros(t.size, dtype=np.int64)
            if fail_s is not None:
                xid[-1] = 79  # the row of the failure
            temp = 55 + 5 * rng.standard_normal(t.size) + 10 * climbing
            util = rng.uniform(0, 100, t.size)
            for i in range(t.size):
                writer.writerow(
                    [
                        (START + timedelta(seconds=int(t[i]))).isoformat(),
                        f"node-{g // 4}",
                        f"GPU-{g:08x}-foreign",
                        f"{util[i]:.1f}",
                        "20000",
                        "81920",  # constant
                        f"{temp[i]:.1f}",
                        f"{100 + 3 * util[i]:.1f}",
                        "1410",  # constant
                        int(ecc[i]),
                        "0",  # constant
                        "",  # retired_pages: never reported
                        int(xid[i]),
                        "",  # throttle_reasons: never reported
                    ]
                )
    with (out / "labels.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["gpu_uuid", "failed_at"])
        for g, day in failures.items():
            writer.writerow([f"GPU-{g:08x}-foreign", (START + timedelta(days=day)).isoformat()])
    return out


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    app = typer.Typer()
    telemetry_cli.register(app)
    return app


def run_evaluate(app: typer.Typer, fleet: Path, *extra: str) -> Result:
    args = ["failures", "evaluate", "--telemetry", str(fleet / "telemetry.csv"), "--labels", str(fleet / "labels.csv")]
    return CliRunner().invoke(app, [*args, "--retrain-every", "4d", *extra])


def test_evaluates_a_ten_minute_fleet_with_constant_and_empty_columns(
    app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fleet = write_fleet(tmp_path_factory.mktemp("both"), BOTH_PARTS)
    result = run_evaluate(app, fleet, "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["sampling_period_s"] == PERIOD_S
    assert data["persist_rows"] == 18 and data["persist_hours"] == 3  # three hours of 10-minute rows
    assert data["failures"] == 3 and data["nothing_to_measure"] is None
    assert 0 <= data["precision"] <= 1 and 0 <= data["recall"] <= 1


def test_a_test_part_without_failures_has_nothing_to_measure(
    app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fleet = write_fleet(tmp_path_factory.mktemp("train-only"), TRAINING_PART_ONLY)
    result = run_evaluate(app, fleet)
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "the test period has no failure: nothing to measure precision/recall against" in out
    assert "sampling period 10 min" in out and "persistence 18 rows (3 h)" in out
    cells = {row[0]: row[1:] for row in _table_rows(out)}
    assert cells["failures"][0] == "0"
    assert cells["precision"][0] == "-" and cells["recall"][0] == "-"  # not "0.000"
    # Its failures all precede the training part's walk-forward period, which has nothing to measure either.
    assert cells["failures"][1] == "0" and cells["precision"][1] == "-" and cells["recall"][1] == "-"
    assert cells["false_alarms"][0].isdigit()  # alarms on a healthy test part are still counted


def _table_rows(out: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("│ ").split("│")] for line in out.splitlines() if line.startswith("│")]


def test_the_report_says_why_precision_and_recall_are_missing() -> None:
    def metrics(failures: int) -> AlarmMetrics:
        return AlarmMetrics(0.5, 2, 0, 2, 0, 0, failures, 0, ())

    def report(failures: int) -> dict[str, object]:
        return EvaluationReport(
            EvalConfig(), metrics(failures), metrics(1), False, 0.0, None, 1, 0.0, 0.0, 0.0, 10, 2, 600.0, 18
        ).as_dict()

    quiet = report(0)
    assert quiet["validation"]["recall"] == 0.0  # type: ignore[index]
    assert quiet["precision"] is None and quiet["recall"] is None and quiet["nothing_to_measure"] == NOTHING_TO_MEASURE
    assert quiet["false_alarms"] == 2
    measured = report(1)
    assert measured["precision"] == 0.0 and measured["recall"] == 0.0 and measured["nothing_to_measure"] is None


def test_a_training_part_without_failures_is_refused_in_one_line(
    app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fleet = write_fleet(tmp_path_factory.mktemp("test-only"), TEST_PART_ONLY)
    result = run_evaluate(app, fleet)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "no failure" in result.stderr and "cannot train" in result.stderr
    assert "Traceback" not in result.output


def test_failures_too_late_in_the_training_part_are_refused_in_one_line(
    app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # The last walk-forward fold of the training part trains on rows up to day 13 (day 14 minus a horizon).
    fleet = write_fleet(tmp_path_factory.mktemp("late"), {2: 15.5, 5: 15.8})
    result = run_evaluate(app, fleet)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "has 2 failure(s), none early enough to train on" in result.stderr and "Traceback" not in result.output


def test_a_fleet_without_any_failure_is_refused_in_one_line(
    app: typer.Typer, tmp_path_factory: pytest.TempPathFactory
) -> None:
    fleet = write_fleet(tmp_path_factory.mktemp("healthy"), {})
    result = run_evaluate(app, fleet)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "cannot train" in result.stderr


# -- the pieces underneath ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", list(ModelKind))
def test_every_architecture_fits_with_empty_and_constant_features(kind: ModelKind) -> None:
    rng = np.random.default_rng(0)
    y = rng.random(2_000) < 0.05
    x = np.column_stack(
        [
            np.full(y.size, np.nan),  # never reported
            np.full(y.size, 7.0),  # constant
            np.where(rng.random(y.size) < 0.5, np.nan, 1.0),  # one value or missing
            y + rng.normal(0, 0.5, y.size),  # informative
        ]
    )
    model = fit(kind, x, y)
    scores = model.score(x)
    assert scores.shape == y.shape and np.all((scores >= 0) & (scores <= 1))
    # A column empty in training may have values when scoring (a field a firmware update started reporting).
    x[:, 0] = 1.0
    assert model.score(x).shape == y.shape


def test_sampling_period_is_the_files_own() -> None:
    hourly = hourly_table(["a", "b"], 12)
    assert sampling_period(hourly) == HOUR
    assert rows_for(3 * HOUR, HOUR) == 3 and rows_for(3 * HOUR, 600) == 18 and rows_for(3 * HOUR, 86_400) == 1


def test_row_counting_features_are_in_hours_at_any_period() -> None:
    # Six 10-minute rows per hour; the counter grows in every row of the last two hours.
    rows = 36
    sbe = [0] * 24 + list(range(1, 13))
    table = hourly_table(["g"], rows, ecc_corrected_total=sbe)
    ten_min = type(table)(
        timestamp=table.start + (table.timestamp - table.start) / 6,
        node=table.node,
        gpu=table.gpu,
        node_names=table.node_names,
        gpu_names=table.gpu_names,
        values=table.values,
    )
    fm = build_features(ten_min)
    column = {name: fm.values[:, j] for j, name in enumerate(fm.names)}
    assert column["sbe_active_hours_24h"][-1] == pytest.approx(2.0)
    assert column["samples_24h"][-1] == pytest.approx(rows / 6)  # hours covered by samples, not a row count
