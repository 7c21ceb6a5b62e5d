from __future__ import annotations

import numpy as np
import pytest

from telemetry.synth import FailureKind, FleetConfig, generate
from telemetry.xid import FATAL_XIDS

SMALL = FleetConfig(gpus=48, days=20, seed=7, failure_rate=3.0, false_precursor_rate=2.0)


@pytest.fixture(scope="module")
def fleet():  # noqa: ANN201
    return generate(SMALL)


def test_same_seed_same_fleet_other_seed_other_fleet(fleet) -> None:  # noqa: ANN001
    again = generate(SMALL)
    assert again.table.gpu_names == fleet.table.gpu_names and again.labels == fleet.labels
    np.testing.assert_array_equal(again.table.column("temperature_c"), fleet.table.column("temperature_c"))
    assert generate(FleetConfig(gpus=48, days=20, seed=8, failure_rate=3.0)).labels != fleet.labels


def test_shape_and_plausible_ranges(fleet) -> None:  # noqa: ANN001
    t = fleet.table
    assert len(t.node_names) == 6
    assert len(t) >= 48 * 20 * 24 * 0.8  # failed GPUs leave a gap until their replacement arrives
    assert np.all((t.column("gpu_util") >= 0) & (t.column("gpu_util") <= 100))
    assert 15 < np.nanmin(t.column("temperature_c")) and np.nanmax(t.column("temperature_c")) < 120
    assert np.all(t.column("mem_used_mb") <= t.column("mem_total_mb"))
    # Each GPU reports either retired pages (pre-Ampere) or remapped rows, never both.
    assert np.all(np.isnan(t.column("retired_pages")) ^ np.isnan(t.column("remapped_rows")))


def test_counters_never_decrease(fleet) -> None:  # noqa: ANN001
    t = fleet.table
    same = t.gpu[1:] == t.gpu[:-1]
    for c in ("ecc_corrected_total", "ecc_uncorrected_total", "pcie_replay"):
        assert np.all(np.diff(t.column(c))[same] >= 0), c


def test_failures_end_the_gpu_with_a_fatal_xid_and_a_replacement_follows(fleet) -> None:  # noqa: ANN001
    t = fleet.table
    assert len(fleet.labels) >= 5
    assert {str(k) for k in fleet.kinds.values()} <= {k.value for k in FailureKind}
    code = {name: i for i, name in enumerate(t.gpu_names)}
    for label in fleet.labels:
        rows = np.flatnonzero(t.gpu == code[label.gpu_uuid])
        last = rows[-1]
        assert t.timestamp[last] - 3600 <= label.failed_at <= t.timestamp[last]
        assert int(t.column("xid")[last]) in FATAL_XIDS and label.cause == f"xid_{int(t.column('xid')[last])}"
    assert len(t.gpu_names) > SMALL.gpus  # replacements got new UUIDs


def test_healthy_gpus_never_show_fatal_xids(fleet) -> None:  # noqa: ANN001
    t = fleet.table
    failed = {i for i, name in enumerate(t.gpu_names) if name in fleet.kinds}
    fatal_rows = np.isin(t.column("xid"), list(FATAL_XIDS))
    assert set(np.unique(t.gpu[fatal_rows]).tolist()) <= failed


def test_precursors_that_never_fail_exist(fleet) -> None:  # noqa: ANN001
    kinds = {k for episodes in fleet.false_alarm_gpus.values() for k in episodes}
    assert kinds and kinds <= {"weak_cell", "pcie", "hot"}
    assert not set(fleet.false_alarm_gpus) & set(fleet.kinds)


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="gpus"):
        FleetConfig(gpus=0)
    with pytest.raises(ValueError, match="sudden_fraction"):
        FleetConfig(sudden_fraction=1.5)
