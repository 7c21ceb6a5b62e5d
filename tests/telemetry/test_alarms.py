from __future__ import annotations

import numpy as np

from telemetry.predict.alarms import ScoredRows, choose_threshold, measure, persistent_scores, raise_alarms

H = 3600.0
DAY = 24 * H


def rows(gpu: list[int], hours: list[float], score: list[float], fails: dict[int, float]) -> ScoredRows:
    g = np.array(gpu)
    return ScoredRows(
        gpu=g,
        timestamp=np.array(hours) * H,
        score=np.array(score, dtype=float),
        next_failure=np.array([fails.get(x, np.nan) for x in gpu]) * H,
    )


def test_one_alarm_per_gpu_per_cooldown() -> None:
    r = rows([0] * 5 + [1] * 2, [1, 2, 30, 40, 60, 1, 2], [0.9, 0.9, 0.9, 0.1, 0.9, 0.2, 0.95], {})
    # GPU 0: h1, then h30 (a day later), then h60; h2 and h40 fall in a cooldown. GPU 1: h2.
    assert list(raise_alarms(r, 0.5, DAY)) == [0, 2, 4, 6]


def test_precision_recall_lead_and_censoring() -> None:
    # GPU 0 fails at h100 (alarm at h90: true, lead 10 h). GPU 1 never fails (alarm at h50: false).
    # GPU 2 fails at h200 with no alarm (missed). GPU 3 alarms at h190, unknown outcome (censored: data ends at h200).
    r = rows(
        [0, 0, 1, 2, 3],
        [80, 90, 50, 150, 190],
        [0.1, 0.8, 0.7, 0.2, 0.9],
        {0: 100, 2: 200},
    )
    failures = (np.array([0, 2]), np.array([100, 200]) * H)
    m = measure(r, 0.5, horizon_s=DAY, failures=failures, period=(0, 200 * H))
    assert (m.true_alarms, m.false_alarms, m.censored_alarms, m.alarms) == (1, 1, 1, 2)
    assert (m.failures, m.caught) == (2, 1)
    assert m.precision == 0.5 and m.recall == 0.5 and m.median_lead_hours == 10.0
    # A failure in the first horizon of the period is not counted in recall.
    early = measure(r, 0.5, horizon_s=DAY, failures=failures, period=(90 * H, 200 * H))
    assert early.failures == 1


def test_alarm_earlier_than_the_horizon_is_false() -> None:
    r = rows([0], [10], [0.9], {0: 100})
    m = measure(r, 0.5, horizon_s=DAY, failures=(np.array([0]), np.array([100 * H])), period=(0, 300 * H))
    assert (m.true_alarms, m.false_alarms, m.caught) == (0, 1, 0)
    assert m.early_alarms == 0  # 90 h before the failure: more than three horizons


def test_a_false_alarm_on_a_gpu_that_fails_within_three_horizons_is_early() -> None:
    # GPU 0 alarms at h10 and fails at h50 (40 h later: false, but early); GPU 1 alarms and never fails.
    r = rows([0, 1], [10, 10], [0.9, 0.9], {0: 50})
    m = measure(r, 0.5, horizon_s=DAY, failures=(np.array([0]), np.array([50 * H])), period=(0, 300 * H))
    assert (m.true_alarms, m.false_alarms, m.early_alarms) == (0, 2, 1)
    assert m.as_dict()["early_false_alarms"] == 1


def test_persistence_takes_the_minimum_over_recent_rows_of_the_same_gpu() -> None:
    gpu = np.array([0, 0, 0, 0, 1, 1])
    score = np.array([0.9, 0.1, 0.8, 0.9, 0.7, 0.6])
    assert list(persistent_scores(gpu, score, 2)) == [0.9, 0.1, 0.1, 0.8, 0.7, 0.6]
    assert list(persistent_scores(gpu, score, 1)) == list(score)


def test_choose_threshold_reaches_the_target_with_most_recall() -> None:
    # Three failing GPUs score 0.9, 0.8, 0.6; healthy GPUs score 0.7 and 0.5.
    r = rows([0, 1, 2, 3, 4], [90, 90, 90, 90, 90], [0.9, 0.8, 0.6, 0.7, 0.5], {0: 100, 1: 100, 2: 100})
    failures = (np.array([0, 1, 2]), np.array([100, 100, 100]) * H)
    kw = dict(horizon_s=DAY, failures=failures, period=(0, 300 * H), min_true_alarms=1)
    strict = choose_threshold(r, target_precision=1.0, **kw)
    assert strict.target_met and strict.threshold > 0.7 and strict.metrics.recall == 2 / 3
    loose = choose_threshold(r, target_precision=0.75, **kw)
    assert loose.target_met and loose.metrics.recall == 1.0 and loose.metrics.precision == 0.75


def test_choose_threshold_falls_back_quietly_when_nothing_is_caught() -> None:
    r = rows([0, 1], [10, 10], [0.3, 0.6], {})
    choice = choose_threshold(
        r, horizon_s=DAY, failures=(np.array([]), np.array([])), period=(0, 100 * H), target_precision=0.8
    )
    assert not choice.target_met and choice.threshold == 0.6
