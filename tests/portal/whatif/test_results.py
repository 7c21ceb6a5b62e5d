"""What a what-if run keeps of its replays, and the rows its page shows. No database: these are pure functions."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np

from portal.whatif.results import merge_figures, observed_row, policy_figures, policy_record, table_rows
from scheduling.sim.metrics import measure
from scheduling.sim.report import Run
from scheduling.sim.simulator import Cluster, JobOutcome, SimResult, Timeline


def _long_replay(jobs: int, policy: str) -> SimResult:
    """A replay's result the size of a long history, made up rather than simulated (the test is about storage)."""
    rng = np.random.default_rng(7)
    submit = np.sort(rng.uniform(0, 365 * 86_400, jobs))
    wait = rng.exponential(3600, jobs)
    duration = rng.lognormal(8, 1.5, jobs)
    outcomes = tuple(
        JobOutcome(f"j{i}", f"t{i % 40}", f"u{i % 300}", 1, s, s + w, s + w + d, d, d, 0)
        for i, (s, w, d) in enumerate(zip(submit.tolist(), wait.tolist(), duration.tolist(), strict=True))
    )
    times = tuple(np.sort(rng.uniform(0, 366 * 86_400, 2 * jobs)).tolist())
    busy = tuple(rng.integers(0, 512, len(times)).tolist())
    queued = tuple(rng.integers(0, 2000, len(times)).tolist())
    return SimResult(policy, False, "count", Cluster(64, 8), outcomes, Timeline(times, busy, queued))


def test_a_replay_of_100k_jobs_under_every_policy_stays_a_few_hundred_kb() -> None:
    base = _long_replay(100_000, "fifo")
    metrics = measure(base)
    names = ["fifo", "fifo-backfill", "srtf", "srsf", "sjf", "tiresias-las", "tiresias-gittins", "qssf"]
    records, figures = [], []
    for name in names:
        run = Run(replace(base, policy=name), replace(metrics, policy=name))
        records.append(policy_record(run.metrics))
        figures.append(policy_figures(run))
    stored = json.dumps({"policies": records, "figures": merge_figures(figures, live_policy="fifo")})
    assert len(stored) < 300_000
    assert [r["policy"] for r in records] == names


def test_figures_put_every_policy_side_by_side_and_name_the_live_one() -> None:
    runs = [Run(r, measure(r)) for r in (_long_replay(500, "fifo"), _long_replay(500, "qssf"))]
    merged = merge_figures([policy_figures(r) for r in runs], live_policy="qssf")
    titles = [f["layout"]["title"]["text"] for f in merged]
    assert titles == [
        "JCT distribution",
        "Jobs waiting over time",
        "GPU utilization over time",
        "Average JCT per tenant",
    ]
    assert [t["name"] for t in merged[0]["data"]] == ["fifo", "qssf (live)"]
    assert all(len(str(x)) <= 12 for x in merged[1]["data"][0]["x"])  # rounded to 4 significant digits


def test_the_table_compares_each_policy_with_the_live_one() -> None:
    def record(policy: str, avg: float, **kw: object) -> dict[str, object]:
        return {"policy": policy, "avg_jct": avg, "median_jct": 60.0, "p95_jct": 7200.0, "avg_queue": 5400.0,
                "utilization": 0.5, "preemptions": 3, "fairness": 0.98765, "clairvoyant": False} | kw  # fmt: skip

    records = [record("fifo", 3600.0), record("srsf", 1800.0, clairvoyant=True)]
    fifo, srsf = table_rows(records, live_policy="fifo")
    assert (fifo.live, fifo.ratio, fifo.avg_jct, fifo.median_jct, fifo.p95_jct) == (
        True,
        "1.00x",
        "60.0 min",
        "60.0 s",
        "2.00 h",
    )
    assert (srsf.live, srsf.oracle, srsf.ratio, srsf.utilization, srsf.fairness) == (
        False,
        True,
        "0.50x",
        "50%",
        "0.988",
    )
    # The live policy not replayed: the first listed is the baseline, as in ``corral simulate``. Ref: #18
    assert [r.ratio for r in table_rows(records, live_policy="qssf")] == ["1.00x", "0.50x"]


def test_times_read_in_the_unit_that_suits_them() -> None:
    assert observed_row({"jobs": 0}) is None
    row = observed_row({"jobs": 2, "avg_jct": 90.0, "median_jct": 90.0, "p95_jct": 100.0, "avg_queue": 30.0})
    assert row == {"avg_jct": "90.0 s", "median_jct": "90.0 s", "p95_jct": "100 s", "avg_queue": "30.0 s"}
