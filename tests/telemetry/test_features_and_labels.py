from __future__ import annotations

import numpy as np

from telemetry.predict.features import CAP_H, build_features, feature_names
from telemetry.predict.labels import label_rows
from telemetry.schema import FailureLabel
from telemetry.throttle import Throttle
from tests.telemetry.helpers import HOUR, T0, hourly_table


def feature(table, name: str) -> np.ndarray:  # noqa: ANN001
    fm = build_features(table)
    assert fm.names == feature_names()
    return fm.values[:, fm.names.index(name)].astype(np.float64)


def test_counter_growth_uses_time_windows() -> None:
    sbe = [0, 0, 1, 3, 3, 10] + [10] * 30  # row k is hour k + 1: +1 at h3, +2 at h4, +7 at h6
    table = hourly_table(["g"], 36, ecc_corrected_total=sbe)
    growth_6h = np.round(np.expm1(feature(table, "sbe_growth_6h")), 3)
    assert growth_6h[5] == 10 and growth_6h[10] == 7 and growth_6h[11] == 0
    assert round(float(np.expm1(feature(table, "sbe_growth_24h"))[28]), 3) == 7
    assert feature(table, "sbe_active_hours_24h")[5] == 3
    hours = feature(table, "hours_since_sbe")
    assert hours[1] == CAP_H and hours[5] == 0 and hours[9] == 4


def test_features_never_look_ahead() -> None:
    base = dict(ecc_corrected_total=list(range(48)), temperature_c=[50 + h % 7 for h in range(48)])
    short = build_features(hourly_table(["g"], 30, **base)).values
    long = build_features(hourly_table(["g"], 48, **base)).values
    np.testing.assert_array_equal(short, long[:30])


def test_windows_do_not_cross_gpus() -> None:
    table = hourly_table(["a", "b"], 10, ecc_corrected_total={"a": [100] * 10, "b": list(range(10))})
    growth = np.round(np.expm1(feature(table, "sbe_growth_24h")), 3)
    assert np.all(growth[:10] == 0) and growth[19] == 9


def test_temperature_relative_to_node_peers_uses_the_median() -> None:
    temps = {"a": [50] * 10, "b": [51] * 10, "c": [49] * 10, "hot": [70] * 10}
    table = hourly_table(["a", "b", "c", "hot"], 10, temperature_c=temps)
    rel = feature(table, "temp_vs_node_6h").reshape(4, 10)[:, -1]
    assert list(rel) == [-0.5, 0.5, -1.5, 19.5]  # median of 49, 50, 51, 70 is 50.5


def test_throttle_fractions_count_only_hardware_reasons() -> None:
    bits = [int(Throttle.GPU_IDLE)] * 12 + [int(Throttle.HW_THERMAL_SLOWDOWN | Throttle.HW_SLOWDOWN)] * 12
    table = hourly_table(["g"], 24, throttle_reasons=bits)
    assert feature(table, "throttle_hw_24h")[-1] == 0.5
    assert feature(table, "throttle_hw_6h")[-1] == 1.0
    assert feature(table, "throttle_power_cap_24h")[-1] == 0.0


def test_missing_fields_stay_nan() -> None:
    table = hourly_table(["g"], 5, ecc_corrected_total=float("nan"))
    assert np.all(np.isnan(feature(table, "sbe_growth_24h")))


def test_labels_mark_the_horizon_before_each_failure_and_skip_the_repair_window() -> None:
    table = hourly_table(["g", "h"], 100)
    fails = [FailureLabel("g", T0 + 30.5 * HOUR), FailureLabel("g", T0 + 80.5 * HOUR), FailureLabel("x", T0)]
    rl = label_rows(table, fails, horizon_s=24 * HOUR)
    g = slice(0, 100)  # rows of "g" are first; row k is at hour k + 1
    positive_hours = np.flatnonzero(rl.positive[g]) + 1
    assert list(positive_hours) == list(range(7, 31)) + list(range(57, 81))
    unusable_hours = np.flatnonzero(~rl.usable[g]) + 1
    assert list(unusable_hours) == list(range(31, 55)) + list(range(81, 101))
    assert not rl.positive[100:].any() and rl.usable[100:].all()
    assert rl.next_failure[9] == T0 + 30.5 * HOUR
