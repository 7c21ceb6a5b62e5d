"""Times as ``corral simulate``, its report and the what-if page print them: one unit per column or axis, chosen
from the values it shows by one rule (``scheduling.sim.units.time_scale``), and one baseline for the ratio column
(``scheduling.sim.report.baseline_policy``). Ref: #18 (item 9)."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from scheduling.sim import cli
from scheduling.sim.metrics import measure
from scheduling.sim.report import Run, baseline_policy, jct_cdf_figure, ratio_text, render_report, timeline_figure
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import TraceJob, write_trace
from scheduling.sim.units import time_scale

MINUTE, HOUR, DAY = 60.0, 3600.0, 86_400.0


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the app into ``simulate`` itself
        """Nothing."""

    return app


def _short_jobs() -> list[TraceJob]:
    """A history of short jobs (seconds to a few minutes), the kind that printed 0.04 in every cell."""
    return [TraceJob(f"j{i}", float(i * 20), float(60 + 30 * (i % 5)), (1, 2, 4)[i % 3], user=f"u{i % 3}")
            for i in range(30)]  # fmt: skip


@pytest.mark.parametrize(
    ("values", "unit", "shown"),
    [
        ([45.0], "s", "45.0 s"),
        ([115.0, 138.0], "min", "1.92 min"),  # the column that mixed "115 s" and "2.3 min" reads in one unit
        ([750.0, 300.0], "min", "12.5 min"),
        ([4 * HOUR, 2 * HOUR], "h", "4.00 h"),
        ([5 * DAY], "d", "5.00 d"),
        ([0.2], "s", "0.200 s"),
        ([], "s", "0 s"),
        ([0.0, 0.0], "s", "0 s"),
    ],
)
def test_one_unit_for_a_series_chosen_from_its_largest_value(values: list[float], unit: str, shown: str) -> None:
    scale = time_scale(values)
    assert scale.unit == unit
    assert scale.text(values[0] if values else 0.0) == shown


def test_every_value_of_a_series_is_in_the_same_unit_with_three_significant_digits() -> None:
    scale = time_scale([115.0, 138.0, 12.0])
    assert [scale.text(v) for v in (115.0, 138.0, 12.0)] == ["1.92 min", "2.30 min", "0.20 min"]
    assert time_scale([float("nan"), 90.0]).unit == "s"  # a missing value does not choose the unit


@pytest.mark.parametrize(
    ("window", "name"),
    [(90.0, "seconds"), (30 * MINUTE, "minutes"), (10 * HOUR, "hours"), (5 * DAY, "days")],
)
def test_a_time_axis_reads_in_the_unit_of_its_window(window: float, name: str) -> None:
    scale = time_scale([window])
    assert scale.name == name
    assert 2 <= scale.value(window) < 120 or name == "days"  # ticks between 2 and a hundred or so, never 0.0005


def test_the_baseline_is_the_live_policy_when_replayed_else_the_first_listed() -> None:
    assert baseline_policy(["srsf", "fifo", "qssf"], live="fifo") == "fifo"
    assert baseline_policy(["srsf", "fifo"], live="qssf") == "srsf"
    assert baseline_policy(["srsf", "fifo"]) == "srsf"
    assert baseline_policy([]) is None
    assert (ratio_text(50.0, 100.0), ratio_text(50.0, None), ratio_text(50.0, 0.0)) == ("0.50x", "-", "-")


def test_the_charts_of_a_short_history_use_minutes_not_days() -> None:
    runs = [Run(r, measure(r)) for r in (simulate(_short_jobs(), p, cluster=Cluster(1, 4)) for p in ("fifo", "sjf"))]
    waiting = timeline_figure(runs, queue=True)
    assert waiting["layout"]["xaxis"]["title"]["text"] == "time since the first submission (minutes)"
    end = max(max(t["x"]) for t in waiting["data"])
    assert 2 <= end < 120  # the replay lasts some minutes: ticks in minutes, not 0.0005 days
    cdf = jct_cdf_figure(runs)
    assert cdf["layout"]["xaxis"]["title"]["text"] == "job completion time (minutes)"
    assert 1 <= max(max(t["x"]) for t in cdf["data"]) < 120


def test_simulate_prints_each_column_in_its_own_unit_and_compares_with_the_first_policy(app, tmp_path) -> None:
    trace = tmp_path / "short.csv"
    write_trace(_short_jobs(), trace)
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(trace), "--policy", "sjf", "--policy", "fifo", "--policy", "srsf",
         "--nodes", "1", "--gpus-per-node", "4"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "vs sjf" in out and "vs srsf" not in out  # the first policy listed, as the what-if page without a live one
    assert "(times in hours)" not in out
    assert re.search(r"avg JCT\s*\((s|min)\)", out), out
    assert not re.search(r"│\s*0\.0\d\s*│", out), out  # no cell reads 0.04 (hours or days to two decimals)
    sjf_row = next(line for line in out.splitlines() if "sjf (oracle)" in line)
    assert "1.00x" in sjf_row


def test_the_report_table_uses_the_same_units_and_baseline(tmp_path) -> None:
    runs = [Run(r, measure(r)) for r in (simulate(_short_jobs(), p, cluster=Cluster(1, 4)) for p in ("fifo", "srsf"))]
    page = render_report(runs, title="t")
    assert "<th>vs fifo</th>" in page and "vs srsf" not in page
    table = page[page.index("<table>") : page.index("</table>")]
    assert re.search(r"<th>avg JCT \((s|min)\)</th>", table) and "(h)" not in table
