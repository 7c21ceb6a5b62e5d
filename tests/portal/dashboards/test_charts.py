"""The dashboard's figures and its arithmetic, from values built by hand: no database (pytest-django blocks it, which
doubles as a check that ``stats`` and ``charts`` stay pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.dashboards.charts import (
    dashboard_charts,
    figures_by_key,
    pending_chart,
    queue_chart,
    usage_chart,
    utilization_chart,
)
from portal.dashboards.stats import (
    Cluster,
    Dashboard,
    GroupStats,
    Series,
    Spread,
    Usage,
    Window,
    floor_time,
    percentile,
    step_series,
)

T0 = datetime(2026, 11, 10, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)


def test_percentiles_interpolate_between_ranks() -> None:
    assert percentile([1.0], 95) == 1.0
    assert percentile([1.0, 3.0], 50) == 2.0
    assert percentile([0.5, 2.0, 10.0], 95) == pytest.approx(9.2)
    spread = Spread.of([4.0, 1.0, 3.0, 2.0])
    assert spread is not None and (spread.count, spread.mean, spread.median, spread.q1, spread.q3) == (
        4,
        2.5,
        2.5,
        1.75,
        3.25,
    )
    assert Spread.of([]) is None
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_usage_adds_up_and_keeps_efficiency_to_covered_hours() -> None:
    total = Usage(allocated=7200.0, covered=3600.0, used=1800.0) + Usage(allocated=3600.0)
    assert (total.allocated_hours, total.used_hours, total.uncovered_hours) == (3.0, 0.5, 2.0)
    assert total.efficiency == 0.5
    assert Usage(allocated=3600.0).efficiency is None


def test_step_series_and_bucket_floors() -> None:
    assert floor_time(T0 + timedelta(minutes=90, seconds=5), 3600) == T0 + H
    series = step_series(start=T0, end=T0 + 3 * H, period=3600, initial=2, deltas={T0: 1, T0 + 2 * H: -3})
    assert series.x == (T0, T0 + H, T0 + 2 * H, T0 + 3 * H) and series.y == (2.0, 3.0, 3.0, 0.0)


def _board(*, tenants: list[GroupStats], cluster: Cluster, key: str = "7d") -> Dashboard:
    window = Window(key=key, label="last 7 days", start=T0 - 7 * 24 * H, end=T0, period=3600)
    total = GroupStats(label="all tenants", finished=sum(t.finished for t in tenants))
    return Dashboard(window=window, scope="all tenants", total=total, tenants=tenants, users=[], cluster=cluster)


def test_charts_draw_utilization_allocation_usage_and_queue() -> None:
    cluster = Cluster(
        gpus_present=8,
        util=40.0,
        util_series=Series((T0 - H, T0), (30.0, 50.0)),
        allocated_series=Series((T0 - H, T0), (2.0, 4.0)),
    )
    lab = GroupStats(
        label="lab",
        finished=2,
        queue=Spread.of([0.0, 600.0, 1200.0]),
        usage=Usage(allocated=7200.0, covered=7200.0, used=3600.0),
    )
    idle = GroupStats(label="idle", finished=1)
    charts = dashboard_charts(_board(tenants=[idle, lab], cluster=cluster))
    assert [c.key for c in charts] == ["utilization", "usage", "queue", "pending"]
    figures = figures_by_key(charts)
    assert set(figures) == {"utilization", "usage", "queue"}  # nobody waited

    util, allocated = figures["utilization"]["data"]
    assert util["y"] == [30.0, 50.0] and util["x"] == [(T0 - H).isoformat(), T0.isoformat()]
    assert allocated["y"] == [25.0, 50.0] and allocated["line"]["shape"] == "hv"  # a share of the 8 GPUs
    bars = figures["usage"]["data"]
    assert [b["name"] for b in bars] == ["allocated", "used"] and bars[0]["x"] == ["lab"]  # idle tenant left out
    assert (bars[0]["y"], bars[1]["y"]) == ([2.0], [1.0]) and figures["usage"]["layout"]["barmode"] == "group"
    (box,) = figures["queue"]["data"]
    assert box["type"] == "box" and box["median"] == [10.0] and box["q1"] == [5.0] and box["q3"] == [15.0]
    assert charts[3].figure is None and charts[3].empty == "No job waited in this window."


def test_charts_without_data_say_so() -> None:
    charts = dashboard_charts(_board(tenants=[], cluster=Cluster(gpus_present=8, pending_series=Series()), key="24h"))
    assert figures_by_key(charts) == {}
    assert all(c.empty for c in charts)
    assert utilization_chart(Cluster()).empty == "No telemetry or allocations yet."
    assert usage_chart([]).figure is None and queue_chart([]).figure is None


def test_the_queue_over_time_is_drawn_when_a_job_waited() -> None:
    minute = timedelta(minutes=1)
    waited = pending_chart(Cluster(pending_series=Series((T0, T0 + minute), (0.0, 3.0))))
    assert waited.figure is not None and waited.figure["data"][0]["y"] == [0.0, 3.0]
    idle = pending_chart(Cluster(pending_series=Series((T0, T0 + minute), (0.0, 0.0))))
    assert idle.figure is None and idle.empty == "No job waited in this window."
