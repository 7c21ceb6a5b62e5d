"""Table writing for the synthetic fleet: collect each GPU's block of rows, then build one :class:`TelemetryTable`.

The generator emits one GPU life at a time, node by node, so the rows come out sorted by (GPU, time) as the table
requires, and names are coded as they first appear; building the columns once at the end keeps a fleet of millions
of rows to a few array concatenations.
"""

from __future__ import annotations

import numpy as np

from telemetry.schema import NUMERIC_COLUMNS
from telemetry.table import TelemetryTable, table_from_codes


class TableWriter:
    """The rows emitted so far, as per-GPU blocks of column arrays. ``t`` is the epoch time of every step."""

    __slots__ = ("t", "parts", "ts", "node_codes", "gpu_codes", "node_names", "gpu_names")

    def __init__(self, t: np.ndarray) -> None:
        self.t = t
        self.parts: dict[str, list[np.ndarray]] = {c: [] for c in NUMERIC_COLUMNS}
        self.ts: list[np.ndarray] = []
        self.node_codes: list[np.ndarray] = []
        self.gpu_codes: list[np.ndarray] = []
        self.node_names: list[str] = []
        self.gpu_names: list[str] = []

    def emit(self, node: str, uuid: str, sl: slice, cols: dict[str, np.ndarray]) -> None:
        """Add one GPU life's rows: the steps ``sl`` of GPU ``uuid`` on ``node``, one array per numeric column."""
        n = sl.stop - sl.start
        if not self.node_names or self.node_names[-1] != node:
            self.node_names.append(node)
        self.ts.append(self.t[sl])
        self.node_codes.append(np.full(n, len(self.node_names) - 1, dtype=np.int32))
        self.gpu_codes.append(np.full(n, len(self.gpu_names), dtype=np.int32))
        self.gpu_names.append(uuid)
        for c in NUMERIC_COLUMNS:
            self.parts[c].append(np.asarray(cols[c], dtype=np.float64))

    def table(self) -> TelemetryTable:
        """Every row emitted, as one table."""
        return table_from_codes(
            np.concatenate(self.ts),
            np.concatenate(self.node_codes),
            self.node_names,
            np.concatenate(self.gpu_codes),
            self.gpu_names,
            {c: np.concatenate(parts) for c, parts in self.parts.items()},
        )
