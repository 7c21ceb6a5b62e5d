"""``corral simulate``: the stable JSON shape, the report page, and the metrics behind them."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from scheduling.sim import cli
from scheduling.sim.metrics import jain, measure, resample, utilization
from scheduling.sim.report import Run, jct_cdf_figure, render_report, tenant_figure, timeline_figure
from scheduling.sim.simulator import Cluster, Timeline, simulate
from scheduling.sim.trace import TraceJob, write_trace

SUMMARY_KEYS = {"avg_jct", "median_jct", "p95_jct", "avg_queue", "makespan", "jobs", "preemptions", "clairvoyant"}


@pytest.fixture
def app() -> typer.Typer:
    """A throwaway app with only our command, so the test does not depend on the rest of the ``corral`` CLI."""
    app = typer.Typer()
    cli.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the app into ``simulate`` itself
        """Nothing."""

    return app


@pytest.fixture
def trace_file(tmp_path):
    jobs = [
        TraceJob(f"j{i}", float(i * 30), float(100 + 50 * (i % 4)), (1, 2, 4, 8)[i % 4], user=f"u{i % 3}",
                 tenant="ab"[i % 2])
        for i in range(24)
    ]  # fmt: skip
    path = tmp_path / "trace.csv.gz"
    write_trace(jobs, path)
    return path


def test_json_output_has_the_stable_shape(app, trace_file):
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(trace_file), "--policy", "fifo", "--policy", "srsf", "--nodes", "2",
         "--gpus-per-node", "4", "--json"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == ["policies"]
    assert list(data["policies"]) == ["fifo", "srsf"]
    for summary in data["policies"].values():
        assert set(summary) == SUMMARY_KEYS
        assert summary["jobs"] == 24
    assert data["policies"]["srsf"]["clairvoyant"] is True
    assert data["policies"]["fifo"]["clairvoyant"] is False


def test_all_policies_with_helios_overhead_and_a_report(app, trace_file, tmp_path):
    report = tmp_path / "out.html"
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(trace_file), "--policy", "all", "--nodes", "2", "--gpus-per-node", "4",
         "--placement", "topology", "--preemption-overhead", "helios", "--report", str(report)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "tiresias-gittins" in result.stdout
    page = report.read_text()
    assert page.startswith("<!doctype html>") and "plotly" in page.lower()
    assert "JCT distribution" in page and "GPU utilization over time" in page


def test_bad_arguments_are_refused(app, trace_file):
    runner = CliRunner()
    bad_policy = runner.invoke(
        app, ["simulate", "--trace", str(trace_file), "--policy", "lottery", "--nodes", "1", "--gpus-per-node", "8"]
    )
    assert bad_policy.exit_code != 0 and "lottery" in bad_policy.output
    bad_overhead = runner.invoke(
        app,
        ["simulate", "--trace", str(trace_file), "--policy", "fifo", "--nodes", "1", "--gpus-per-node", "8",
         "--preemption-overhead", "soon"],
    )  # fmt: skip
    assert bad_overhead.exit_code != 0


def test_a_setup_file_gives_the_nodes_and_quotas_of_a_portal_run(app, trace_file, tmp_path):
    # The shape GET /api/v1/whatif/<id>/ returns (other keys are ignored): two mixed nodes, tenant a capped at 4.
    run = {
        "id": 7,
        "cluster": "live",
        "layout": [{"gpus": 8, "rack": "r1"}, {"gpus": 2, "rack": "r2"}],
        "quotas": {"a": {"gpu_cap": 4, "guaranteed_gpus": 0, "user_cap": None}},
    }
    setup = tmp_path / "run.json"
    setup.write_text(json.dumps(run))
    base = ["simulate", "--trace", str(trace_file), "--policy", "fifo", "--json", "--setup", str(setup)]
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 0, result.output
    # Tenant a (even-numbered jobs: 1- and 4-GPU) keeps all its jobs; tenant b's 8-GPU jobs run on the big node.
    assert json.loads(result.stdout)["policies"]["fifo"]["jobs"] == 24
    from scheduling.core.model import TenantLimits
    from scheduling.sim.trace import read_trace

    expected = simulate(
        read_trace(trace_file), "fifo", cluster=Cluster.of_nodes([(8, "r1"), (2, "r2")]),
        tenants={"a": TenantLimits(gpu_cap=4)},
    )  # fmt: skip
    assert json.loads(result.stdout)["policies"]["fifo"] == measure(expected).summary()

    # --nodes/--gpus-per-node replace the cluster; the quotas stay: a cap of 1 skips tenant a's 4-GPU jobs.
    run["quotas"] = {"a": {"gpu_cap": 1}}
    setup.write_text(json.dumps(run))
    capped = CliRunner().invoke(app, [*base, "--nodes", "1", "--gpus-per-node", "8"])
    assert capped.exit_code == 0, capped.output
    assert json.loads(capped.stdout)["policies"]["fifo"]["jobs"] == 18  # 6 of tenant a's 12 jobs need 4 GPUs


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", "Expecting property name"),
        ('{"layout": [{"gpus": "eight"}]}', "a node's gpus is 'eight', not a whole number"),
        ('{"quotas": {"a": {"gpu_cap": 2}}}', "give --nodes and --gpus-per-node, or a --setup with a cluster"),
        ('{"nodes": 1, "gpus_per_node": 4, "fair_share_half_life_hours": -2}', "half_life_hours is -2, not a number"),
    ],
)
def test_a_setup_that_cannot_be_used_is_refused_in_one_line(app, trace_file, tmp_path, content, words):
    setup = tmp_path / "setup.json"
    setup.write_text(content)
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(trace_file), "--policy", "fifo", "--setup", str(setup)]
    )
    assert result.exit_code == 2 and words in result.output
    assert result.output.count("\n") == 1 and result.output.startswith("error: ")


def test_fair_share_comes_from_the_setup_file_or_the_option(app, trace_file, tmp_path):
    from scheduling.core.model import TenantLimits
    from scheduling.sim.trace import read_trace

    setup = tmp_path / "run.json"
    quotas = {"a": {"guaranteed_gpus": 2}, "b": {"guaranteed_gpus": 2}}
    setup.write_text(json.dumps({"nodes": 2, "gpus_per_node": 4, "quotas": quotas, "fair_share_half_life_hours": 0.1}))
    base = ["simulate", "--trace", str(trace_file), "--policy", "fifo+quota", "--json", "--setup", str(setup)]
    tenants = {"a": TenantLimits(guaranteed_gpus=2), "b": TenantLimits(guaranteed_gpus=2)}

    def expected(half_life):
        result = simulate(read_trace(trace_file), "fifo+quota", cluster=Cluster(2, 4), tenants=tenants,
                          usage_half_life=half_life)  # fmt: skip
        return measure(result).summary()

    from_file = CliRunner().invoke(app, base)
    assert json.loads(from_file.stdout)["policies"]["fifo+quota"] == expected(360.0)
    off = CliRunner().invoke(app, [*base, "--fair-share-half-life", "0"])
    assert json.loads(off.stdout)["policies"]["fifo+quota"] == expected(None)
    assert expected(360.0) != expected(None)  # the trace is contended enough for the order of borrowers to matter
    for bad in ("nan", "inf", "100000", "-1"):  # typer refuses nan and -1 itself, with its usage box
        refused = CliRunner().invoke(app, [*base, "--fair-share-half-life", bad])
        assert refused.exit_code == 2 and "Traceback" not in refused.output, refused.output
        if bad in ("inf", "100000"):
            assert refused.output == "error: --fair-share-half-life must be a number of hours from 0 to 87600\n"


def test_metrics_on_a_known_schedule():
    trace = [TraceJob("a", 0.0, 100.0, 1, tenant="x"), TraceJob("b", 0.0, 100.0, 1, tenant="y")]
    m = measure(simulate(trace, "fifo", cluster=Cluster(1, 1)))
    assert (m.jobs, m.avg_jct, m.median_jct, m.avg_queue, m.makespan) == (2, 150.0, 150.0, 50.0, 200.0)
    assert m.utilization == pytest.approx(1.0)
    assert m.per_tenant["y"].avg_slowdown == 2.0
    assert m.fairness_over == "tenants" and m.fairness == pytest.approx(jain([1.0, 2.0]))


def test_jain_index_bounds():
    assert jain([3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain([1.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)


def test_utilization_and_resampling_are_time_weighted():
    timeline = Timeline(times=(0.0, 10.0, 30.0), busy_gpus=(4, 2, 0), queued_jobs=(3, 1, 0))
    assert utilization(timeline, 4, 0.0, 30.0) == pytest.approx((4 * 10 + 2 * 20) / (4 * 30))
    times, busy, queued = resample(timeline, bins=3)
    assert times == [0.0, 10.0, 20.0]
    assert busy == pytest.approx([4.0, 2.0, 2.0])
    assert queued == pytest.approx([3.0, 1.0, 1.0])


def test_figures_are_plain_dicts_per_policy():
    trace = [TraceJob(f"j{i}", float(i), 50.0, 1, user=f"u{i % 2}") for i in range(6)]
    runs = [Run(r, measure(r)) for r in (simulate(trace, p, cluster=Cluster(1, 2)) for p in ("fifo", "srsf"))]
    cdf = jct_cdf_figure(runs)
    assert [t["name"] for t in cdf["data"]] == ["fifo", "srsf (oracle)"]
    assert cdf["data"][0]["y"][-1] == 1.0
    assert len(timeline_figure(runs, queue=True)["data"]) == 2
    assert tenant_figure(runs)["layout"]["xaxis"]["title"]["text"] == "user"
    assert "<table>" in render_report(runs, title="t")
