"""Row labels: "does this GPU fail fatally within the horizon after this row?"

A GPU can fail more than once in real data (repaired and returned under the same UUID), so labels look up the
*next* failure after each row. Rows from a failure until one horizon later are marked unusable: the GPU is drained
or being repaired, its telemetry is not that of a GPU in service, and the failure row itself carries the fatal XID
that the reactive health check already acts on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from telemetry.schema import FailureLabel
from telemetry.table import TelemetryTable

_KEY_SPAN = 10**10  # seconds; larger than any timestamp offset, so (gpu, time) packs into one sortable int64


@dataclass(frozen=True, eq=False)
class RowLabels:
    """Per table row: ``positive`` (fails within the horizon), ``usable`` (in service, not after a failure) and
    ``next_failure`` (epoch seconds, NaN if none is recorded)."""

    positive: np.ndarray
    usable: np.ndarray
    next_failure: np.ndarray


def failure_events(table: TelemetryTable, labels: Iterable[FailureLabel]) -> tuple[np.ndarray, np.ndarray]:
    """Failures of GPUs present in the table as (gpu code, time) arrays sorted by (gpu, time)."""
    code = {name: i for i, name in enumerate(table.gpu_names)}
    pairs = sorted({(code[lb.gpu_uuid], lb.failed_at) for lb in labels if lb.gpu_uuid in code})
    gpus = np.array([g for g, _ in pairs], dtype=np.int64)
    times = np.array([t for _, t in pairs], dtype=np.float64)
    return gpus, times


def label_rows(table: TelemetryTable, labels: Iterable[FailureLabel], horizon_s: float) -> RowLabels:
    fail_gpu, fail_time = failure_events(table, labels)
    n = len(table)
    if fail_gpu.size == 0 or n == 0:
        return RowLabels(np.zeros(n, dtype=bool), np.ones(n, dtype=bool), np.full(n, np.nan))
    base = min(table.start, float(fail_time.min()))
    row_key = table.gpu.astype(np.int64) * _KEY_SPAN + np.floor(table.timestamp - base).astype(np.int64)
    fail_key = fail_gpu * _KEY_SPAN + np.floor(fail_time - base).astype(np.int64)
    # Next failure strictly after the row (a failure in the same second as the row is the failure row itself).
    nxt = np.searchsorted(fail_key, row_key, side="right")
    has_next = (nxt < fail_gpu.size) & (fail_gpu[np.minimum(nxt, fail_gpu.size - 1)] == table.gpu)
    next_failure = np.where(has_next, fail_time[np.minimum(nxt, fail_gpu.size - 1)], np.nan)
    prev = nxt - 1
    has_prev = (prev >= 0) & (fail_gpu[np.maximum(prev, 0)] == table.gpu)
    since_prev = np.where(has_prev, table.timestamp - fail_time[np.maximum(prev, 0)], np.inf)
    usable = since_prev >= horizon_s
    with np.errstate(invalid="ignore"):
        positive = has_next & (next_failure - table.timestamp <= horizon_s) & usable
    return RowLabels(positive=positive, usable=usable, next_failure=next_failure)
