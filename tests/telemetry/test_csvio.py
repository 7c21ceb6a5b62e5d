from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from telemetry.csvio import (
    format_time,
    parse_time,
    read_labels,
    read_telemetry,
    write_labels,
    write_telemetry,
    write_telemetry_rows,
)
from telemetry.schema import COLUMNS, REQUIRED_COLUMNS, FailureLabel, TelemetryRow
from telemetry.synth import FleetConfig, generate
from telemetry.table import table_from_rows

ROW = TelemetryRow(
    timestamp=1_735_693_200.0,
    node="n1",
    gpu_uuid="GPU-a",
    gpu_util=87.5,
    mem_used_mb=40_000,
    mem_total_mb=81_559,
    temperature_c=61.2,
    power_w=512.3,
    sm_clock_mhz=1980,
    ecc_corrected_total=12,
    ecc_uncorrected_total=0,
    retired_pages=None,
    xid=63,
    throttle_reasons=4,
    remapped_rows=2,
    pcie_replay=None,
)


def test_times_are_iso_utc_and_parse_back() -> None:
    assert format_time(1_735_693_200) == "2025-01-01T01:00:00Z"
    for text in ("2025-01-01T01:00:00Z", "2025-01-01T02:00:00+01:00", "2025-01-01T01:00:00", "1735693200"):
        assert parse_time(text) == 1_735_693_200.0
    with pytest.raises(ValueError, match="ISO 8601"):
        parse_time("yesterday")


def test_generated_fleet_round_trips(tmp_path: Path) -> None:
    fleet = generate(FleetConfig(gpus=16, days=3, seed=4))
    write_telemetry(tmp_path / "t.csv", fleet.table)
    back = read_telemetry(tmp_path / "t.csv")
    assert back.gpu_names == fleet.table.gpu_names and len(back) == len(fleet.table)
    np.testing.assert_array_equal(back.timestamp, fleet.table.timestamp)
    for c in ("gpu_util", "temperature_c", "ecc_corrected_total", "retired_pages", "xid", "throttle_reasons"):
        np.testing.assert_allclose(back.column(c), fleet.table.column(c), equal_nan=True)


def test_row_writer_matches_table_writer_and_empty_cells_mean_unknown() -> None:
    by_rows, by_table = io.StringIO(), io.StringIO()
    write_telemetry_rows(by_rows, [ROW])
    write_telemetry(by_table, table_from_rows([ROW]))
    assert by_rows.getvalue() == by_table.getvalue()
    header, line = by_rows.getvalue().splitlines()
    assert header.split(",") == list(COLUMNS)
    assert line == "2025-01-01T01:00:00Z,n1,GPU-a,87.5,40000,81559,61.2,512.3,1980,12,0,,63,4,2,"
    (back,) = list(read_telemetry(io.StringIO(by_rows.getvalue())).rows())
    assert back == ROW


def test_quoted_names_and_any_column_order_use_the_general_reader() -> None:
    text = (
        "gpu_uuid,node,timestamp,xid,gpu_util,mem_used_mb,mem_total_mb,temperature_c,power_w,sm_clock_mhz,"
        "ecc_corrected_total,ecc_uncorrected_total,retired_pages,throttle_reasons,comment\n"
        'GPU-b,"rack 1, node 2",2025-01-01T01:00:00Z,,10,1,2,40,100,900,0,0,,0,hello\n'
    )
    table = read_telemetry(io.StringIO(text))
    (row,) = list(table.rows())
    assert row.node == "rack 1, node 2" and row.xid == 0 and row.remapped_rows is None
    out = io.StringIO()
    write_telemetry(out, table)
    assert '"rack 1, node 2"' in out.getvalue()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty file"),
        ("timestamp,node\n", "missing column"),
        (",".join(REQUIRED_COLUMNS) + "\n", "no rows"),
        (",".join(REQUIRED_COLUMNS) + "\nnot-a-time,n,g,1,1,1,1,1,1,1,1,1,0,0\n", "timestamp"),
        (",".join(REQUIRED_COLUMNS) + "\n2025-01-01T00:00:00Z,n,g,abc,1,1,1,1,1,1,1,1,0,0\n", "abc"),
        (",".join(REQUIRED_COLUMNS) + "\n2025-01-01T00:00:00Z,n,g,-5,1,1,1,1,1,1,1,1,0,0\n", ">= 0"),
        (",".join(REQUIRED_COLUMNS) + "\n2025-01-01T00:00:00Z,n,g,1\n", "expected 14 fields"),
        (
            ",".join(REQUIRED_COLUMNS)
            + "\n2025-01-01T00:00:00Z,n,g,1,1,1,1,1,1,1,1,1,0,0\n2025-01-01T00:00:00Z,n,g,1,1,1,1,1,1,1,1,1,0,0\n",
            "duplicate row",
        ),
    ],
)
def test_bad_telemetry_is_a_one_line_value_error(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        read_telemetry(io.StringIO(text))
    assert "\n" not in str(info.value)


def test_labels_round_trip_and_validation(tmp_path: Path) -> None:
    labels = [FailureLabel("GPU-b", 1_735_700_000.0, "xid_79"), FailureLabel("GPU-a", 1_735_690_000.0)]
    write_labels(tmp_path / "l.csv", labels)
    assert read_labels(tmp_path / "l.csv") == sorted(labels, key=lambda lb: lb.failed_at)
    assert read_labels(io.StringIO("gpu_uuid,failed_at\nGPU-x,2025-01-02T00:00:00Z\n"))[0].cause == ""
    with pytest.raises(ValueError, match="missing column"):
        read_labels(io.StringIO("uuid,when\n"))
    with pytest.raises(ValueError, match="line 2: failed_at"):
        read_labels(io.StringIO("gpu_uuid,failed_at\nGPU-x,soon\n"))
