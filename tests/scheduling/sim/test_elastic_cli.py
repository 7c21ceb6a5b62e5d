"""``corral simulate --loan-pool / --elastic-share`` (issue #19): the JSON shape, the table, and clear refusals."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from scheduling.sim import cli
from scheduling.sim.trace import TraceJob, write_trace


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the app into ``simulate`` itself
        """Nothing."""

    return app


@pytest.fixture
def trace_file(tmp_path):
    jobs = [TraceJob(f"j{i}", float(i * 600), float(3600 + 900 * (i % 4)), (1, 2, 4)[i % 3]) for i in range(30)]
    path = tmp_path / "trace.csv"
    write_trace(jobs, path)
    return path


def _run(app, trace_file, *extra: str):
    args = ["simulate", "--trace", str(trace_file), "--nodes", "1", "--gpus-per-node", "4", *extra]
    return CliRunner().invoke(app, args)


def test_json_compares_the_elastic_run_with_the_baseline(app, trace_file):
    result = _run(app, trace_file, "--policy", "fifo", "--loan-pool", "2", "--loan-gpus-per-node", "4",
                  "--elastic-share", "0.5", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    runs = data["elastic"]["fifo"]
    assert set(runs) == {"baseline", "elastic"}
    assert runs["baseline"]["jobs"] == runs["elastic"]["jobs"] == 30
    assert runs["baseline"]["resizes"] == 0 and runs["baseline"]["lent_node_hours"] == 0
    assert runs["elastic"]["avg_jct"] < runs["baseline"]["avg_jct"]
    assert runs["elastic"]["reclaims_on_time"] == runs["elastic"]["reclaims"]


def test_a_demand_file_and_the_table(app, trace_file, tmp_path):
    demand = tmp_path / "busy.csv"
    demand.write_text("minute,busy\n0,0\n600,2\n")
    result = _run(app, trace_file, "--policy", "fifo-backfill", "--loan-pool", "2", "--loan-demand", str(demand))
    assert result.exit_code == 0, result.output
    assert "Loaning and elastic jobs against neither" in result.stdout
    assert "baseline" in result.stdout and "fifo-backfill" in result.stdout


def test_without_the_flags_simulate_is_unchanged(app, trace_file):
    result = _run(app, trace_file, "--policy", "fifo", "--json")
    assert result.exit_code == 0, result.output
    assert list(json.loads(result.stdout)) == ["policies"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--policy", "tiresias-las", "--elastic-share", "0.5"], "non-preemptive"),
        (["--policy", "fifo", "--loan-pool", "2", "--reclaim-deadline", "900"], "deadline"),
        (["--policy", "fifo", "--elastic-share", "0.5", "--report", "r.html"], "--report"),
    ],
)
def test_refusals_are_one_line_and_exit_2(app, trace_file, extra, message):
    result = _run(app, trace_file, *extra)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_a_bad_demand_file_is_refused(app, trace_file, tmp_path):
    demand = tmp_path / "busy.csv"
    demand.write_text("when,servers\n0,1\n")
    result = _run(app, trace_file, "--policy", "fifo", "--loan-pool", "2", "--loan-demand", str(demand))
    assert result.exit_code == 2
    assert "minute,busy" in result.output
