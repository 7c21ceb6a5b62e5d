"""Reading and writing ``telemetry.csv`` and ``labels.csv`` (schema in :mod:`telemetry.schema`).

Timestamps are ISO 8601 in UTC with a ``Z`` suffix (``2025-03-01T14:00:00Z``); the reader also accepts an
explicit offset, a naive time (taken as UTC) or plain epoch seconds, because sites will hand-edit or generate these
files with other tools. Bad input raises ``ValueError`` naming the file, line and column, which the CLI prints as
one line.

Both directions work column-wise on numpy arrays: the synthetic fleet and a site's export are millions of rows.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import numpy as np

from telemetry.schema import (
    COLUMNS,
    DECIMAL_COLUMNS,
    LABEL_COLUMNS,
    NUMERIC_COLUMNS,
    REQUIRED_COLUMNS,
    FailureLabel,
    TelemetryRow,
)
from telemetry.table import TelemetryTable, build_table

_CHUNK_ROWS = 200_000


# -- timestamps -----------------------------------------------------------------------------------------------------


def format_time(epoch_s: float) -> str:
    """``2025-03-01T14:00:00Z`` (whole seconds; sub-second parts are dropped)."""
    return datetime.fromtimestamp(int(epoch_s), tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float:
    """Seconds since the epoch from ISO 8601 (UTC if no offset) or from a plain number."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


# -- telemetry.csv ----------------------------------------------------------------------------------------------------


def write_telemetry(target: str | Path | IO[str], table: TelemetryTable) -> int:
    """Write a table in schema column order. Returns the number of rows written."""
    with _open_for_write(target) as fh:
        fh.write(",".join(COLUMNS) + "\n")
        for start in range(0, len(table), _CHUNK_ROWS):
            part = table.take(np.arange(start, min(start + _CHUNK_ROWS, len(table))))
            cells = [_time_cells(part.timestamp), _name_cells(part.node, part.node_names)]
            cells.append(_name_cells(part.gpu, part.gpu_names))
            cells.extend(_number_cells(c, part.column(c)) for c in NUMERIC_COLUMNS)
            fh.write("\n".join(",".join(row) for row in zip(*cells, strict=True)))
            fh.write("\n")
    return len(table)


def write_telemetry_rows(target: str | Path | IO[str], rows: Iterable[TelemetryRow]) -> int:
    """Stream rows (for an exporter reading a database cursor); same output as :func:`write_telemetry`."""
    count = 0
    with _open_for_write(target) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(
                [format_time(row.timestamp), row.node, row.gpu_uuid]
                + [_format_number(c, getattr(row, c)) for c in NUMERIC_COLUMNS]
            )
            count += 1
    return count


def read_telemetry(source: str | Path | IO[str]) -> TelemetryTable:
    """Load a telemetry CSV; optional columns may be missing, unknown extra columns are ignored."""
    name = str(source) if isinstance(source, str | Path) else getattr(source, "name", "telemetry.csv")
    with _open_for_read(source) as fh:
        text = fh.read()
    header_line, _, body = text.partition("\n")
    header = [h.strip() for h in next(csv.reader([header_line]), [])]
    if not header or header == [""]:
        raise ValueError(f"{name}: empty file")
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise ValueError(f"{name}: missing column(s) {', '.join(missing)}")
    if '"' not in body and header[:3] == ["timestamp", "node", "gpu_uuid"]:
        parsed = _read_plain(body.replace("\r", ""), header, name)
    else:
        parsed = _read_with_csv(body, header, name)
    times, nodes, gpus, values = parsed
    if times.size == 0:
        raise ValueError(f"{name}: no rows")
    values["xid"] = np.nan_to_num(values["xid"], nan=0.0)
    try:
        return build_table(times, nodes, gpus, values)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


_Parsed = tuple[np.ndarray, list[str], list[str], dict[str, np.ndarray]]
_FIRST_THREE = re.compile(r"^([^,\n]*),([^,\n]*),([^,\n]*)(?:,|$)", re.MULTILINE)


def _fill_empty(body: str) -> str:
    """Write ``nan`` into empty numeric fields so numpy's parser accepts them (twice: ",,," holds two)."""
    filled = body.replace(",,", ",nan,").replace(",,", ",nan,").replace(",\n", ",nan\n")
    return filled + "nan" if filled.endswith(",") else filled


def _read_plain(body: str, header: list[str], name: str) -> _Parsed:
    """Fast path for files without quoting whose first columns are timestamp,node,gpu_uuid (what our writers
    produce): numbers go through numpy's C parser, names through one regex pass."""
    body = "\n".join(line for line in body.split("\n") if line.strip()) if "\n\n" in body else body.strip("\n")
    if not body:
        return np.empty(0), [], [], {}
    lines = body.count("\n") + 1
    if body.count(",") != lines * (len(header) - 1):
        return _read_with_csv(body, header, name)  # ragged rows: let the csv path find and report the bad line
    first = _FIRST_THREE.findall(body)
    numeric = [c for c in NUMERIC_COLUMNS if c in header]
    try:
        matrix = np.loadtxt(
            io.StringIO(_fill_empty(body)),
            delimiter=",",
            usecols=[header.index(c) for c in numeric],
            dtype=np.float64,
            ndmin=2,
        )
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    values = {c: matrix[:, j] for j, c in enumerate(numeric)}
    for c, v in values.items():
        _check_range(v, name, 1, c)
    cache: dict[str, float] = {}
    times = _parse_times([row[0] for row in first], cache, name, 1)
    return times, [row[1] for row in first], [row[2] for row in first], values


def _read_with_csv(body: str, header: list[str], name: str) -> _Parsed:
    """General path (quoted fields, any column order), chunked to bound memory."""
    position = {c: header.index(c) for c in COLUMNS if c in header}
    times: list[np.ndarray] = [np.empty(0)]
    nodes: list[str] = []
    gpus: list[str] = []
    numbers: dict[str, list[np.ndarray]] = {c: [] for c in NUMERIC_COLUMNS if c in position}
    cache: dict[str, float] = {}
    line = 1
    for chunk in _chunks(csv.reader(io.StringIO(body)), _CHUNK_ROWS):
        for offset, row in enumerate(chunk):
            if len(row) < len(header):
                raise ValueError(f"{name} line {line + offset + 1}: expected {len(header)} fields, got {len(row)}")
        columns = list(zip(*chunk, strict=False))
        times.append(_parse_times(columns[position["timestamp"]], cache, name, line))
        nodes.extend(columns[position["node"]])
        gpus.extend(columns[position["gpu_uuid"]])
        for c in numbers:
            numbers[c].append(_parse_numbers(columns[position[c]], name, line, c))
        line += len(chunk)
    values = {c: np.concatenate(parts) if parts else np.empty(0) for c, parts in numbers.items()}
    return np.concatenate(times), nodes, gpus, values


# -- labels.csv -------------------------------------------------------------------------------------------------------


def write_labels(target: str | Path | IO[str], labels: Iterable[FailureLabel]) -> int:
    count = 0
    with _open_for_write(target) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow((*LABEL_COLUMNS, "cause"))
        for label in sorted(labels, key=lambda lb: (lb.failed_at, lb.gpu_uuid)):
            writer.writerow((label.gpu_uuid, format_time(label.failed_at), label.cause))
            count += 1
    return count


def read_labels(source: str | Path | IO[str]) -> list[FailureLabel]:
    name = str(source) if isinstance(source, str | Path) else getattr(source, "name", "labels.csv")
    with _open_for_read(source) as fh:
        reader = csv.DictReader(fh)
        fieldnames = [f.strip() for f in reader.fieldnames or []]
        missing = [c for c in LABEL_COLUMNS if c not in fieldnames]
        if missing:
            raise ValueError(f"{name}: missing column(s) {', '.join(missing)}")
        reader.fieldnames = fieldnames
        labels = []
        for line, row in enumerate(reader, start=2):
            uuid = (row.get("gpu_uuid") or "").strip()
            if not uuid:
                raise ValueError(f"{name} line {line}: empty gpu_uuid")
            try:
                failed_at = parse_time(row.get("failed_at") or "")
            except ValueError as exc:
                raise ValueError(f"{name} line {line}: failed_at: {exc}") from None
            labels.append(FailureLabel(gpu_uuid=uuid, failed_at=failed_at, cause=(row.get("cause") or "").strip()))
    return labels


# -- helpers ----------------------------------------------------------------------------------------------------------


class _Passthrough:
    """Context manager that leaves a caller-owned file open."""

    def __init__(self, fh: IO[str]) -> None:
        self._fh = fh

    def __enter__(self) -> IO[str]:
        return self._fh

    def __exit__(self, *exc: object) -> None:
        return None


def _open_for_write(target: str | Path | IO[str]) -> IO[str] | _Passthrough:
    if isinstance(target, str | Path):
        return open(target, "w", newline="", encoding="utf-8")  # noqa: SIM115 - closed by the caller's with
    return _Passthrough(target)


def _open_for_read(source: str | Path | IO[str]) -> IO[str] | _Passthrough:
    if isinstance(source, str | Path):
        return open(source, newline="", encoding="utf-8")  # noqa: SIM115 - closed by the caller's with
    return _Passthrough(source)


def _chunks(reader: Iterator[list[str]], size: int) -> Iterator[list[list[str]]]:
    chunk: list[list[str]] = []
    for row in reader:
        if not row:
            continue
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _parse_times(cells: Sequence[str], cache: dict[str, float], name: str, first_line: int) -> np.ndarray:
    out = np.empty(len(cells))
    for i, cell in enumerate(cells):
        value = cache.get(cell)
        if value is None:
            try:
                value = parse_time(cell)
            except ValueError as exc:
                raise ValueError(f"{name} line {first_line + i + 1}: timestamp: {exc}") from None
            cache[cell] = value
        out[i] = value
    return out


def _parse_numbers(cells: tuple[str, ...], name: str, first_line: int, column: str) -> np.ndarray:
    raw = np.char.strip(np.asarray(cells, dtype=str))
    raw = np.where(raw == "", "nan", raw)
    try:
        values = raw.astype(np.float64)
    except ValueError:
        for i, cell in enumerate(raw):
            try:
                float(cell)
            except ValueError:
                raise ValueError(f"{name} line {first_line + i + 1}: {column}: not a number: {cell!r}") from None
        raise
    _check_range(values, name, first_line, column)
    return values


def _check_range(values: np.ndarray, name: str, first_line: int, column: str) -> None:
    bad = np.isinf(values) | (values < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} line {first_line + i + 1}: {column}: must be a finite number >= 0, got {values[i]}")


def _time_cells(ts: np.ndarray) -> list[str]:
    uniq, inverse = np.unique(ts, return_inverse=True)
    text = [format_time(t) for t in uniq]
    return [text[i] for i in inverse]


def _name_cells(codes: np.ndarray, names: tuple[str, ...]) -> list[str]:
    quoted = [_quote(n) for n in names]
    return [quoted[c] for c in codes]


def _quote(text: str) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow([text])
    return buf.getvalue()


def _number_cells(column: str, values: np.ndarray) -> list[str]:
    missing = np.isnan(values)
    if column in DECIMAL_COLUMNS:
        text = np.char.mod("%.1f", np.where(missing, 0.0, values))
    else:
        text = np.round(np.where(missing, 0.0, values)).astype(np.int64).astype(str)
    text = np.where(missing, "", text)
    cells: list[str] = text.tolist()
    return cells


def _format_number(column: str, value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.1f}" if column in DECIMAL_COLUMNS else str(round(value))
