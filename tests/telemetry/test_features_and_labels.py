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


# -- dynamics and neighbour-relative features (Ref: #4) ----------------------------------------------------------


def test_growth_over_one_hour_and_acceleration_against_the_previous_days() -> None:
    # +1 per hour for the first two days, then +3 per hour: the last day is faster than the two before it.
    sbe = [k if k <= 47 else 47 + 3 * (k - 47) for k in range(72)]
    table = hourly_table(["g"], 72, ecc_corrected_total=sbe)
    assert round(float(np.expm1(feature(table, "sbe_growth_1h"))[71]), 3) == 3
    # Last 24 h: 119 - 47 = 72. The 48 h before: 47 (row 0 is the window's base), i.e. 23.5 per day.
    expected = np.log1p(72) - np.log1p(23.5)
    assert feature(table, "sbe_accel_24h_vs_72h")[71] == np.float32(expected)
    # A burst that stopped: the last day is slower than the days before, so acceleration is negative.
    stopped = hourly_table(["g"], 72, ecc_corrected_total=[min(k, 30) * 5 for k in range(72)])
    assert feature(stopped, "sbe_accel_24h_vs_72h")[71] < 0


def test_remap_growth_and_its_acceleration() -> None:
    rows = [0] * 30 + [1] * 20 + [2, 3, 4, 5] + [6] * 18  # one remap, then five in quick succession
    table = hourly_table(["g"], 72, remapped_rows=rows, retired_pages=float("nan"))
    assert round(float(np.expm1(feature(table, "repairs_growth_72h"))[71]), 3) == 6
    assert round(float(np.expm1(feature(table, "repairs_growth_6h"))[53]), 3) == 4  # rows 48-53: 1 -> 5
    assert feature(table, "repairs_events_24h")[71] == 5
    # 5 remaps in the last day against 1 in the two days before (0.5 per day).
    assert feature(table, "repairs_accel_24h_vs_72h")[71] == np.float32(np.log1p(5) - np.log1p(0.5))


def test_time_since_the_first_precursor_of_the_week() -> None:
    sbe = [0] * 10 + [1, 2, 3] + [3] * 187  # corrected errors at hours 11-13 only
    table = hourly_table(["g"], 200, ecc_corrected_total=sbe)
    first = feature(table, "hours_since_first_sbe_7d")
    assert first[5] == 0 and first[10] == 0 and first[12] == 2 and first[100] == 90
    assert first[190] == 0  # the burst left the 7-day window
    assert feature(table, "hours_since_sbe")[100] == 88


def test_a_hot_aisle_heats_the_node_but_not_one_gpu_against_its_neighbours() -> None:
    aisle = [50.0] * 48 + [60.0] * 24  # the whole node, from hour 49
    runaway = [50.0 + max(0, h - 40) ** 2 / 30 for h in range(72)]  # one GPU, accelerating
    temps = {"a": aisle, "b": [t + 1 for t in aisle], "c": [t - 1 for t in aisle], "d": aisle}
    table = hourly_table(["a", "b", "c", "d"], 72, temperature_c=temps)
    last = np.arange(4) * 72 + 71
    # Last 6 h at 60 against 72 h that were two thirds at 50: +6.7 for every GPU of the node.
    assert np.allclose(feature(table, "node_temp_trend_6h_vs_72h")[last], 20 / 3)
    assert np.all(np.abs(feature(table, "temp_vs_node_6h")[last]) <= 1.5)
    temps["d"] = runaway
    table = hourly_table(["a", "b", "c", "d"], 72, temperature_c=temps)
    rise = feature(table, "temp_vs_node_rise_6h_vs_24h")
    assert rise[3 * 72 + 71] > 5 and np.all(np.abs(rise[[71, 143, 215]]) < 1)


def test_power_per_unit_of_work_against_the_node() -> None:
    power = {"a": [300.0] * 30, "b": [300.0] * 30, "c": [330.0] * 30}
    table = hourly_table(["a", "b", "c"], 30, power_w=power, gpu_util=80.0)
    per_util = feature(table, "power_per_util_vs_node_24h").reshape(3, 30)[:, -1]
    assert per_util[0] == 0 and per_util[1] == 0 and per_util[2] == np.float32(30 / 80)


def test_power_brake_on_the_whole_node_versus_one_gpu() -> None:
    brake = int(Throttle.HW_POWER_BRAKE_SLOWDOWN | Throttle.HW_SLOWDOWN)
    node_wide = hourly_table(["a", "b", "c"], 24, throttle_reasons=brake)
    assert np.all(feature(node_wide, "throttle_power_brake_vs_node_24h") == 0)
    alone = hourly_table(["a", "b", "c"], 24, throttle_reasons={"a": [brake] * 24, "b": [0] * 24, "c": [0] * 24})
    share = feature(alone, "throttle_power_brake_vs_node_24h").reshape(3, 24)[:, -1]
    assert list(share) == [1.0, -0.5, -0.5]


def test_pcie_replays_shared_with_node_mates_behind_a_switch() -> None:
    replays = {"a": [20 * h for h in range(30)], "b": [20 * h for h in range(30)], "c": [0] * 30, "x": [0] * 30}
    table = hourly_table(["a", "b", "c", "x"], 30, pcie_replay=replays, node_of={"x": "node1"})
    peers = feature(table, "pcie_peers_replaying_24h").reshape(4, 30)[:, -1]
    assert list(peers) == [1, 1, 2, 0]
