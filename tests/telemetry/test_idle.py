"""The one rule for "idle GPUs": below the threshold over the window, with enough of the window measured. Ref: #18"""

from __future__ import annotations

from telemetry.idle import GpuTime, IdleRule, judge, window_words

RULE = IdleRule(threshold=10.0, window=1800.0, min_coverage=0.75)


def _time(gpus: int, util: float, covered_share: float = 1.0) -> GpuTime:
    covered = gpus * RULE.window * covered_share
    return GpuTime(covered=covered, used=covered * util / 100.0)


def test_a_job_below_the_threshold_over_a_measured_window_is_idle() -> None:
    verdict = judge(RULE, gpus=4, time=_time(4, 3.0))
    assert verdict is not None
    assert verdict.text == "holds 4 GPUs and used 3 % of them over the last 30 min"
    assert verdict.coverage == 1.0


def test_busy_or_thinly_measured_jobs_are_not_idle() -> None:
    assert judge(RULE, gpus=4, time=_time(4, 10.0)) is None  # at the threshold: not below it
    assert judge(RULE, gpus=4, time=_time(4, 55.0)) is None
    assert judge(RULE, gpus=4, time=_time(4, 0.0, covered_share=0.5)) is None  # too little of the window measured
    assert judge(RULE, gpus=4, time=GpuTime()) is None  # no telemetry at all
    assert judge(RULE, gpus=0, time=_time(1, 0.0)) is None
    assert judge(RULE, gpus=1, time=_time(1, 0.0, covered_share=0.8)) is not None


def test_one_gpu_and_other_windows_read_right() -> None:
    verdict = judge(IdleRule(threshold=10.0, window=7200.0, min_coverage=0.5), gpus=1, time=GpuTime(7200.0, 36.0))
    assert verdict is not None and verdict.text == "holds 1 GPU and used 0 % of it over the last 2 h"
    assert [window_words(s) for s in (60, 1800, 5400, 7200, 10)] == ["1 min", "30 min", "90 min", "2 h", "1 min"]


def test_a_reading_counts_as_idle_below_the_threshold_only() -> None:
    assert RULE.reading_is_idle(9.9) and not RULE.reading_is_idle(10.0)
