"""Reading job traces in the shared schema (``../shared/traces/README.md``).

Columns we know are parsed; any other column is ignored, so newer trace files keep working. Rows are returned in
submission order (ties by file order), which is also the order the simulator breaks ties in.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace: when it arrived, how long it runs once it has its GPUs, and who owns it."""

    job_id: str
    submit_time: float
    duration: float
    gpus: int
    user: str = ""
    tenant: str = ""
    status: str = ""
    model: str = ""
    name: str = ""
    #: Seconds the job spent without GPUs in the cluster it came from (None when the source does not say). The
    #: simulator ignores it; it is carried so that a trace exported from a portal can be compared with its replay.
    queue_delay: float | None = None
    #: The most GPUs an elastic job may grow to (the optional ``max_gpus`` column; None: not elastic). Only the
    #: elastic replay (:mod:`scheduling.sim.elastic_sim`) reads it.
    max_gpus: int | None = None


class TraceError(ValueError):
    """A trace file that cannot be read as the shared schema."""


REQUIRED = ("job_id", "submit_time", "duration", "num_gpus")


def read_trace(path: str | Path) -> list[TraceJob]:
    """Read a CSV (optionally ``.gz``) trace."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        return parse_trace(f, source=str(path))


def parse_trace(lines: Iterable[str] | io.TextIOBase, *, source: str = "<trace>") -> list[TraceJob]:
    reader = csv.DictReader(lines)
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or ())]
    if missing:
        raise TraceError(f"{source}: missing column(s) {', '.join(missing)}")
    jobs = list(_rows(reader, source))
    jobs.sort(key=lambda j: j.submit_time)  # stable: equal submit times keep file order
    return jobs


def _rows(reader: csv.DictReader[str], source: str) -> Iterator[TraceJob]:
    for line, row in enumerate(reader, start=2):
        try:
            job = TraceJob(
                job_id=row["job_id"],
                submit_time=float(row["submit_time"]),
                duration=float(row["duration"]),
                gpus=int(float(row["num_gpus"])),
                user=row.get("user") or "",
                tenant=row.get("vc") or "",
                status=row.get("status") or "",
                model=row.get("model_name") or "",
                name=row.get("job_name") or row.get("name") or "",
                queue_delay=float(row["queue_delay"]) if row.get("queue_delay") else None,
                max_gpus=int(float(row["max_gpus"])) if row.get("max_gpus") else None,
            )
        except (TypeError, ValueError) as exc:
            raise TraceError(f"{source}:{line}: {exc}") from None
        if job.max_gpus is not None and job.max_gpus < job.gpus:
            raise TraceError(f"{source}:{line}: max_gpus ({job.max_gpus}) is below num_gpus ({job.gpus})")
        yield job


#: Columns :func:`trace_lines` writes: the shared schema's, then the two optional name columns.
COLUMNS = (
    "job_id", "user", "vc", "submit_time", "duration", "num_gpus", "status", "queue_delay", "model_name", "job_name",
)  # fmt: skip


def write_trace(jobs: Iterable[TraceJob], path: str | Path) -> None:
    """Write jobs in the shared schema (tests and benchmarks generate their own small traces)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8", newline="") as f:
        f.writelines(trace_lines(jobs))


def trace_lines(jobs: Iterable[TraceJob], chunk: int = 1 << 16) -> Iterator[str]:
    """The CSV text of a trace in pieces of about ``chunk`` characters (the portal streams its history export)."""
    buffer = io.StringIO()
    w = csv.writer(buffer, lineterminator="\n")
    w.writerow(COLUMNS)
    for j in jobs:
        delay = "" if j.queue_delay is None else _num(j.queue_delay)
        w.writerow([j.job_id, j.user, j.tenant, _num(j.submit_time), _num(j.duration), j.gpus, j.status, delay,
                    j.model, j.name])  # fmt: skip
        if buffer.tell() >= chunk:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue()


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)
