"""Reading a node-demand series into 10-minute steps."""

from __future__ import annotations

import gzip
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduling.energy.series import SeriesError, read_series, steps_from_minutes


def test_a_step_holds_the_maximum_of_its_minutes_and_gaps_repeat_the_step_before() -> None:
    t0 = datetime(2024, 1, 1, 0, 3)
    times = [t0, t0 + timedelta(minutes=1), t0 + timedelta(minutes=8), t0 + timedelta(minutes=27)]
    s = steps_from_minutes(times, [4, 9, 5, 2], [10, 10, 12, 10])
    assert [str(x) for x in s.starts] == [
        "2024-01-01T00:00",
        "2024-01-01T00:10",
        "2024-01-01T00:20",
        "2024-01-01T00:30",
    ]
    assert s.demand.tolist() == [9, 5, 5, 2] and s.total.tolist() == [10, 12, 12, 10]
    assert s.filled == 1


def test_read_series_accepts_gzip(tmp_path: Path) -> None:
    path = tmp_path / "s.csv.gz"
    path.write_bytes(gzip.compress(b"time,active,total\n2024-01-01 00:00:00,3,8\n2024-01-01 00:01:00,5,8\n"))
    s = read_series(path)
    assert s.demand.tolist() == [5] and s.total.tolist() == [8]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("time,active\n2024-01-01 00:00:00,3\n", "missing column"),
        ("time,active,total\n2024-01-01 00:00:00,x,8\n", "line 2"),
        ("time,active,total\n2024-01-01 00:00:00,inf,8\n", "line 2"),
        ("time,active,total\n2024-01-01 00:00:00,3,8\x00\n", "line 2"),
        ("time\x00,active,total\n", "missing column"),
        ("time,active,total\nyesterday,3,8\n", "line 2"),
        ("time,active,total\n", "no rows"),
        ("time,active,total\n2024-01-01 00:00:00,-1,8\n", ">= 0"),
    ],
)
def test_bad_files_are_one_clear_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(SeriesError, match=message):
        read_series(path)


def test_a_missing_file_is_a_series_error(tmp_path: Path) -> None:
    with pytest.raises(SeriesError, match="No such file"):
        read_series(tmp_path / "nope.csv")


def test_fill_outages_repeats_the_demand_before_a_long_run_of_zeros_only() -> None:
    from scheduling.energy.series import fill_outages

    from .helpers import steps

    series = steps([5, 7, 0, 0, 0, 6, 0, 4, 0, 0])
    fixed = fill_outages(series, min_steps=3)
    assert fixed.demand.tolist() == [5, 7, 7, 7, 7, 6, 0, 4, 0, 0]  # a short dip and a trailing pair stay
    assert fixed.filled == 3
    assert fill_outages(series, min_steps=0).demand.tolist() == series.demand.tolist()
    assert fill_outages(steps([0, 0, 0, 0, 3]), min_steps=2).demand.tolist() == [0, 0, 0, 0, 3]  # idle from the start
