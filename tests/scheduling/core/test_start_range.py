"""The range around a start estimate and the rule for moving a shown one (``scheduling.core.start_range``). Ref: #18."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from scheduling.core import start_range as module
from scheduling.core.start_range import (
    MIN_LEAD,
    Band,
    band_for,
    fit_calibration,
    keeps_shown,
    quantile,
    start_range,
    weighted_quantile,
    with_calibration,
)

TABLE = (Band(below=600.0, low=0.5, high=3.0, samples=40), Band(below=math.inf, low=0.8, high=1.5, samples=90))


def test_quantile_interpolates_between_ranks() -> None:
    values = [0.0, 10.0, 20.0, 30.0, 40.0]
    assert quantile(values, 0.5) == 20.0
    assert quantile(values, 0.1) == pytest.approx(4.0)
    assert quantile(values, 0.9) == pytest.approx(36.0)
    assert quantile([7.0], 0.9) == 7.0
    assert math.isnan(quantile([], 0.5))
    assert weighted_quantile([(1.0, 3.0), (2.0, 1.0)], 0.5) == 1.0
    assert weighted_quantile([(1.0, 1.0), (2.0, 3.0)], 0.5) == 2.0
    assert math.isnan(weighted_quantile([], 0.5))


def test_the_range_scales_the_predicted_wait_by_its_bands_ratios() -> None:
    r = start_range(1000.0 + 300.0, now=1000.0, table=TABLE)  # 5 minutes ahead: the first band
    assert r is not None
    assert (r.earliest, r.latest) == (1000.0 + 150.0, 1000.0 + 900.0)
    assert r.plus_minus == 375.0
    far = start_range(1000.0 + 7200.0, now=1000.0, table=TABLE)  # 2 hours ahead: the last band
    assert far is not None and (far.earliest, far.latest) == (1000.0 + 5760.0, 1000.0 + 10_800.0)


def test_a_wait_shorter_than_a_minute_or_passed_is_scaled_as_a_minute_and_never_starts_before_now() -> None:
    r = start_range(990.0, now=1000.0, table=TABLE)  # the expected start has passed
    assert r is not None
    assert (r.earliest, r.latest) == (1000.0 + 0.5 * MIN_LEAD, 1000.0 + 3.0 * MIN_LEAD)


def test_no_calibration_means_no_range() -> None:
    assert start_range(5000.0, now=1000.0, table=()) is None
    assert band_for(10.0, ()) is None
    assert band_for(1e9, TABLE) is TABLE[-1]


def test_fitting_takes_p10_and_p90_of_actual_over_predicted_wait_per_band() -> None:
    # 100 estimates 5 min ahead that came true after 1x..2x that; 100 estimates 2 h ahead, 0.5x..1.49x.
    short = [(300.0, 300.0 * (1 + k / 99)) for k in range(100)]
    long = [(7200.0, 7200.0 * (0.5 + k / 100)) for k in range(100)]
    bands = fit_calibration({"trace": short + long}, edges=(900.0, math.inf), min_samples=30)
    assert [b.below for b in bands] == [900.0, math.inf]
    assert [b.samples for b in bands] == [100, 100]
    assert bands[0].low == pytest.approx(1.1, abs=0.01) and bands[0].high == pytest.approx(1.9, abs=0.01)
    assert bands[1].low == pytest.approx(0.6, abs=0.02) and bands[1].high == pytest.approx(1.39, abs=0.02)


def test_every_trace_weighs_the_same_in_a_band_however_many_estimates_it_has() -> None:
    # 1,000 estimates of a well-predicted trace (right on time) and 20 of a badly predicted one (10x late).
    pairs = {"calm": [(600.0, 600.0)] * 1000, "wild": [(600.0, 6000.0)] * 20}
    (band,) = fit_calibration(pairs, edges=(math.inf,))
    assert (band.low, band.high, band.samples) == (1.0, 10.0, 1020)
    (calm_only,) = fit_calibration({"calm": pairs["calm"] + pairs["wild"]}, edges=(math.inf,))
    assert calm_only.high == 1.0  # pooled as one trace, the badly predicted one would not show


def test_sparse_bands_merge_with_the_next_and_the_last_reaches_to_infinity() -> None:
    pairs = [(100.0, 200.0)] * 5 + [(2000.0, 2000.0)] * 40 + [(50_000.0, 25_000.0)] * 3
    bands = fit_calibration({"t": pairs}, edges=(600.0, 3600.0, 86_400.0), min_samples=30)
    # 5 in the first band join the second (45); the 3 left at the end join it too.
    assert len(bands) == 1 and bands[0].below == math.inf and bands[0].samples == 48
    assert fit_calibration({}) == () and fit_calibration({"t": []}) == ()


def test_the_shown_estimate_moves_only_for_half_the_wait_or_more() -> None:
    now = 0.0
    assert keeps_shown(3600.0, 3600.0 + 1700.0, now=now)  # moved 28 min on a wait of 88 min: stays
    assert not keeps_shown(3600.0, 3600.0 + 3600.0, now=now)  # moved an hour on a wait of two: moves
    assert not keeps_shown(3600.0, 600.0, now=now)  # much earlier: moves
    assert keeps_shown(120.0, 150.0, now=now)  # within a minute: stays
    assert not keeps_shown(-600.0, 300.0, now=now)  # the shown time has passed and the job still waits: moves


def test_the_benchmark_rewrites_only_the_calibration_block() -> None:
    source = Path(module.__file__).read_text()
    rewritten = with_calibration(source, TABLE, calibrated_on="a test; fifo, topology; 2026-01-01")
    assert rewritten.count("Band(below=") == source.count("Band(below=") - len(module.CALIBRATION) + len(TABLE)
    namespace: dict[str, object] = {}
    exec(compile(rewritten, "start_range_rewritten", "exec"), namespace)  # the new table is valid Python
    table = namespace["CALIBRATION"]
    assert isinstance(table, tuple)
    assert [(b.below, b.low, b.high, b.samples) for b in table] == [(b.below, b.low, b.high, b.samples) for b in TABLE]
    assert namespace["CALIBRATED_ON"] == "a test; fifo, topology; 2026-01-01"
    assert with_calibration(rewritten, module.CALIBRATION, calibrated_on=module.CALIBRATED_ON) == source
    with pytest.raises(ValueError, match="markers"):
        with_calibration("no markers here", TABLE, calibrated_on="x")


def test_the_stored_calibration_is_ordered_and_usable() -> None:
    bands = module.CALIBRATION
    assert bands, "run bench/start_estimates.py --write-calibration"
    assert all(a.below < b.below for a, b in zip(bands, bands[1:], strict=False))
    assert math.isinf(bands[-1].below)
    assert all(0 <= b.low <= b.high for b in bands)


def test_a_lopsided_range_is_marked_as_an_overrun_and_a_two_sided_one_is_not() -> None:
    """Ref: #18: "3 minutes, likely 2m-9h 20m" — a range that starts near the forecast and reaches far past it says
    only how late an overrun made such starts; one that reaches both ways is a range."""
    table = (
        Band(below=3600.0, low=0.6, high=186.0, samples=50),  # short waits: on time, or hours late
        Band(below=14_400.0, low=0.26, high=6.9, samples=50),  # sooner or later, both
        Band(below=math.inf, low=0.6, high=5.0, samples=50),  # narrow enough to be a range
    )
    assert start_range(1000.0 + 180.0, now=1000.0, table=table).overrun  # type: ignore[union-attr]
    assert not start_range(1000.0 + 7200.0, now=1000.0, table=table).overrun  # type: ignore[union-attr]
    assert not start_range(1000.0 + 86_400.0, now=1000.0, table=table).overrun  # type: ignore[union-attr]
    # The stored table: the bands under an hour are lopsided, the longer ones are ranges.
    assert [start_range(1000.0 + lead, now=1000.0).overrun for lead in (180.0, 600.0, 1800.0)] == [True] * 3  # type: ignore[union-attr]
    assert not any(start_range(1000.0 + lead, now=1000.0).overrun for lead in (7200.0, 36_000.0, 200_000.0))  # type: ignore[union-attr]
