"""The synthetic fleet: shape, determinism, and each fault type's documented signature (docs/telemetry.md).
Ref: #4"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from telemetry.synth import Episode, FailureKind, Fleet, FleetConfig, generate
from telemetry.throttle import Throttle
from telemetry.xid import FATAL_XIDS

HOUR = 3600.0
# Failure- and episode-heavy, so a small fleet holds every fault type several times.
SMALL = FleetConfig(gpus=96, days=30, seed=7, failure_rate=4.0, false_precursor_rate=4.0, sudden_fraction=0.2)


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return generate(SMALL)


def _rows(fleet: Fleet, uuid: str) -> np.ndarray:
    return np.flatnonzero(fleet.table.gpu == fleet.table.gpu_names.index(uuid))


def _repairs(fleet: Fleet) -> np.ndarray:
    t = fleet.table
    return np.where(np.isnan(t.column("retired_pages")), t.column("remapped_rows"), t.column("retired_pages"))


def _at(fleet: Fleet, rows: np.ndarray, when: float) -> int:
    """Index into ``rows`` of the last row at or before ``when`` (clamped to the GPU's rows)."""
    return int(np.clip(np.searchsorted(fleet.table.timestamp[rows], when, side="right") - 1, 0, len(rows) - 1))


def _failed(fleet: Fleet, kind: FailureKind) -> list[str]:
    return [u for u, k in fleet.kinds.items() if k is kind]


def _temp_vs_node(fleet: Fleet) -> np.ndarray:
    """Each row's temperature minus the median of its node at the same hour."""
    t = fleet.table
    temp = t.column("temperature_c")
    key = t.node.astype(np.int64) * 10**10 + (t.timestamp - t.start).astype(np.int64)
    _, group = np.unique(key, return_inverse=True)
    median = np.array([np.median(temp[group == g]) for g in range(group.max() + 1)])
    return temp - median[group]


def test_same_seed_same_fleet_other_seed_other_fleet(fleet: Fleet) -> None:
    again = generate(SMALL)
    assert again.table.gpu_names == fleet.table.gpu_names and again.labels == fleet.labels
    assert again.episodes == fleet.episodes and again.node_events == fleet.node_events
    for column in ("temperature_c", "ecc_corrected_total", "remapped_rows", "pcie_replay", "xid"):
        np.testing.assert_array_equal(again.table.column(column), fleet.table.column(column))
    assert generate(FleetConfig(gpus=96, days=30, seed=8, failure_rate=4.0)).labels != fleet.labels


def test_shape_and_plausible_ranges(fleet: Fleet) -> None:
    t = fleet.table
    assert len(t.node_names) == 12
    assert len(t) >= 96 * 30 * 24 * 0.8  # failed GPUs leave a gap until their replacement arrives
    assert np.all((t.column("gpu_util") >= 0) & (t.column("gpu_util") <= 100))
    assert 10 < np.nanmin(t.column("temperature_c")) and np.nanmax(t.column("temperature_c")) < 130
    assert np.all(t.column("mem_used_mb") <= t.column("mem_total_mb"))
    # Each GPU reports either retired pages (pre-Ampere) or remapped rows, never both.
    assert np.all(np.isnan(t.column("retired_pages")) ^ np.isnan(t.column("remapped_rows")))


def test_counters_never_decrease(fleet: Fleet) -> None:
    t = fleet.table
    same = t.gpu[1:] == t.gpu[:-1]
    for c in ("ecc_corrected_total", "ecc_uncorrected_total", "pcie_replay"):
        assert np.all(np.diff(t.column(c))[same] >= 0), c
    assert np.all(np.diff(_repairs(fleet))[same] >= 0)


def test_failures_end_the_gpu_with_a_fatal_xid_and_a_replacement_follows(fleet: Fleet) -> None:
    t = fleet.table
    assert {k for k in fleet.kinds.values()} == set(FailureKind)
    for label in fleet.labels:
        last = _rows(fleet, label.gpu_uuid)[-1]
        assert t.timestamp[last] - 3600 <= label.failed_at <= t.timestamp[last]
        assert int(t.column("xid")[last]) in FATAL_XIDS and label.cause == f"xid_{int(t.column('xid')[last])}"
    assert len(t.gpu_names) > SMALL.gpus  # replacements got new UUIDs


def test_healthy_gpus_never_show_fatal_xids(fleet: Fleet) -> None:
    t = fleet.table
    failed = {i for i, name in enumerate(t.gpu_names) if name in fleet.kinds}
    fatal_rows = np.isin(t.column("xid"), list(FATAL_XIDS))
    assert set(np.unique(t.gpu[fatal_rows]).tolist()) <= failed


def test_degrading_memory_accelerates_and_spreads_before_it_fails(fleet: Fleet) -> None:
    sbe, repairs, xid = fleet.table.column("ecc_corrected_total"), _repairs(fleet), fleet.table.column("xid")
    failing = _failed(fleet, FailureKind.MEMORY)
    assert len(failing) >= 5
    accelerating = spreading = 0
    for uuid in failing:
        rows = _rows(fleet, uuid)
        end, day, three_days = rows[-2], rows[max(0, len(rows) - 26)], rows[max(0, len(rows) - 74)]
        last_day, days_before = sbe[end] - sbe[day], sbe[day] - sbe[three_days]
        accelerating += last_day > days_before / 2
        # Several distinct rows fenced off in the last three days, each with XID 63.
        new_rows = repairs[end] - repairs[three_days]
        spreading += new_rows >= 2 and (xid[three_days:end] == 63).sum() >= 2
    assert accelerating >= 0.8 * len(failing) and spreading >= 0.6 * len(failing)


def test_weak_cells_remap_once_then_go_quiet(fleet: Fleet) -> None:
    sbe, repairs = fleet.table.column("ecc_corrected_total"), _repairs(fleet)
    alone = {u for u, kinds in fleet.false_alarm_gpus.items() if set(kinds) == {"weak_cell"}}
    checked = 0
    for uuid, kind, start in fleet.episodes:
        if kind is not Episode.WEAK_CELL or uuid not in alone or fleet.false_alarm_gpus[uuid] != ("weak_cell",):
            continue
        rows = _rows(fleet, uuid)
        s, burst_end, later = (_at(fleet, rows, start + h * HOUR) for h in (-1, 12, 60))
        if later <= burst_end + 24:
            continue  # the data ends too soon after the burst
        # One row (sometimes two adjacent ones) over the GPU's whole life, and no errors beyond a trickle later.
        assert 1 <= repairs[rows[-1]] - repairs[rows[0]] <= 2
        assert sbe[rows[later]] - sbe[rows[burst_end]] <= 3
        assert sbe[rows[burst_end]] - sbe[rows[s]] >= 0
        checked += 1
    assert checked >= 3


def test_marginal_banks_remap_a_handful_of_rows_and_stop() -> None:
    fleet = generate(dataclasses.replace(SMALL, marginal_bank_share=1.0))  # every memory look-alike is a bank
    repairs = _repairs(fleet)
    checked = 0
    for uuid, kind, start in fleet.episodes:
        if kind is not Episode.MARGINAL_BANK or fleet.false_alarm_gpus.get(uuid) != ("marginal_bank",):
            continue
        rows = _rows(fleet, uuid)
        if fleet.table.timestamp[rows[-1]] < start + 120 * HOUR:
            continue
        before, done = _at(fleet, rows, start - HOUR), _at(fleet, rows, start + 110 * HOUR)
        assert 3 <= repairs[rows[done]] - repairs[rows[before]] <= 16
        assert repairs[rows[-1]] == repairs[rows[done]]  # then the bank is quiet
        checked += 1
    assert checked >= 2


def test_thermal_runaway_heats_one_gpu_against_its_node_towards_shutdown(fleet: Fleet) -> None:
    rel, temp = _temp_vs_node(fleet), fleet.table.column("temperature_c")
    failing = [u for u in _failed(fleet, FailureKind.THERMAL) if len(_rows(fleet, u)) >= 100]  # old enough
    assert len(failing) >= 3
    hotter = near_shutdown = 0
    for uuid in failing:
        rows = _rows(fleet, uuid)
        hotter += rel[rows[-4:-1]].mean() - rel[rows[-80:-72]].mean() > 5
        near_shutdown += temp[rows[-6:]].max() >= 75  # an idle GPU may fail cooler: its heat is capped
    assert hotter >= 0.7 * len(failing) and near_shutdown >= 0.7 * len(failing)


def test_a_hot_aisle_heats_the_whole_node_alike(fleet: Fleet) -> None:
    t = fleet.table
    temp, rel = t.column("temperature_c"), _temp_vs_node(fleet)
    events = [e for e in fleet.node_events if e[1] == "hot_aisle" and e[3] - e[2] >= 12 * HOUR]
    assert events
    for node, _, start, end in events:
        mid = (start + end) / 2
        on_node = t.node == t.node_names.index(node)
        during = on_node & (np.abs(t.timestamp - mid) <= HOUR)
        before = on_node & (t.timestamp >= start - 30 * HOUR) & (t.timestamp < start - 6 * HOUR)
        if not before.any():
            continue
        # The node's GPUs are hotter, but their spread around the node's median is what it was.
        assert np.median(temp[during]) >= np.median(temp[before]) - 2
        assert np.abs(rel[during]).mean() < np.abs(rel[before]).mean() + 3


def test_failing_link_replays_and_brakes_on_its_own(fleet: Fleet) -> None:
    t = fleet.table
    pcie, throttle = t.column("pcie_replay"), t.column("throttle_reasons").astype(np.int64)
    failing = _failed(fleet, FailureKind.LINK)
    assert len(failing) >= 3
    brake = int(Throttle.HW_POWER_BRAKE_SLOWDOWN)
    signs = 0
    for uuid in failing:
        rows = _rows(fleet, uuid)[-25:-1]
        signs += pcie[rows[-1]] - pcie[rows[0]] >= 5 and ((throttle[rows] & brake) != 0).any()
    assert signs >= 0.6 * len(failing)


def test_sudden_failures_have_no_precursor(fleet: Fleet) -> None:
    repairs, rel = _repairs(fleet), _temp_vs_node(fleet)
    pcie = fleet.table.column("pcie_replay")
    failing = _failed(fleet, FailureKind.SUDDEN)
    assert failing
    quiet = 0
    for uuid in failing:
        rows = _rows(fleet, uuid)[-73:-1]
        quiet += (
            repairs[rows[-1]] == repairs[rows[0]] and rel[rows[-6:]].mean() < 5 and pcie[rows[-1]] - pcie[rows[0]] < 50
        )
    assert quiet >= 0.8 * len(failing)


def test_look_alikes_outnumber_failing_precursors_at_the_default_rates() -> None:
    fleet = generate(FleetConfig(gpus=480, days=60, seed=3))
    precursors = sum(k is not FailureKind.SUDDEN for k in fleet.kinds.values())
    look_alikes = len(fleet.episodes)
    assert precursors >= 3 and look_alikes >= 2.5 * precursors
    assert {e[1] for e in fleet.episodes} == set(Episode)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="gpus"):
        FleetConfig(gpus=0)
    with pytest.raises(ValueError, match="sudden_fraction"):
        FleetConfig(sudden_fraction=1.5)
    with pytest.raises(ValueError, match="marginal_bank_share"):
        FleetConfig(marginal_bank_share=2.0)
