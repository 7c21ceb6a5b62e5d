"""Small hand-made telemetry tables for the predictor tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from telemetry.schema import NUMERIC_COLUMNS
from telemetry.table import TelemetryTable, build_table

HOUR = 3600.0
T0 = 1_735_689_600.0  # 2025-01-01T00:00:00Z


def hourly_table(
    gpus: Sequence[str], hours: int, *, node_of: dict[str, str] | None = None, **columns: object
) -> TelemetryTable:
    """``hours`` hourly rows per GPU. Keyword arguments give a column: a scalar, a per-hour sequence shared by all
    GPUs, or a dict GPU -> per-hour sequence. Unset numeric columns are 0 (temperature 50)."""
    ts, nodes, names = [], [], []
    values: dict[str, list[float]] = {c: [] for c in NUMERIC_COLUMNS}
    for g in gpus:
        for h in range(hours):
            ts.append(T0 + (h + 1) * HOUR)
            nodes.append((node_of or {}).get(g, "node0"))
            names.append(g)
            for c in NUMERIC_COLUMNS:
                spec = columns.get(c, 50.0 if c == "temperature_c" else 0.0)
                if isinstance(spec, dict):
                    spec = spec.get(g, 0.0)
                values[c].append(float(spec[h]) if isinstance(spec, list | tuple | np.ndarray) else float(spec))
    return build_table(np.array(ts), nodes, names, {c: np.array(v) for c, v in values.items()})
