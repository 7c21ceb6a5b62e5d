"""A column-oriented, in-memory telemetry table: what the CSV reader returns and what the predictor consumes.

Millions of rows (2,000 GPUs x 60 days x 24 hours is 2.9 M) are too many for one Python object per row, so the
table keeps one numpy array per column, with node and GPU names stored once and referenced by integer codes.
Rows are kept sorted by (GPU, time): every windowed feature relies on that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from telemetry.schema import DECIMAL_COLUMNS, NUMERIC_COLUMNS, TelemetryRow


@dataclass(frozen=True, eq=False)
class TelemetryTable:
    """Rows sorted by (gpu, timestamp). ``values[c]`` is float64 with NaN where the GPU did not report ``c``;
    ``node``/``gpu`` are codes into ``node_names``/``gpu_names``."""

    timestamp: np.ndarray
    node: np.ndarray
    gpu: np.ndarray
    node_names: tuple[str, ...]
    gpu_names: tuple[str, ...]
    values: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.timestamp.shape[0])

    def column(self, name: str) -> np.ndarray:
        """A numeric column; all-NaN when the source did not have it (an optional column)."""
        found = self.values.get(name)
        return found if found is not None else np.full(len(self), np.nan)

    @property
    def start(self) -> float:
        return float(self.timestamp.min()) if len(self) else 0.0

    @property
    def end(self) -> float:
        return float(self.timestamp.max()) if len(self) else 0.0

    def take(self, index: np.ndarray) -> TelemetryTable:
        """The rows at ``index`` (a boolean mask or sorted positions), names kept so codes stay valid."""
        return TelemetryTable(
            timestamp=self.timestamp[index],
            node=self.node[index],
            gpu=self.gpu[index],
            node_names=self.node_names,
            gpu_names=self.gpu_names,
            values={k: v[index] for k, v in self.values.items()},
        )

    def rows(self) -> Iterable[TelemetryRow]:
        """Rows as dataclasses, for small tables and tests."""
        cols = {c: self.column(c) for c in NUMERIC_COLUMNS}
        for i in range(len(self)):
            # Any: each column's type (float or int, either may be None) depends on its name, which a dict cannot say.
            kwargs: dict[str, Any] = {c: _plain(c, cols[c][i]) for c in NUMERIC_COLUMNS}
            kwargs["xid"] = kwargs["xid"] or 0
            yield TelemetryRow(
                timestamp=float(self.timestamp[i]),
                node=self.node_names[self.node[i]],
                gpu_uuid=self.gpu_names[self.gpu[i]],
                **kwargs,
            )


def build_table(
    timestamp: np.ndarray,
    node_names: Sequence[str],
    gpu_names: Sequence[str],
    values: Mapping[str, np.ndarray],
) -> TelemetryTable:
    """A table from parallel per-row arrays of timestamps, node names and GPU names."""
    node_codes, node_uniq = _encode(node_names)
    gpu_codes, gpu_uniq = _encode(gpu_names)
    return table_from_codes(timestamp, node_codes, node_uniq, gpu_codes, gpu_uniq, values)


def table_from_codes(
    timestamp: np.ndarray,
    node: np.ndarray,
    node_names: Sequence[str],
    gpu: np.ndarray,
    gpu_names: Sequence[str],
    values: Mapping[str, np.ndarray],
) -> TelemetryTable:
    """A table from per-row codes into ``node_names``/``gpu_names``. Sorts by (GPU, time) and rejects duplicate
    (GPU, time) rows, which would make windowed counts wrong."""
    ts = np.asarray(timestamp, dtype=np.float64)
    gpu_codes = np.asarray(gpu, dtype=np.int32)
    order = np.lexsort((ts, gpu_codes))
    ts, gpu_codes, node_codes = ts[order], gpu_codes[order], np.asarray(node, dtype=np.int32)[order]
    dup = (np.diff(gpu_codes) == 0) & (np.diff(ts) == 0)
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ValueError(f"duplicate row for GPU {gpu_names[gpu_codes[i]]} at timestamp {ts[i]:.0f}")
    cols = {c: np.asarray(v, dtype=np.float64)[order] for c, v in values.items() if c in NUMERIC_COLUMNS}
    return TelemetryTable(ts, node_codes, gpu_codes, tuple(node_names), tuple(gpu_names), cols)


def table_from_rows(rows: Iterable[TelemetryRow]) -> TelemetryTable:
    """A table from row objects (what an exporter builds from the database)."""
    materialised = list(rows)
    values = {c: np.array([_nan(getattr(r, c)) for r in materialised], dtype=np.float64) for c in NUMERIC_COLUMNS}
    return build_table(
        np.array([r.timestamp for r in materialised], dtype=np.float64),
        [r.node for r in materialised],
        [r.gpu_uuid for r in materialised],
        values,
    )


def _encode(names: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Integer codes in first-seen order (a dict is several times faster than ``np.unique`` on strings)."""
    index: dict[str, int] = {}
    codes = np.fromiter((index.setdefault(n, len(index)) for n in names), dtype=np.int32, count=len(names))
    return codes, list(index)


def _nan(value: float | None) -> float:
    return np.nan if value is None else float(value)


def _plain(column: str, value: float) -> float | int | None:
    if np.isnan(value):
        return None
    if column in DECIMAL_COLUMNS:
        return float(value)
    return int(value)
