"""The load generator of ``bench/api_load.py``: closed-loop HTTP/1.1 keep-alive clients on raw asyncio sockets.

Run as its own process, so it never shares a GIL with the benchmark's control code or with the portal:

    python bench/api_load_gen.py < spec.json > result.json      # the generator (spec: :class:`Spec`)
    python bench/api_load_gen.py --null-server PORT              # a trivial server, to calibrate the generator

Each of ``concurrency`` connections sends one request, reads the whole answer, and sends the next at once (no think
time), for ``seconds``. Connection ``i`` talks to target ``i % len(targets)``: several web servers share the load
round-robin. Only answers received before the deadline count; answers still in flight at the deadline are awaited
for at most ``timeout`` seconds and then counted as timeouts. The parser reads what gunicorn writes: a status line,
headers, then a ``Content-Length`` body or a chunked one; a ``Connection: close`` answer makes the client reconnect.

The result (one JSON object): answers per status, errors per exception type, latency percentiles (ms) of every
answer, requests per second over the measured time, answers per whole second, the first few non-2xx bodies and
the generator's own CPU seconds (so a run can show it was not the bottleneck).

Standard library only; Python 3.11.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import resource
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_BODIES = 3
BODY_EXCERPT = 400


@dataclass(frozen=True)
class Spec:
    """What to send, where, how hard and for how long."""

    targets: list[tuple[str, int]]
    method: str
    path: str
    headers: dict[str, str]
    body: str
    concurrency: int
    seconds: float
    timeout: float = 30.0
    max_requests: int | None = None  # stop after this many answers (all connections together)

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Spec:
        return cls(
            targets=[(str(h), int(p)) for h, p in raw["targets"]],
            method=str(raw.get("method", "GET")),
            path=str(raw["path"]),
            headers={str(k): str(v) for k, v in raw.get("headers", {}).items()},
            body=str(raw.get("body", "")),
            concurrency=int(raw["concurrency"]),
            seconds=float(raw["seconds"]),
            timeout=float(raw.get("timeout", 30.0)),
            max_requests=None if raw.get("max_requests") is None else int(raw["max_requests"]),
        )

    def request_bytes(self, host: str, port: int) -> bytes:
        body = self.body.encode()
        lines = [f"{self.method} {self.path} HTTP/1.1", f"Host: {host}:{port}", "Connection: keep-alive"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        if body or self.method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body)}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@dataclass
class Tally:
    latencies: list[float] = field(default_factory=list)  # seconds, answered requests only
    statuses: Counter[int] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    per_second: Counter[int] = field(default_factory=Counter)
    bodies: list[str] = field(default_factory=list)  # first non-2xx answers, for the report
    answered: int = 0
    last_answer: float = 0.0


class Closed(Exception):
    """The server closed the connection before a whole answer."""


async def read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    """(status, body, keep-alive) of one HTTP/1.1 answer."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise Closed("connection closed before an answer") from exc
    lines = head[:-4].split(b"\r\n")
    status = int(lines[0].split(b" ", 2)[1])
    length: int | None = None
    chunked, keep_alive = False, True
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        key = name.strip().lower()
        if key == b"content-length":
            length = int(value.strip())
        elif key == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
        elif key == b"connection" and value.strip().lower() == b"close":
            keep_alive = False
    if chunked:
        parts = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers are sent by gunicorn
                break
            parts.append(await reader.readexactly(size + 2))
        body = b"".join(p[:-2] for p in parts)
    elif length is not None:
        body = await reader.readexactly(length)
    else:  # no length: the body runs to the end of the connection
        body, keep_alive = await reader.read(), False
    return status, body, keep_alive


class Generator:
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.tally = Tally()
        self.started = 0.0
        self.deadline = 0.0
        self.stop = False

    async def connection(self, index: int) -> None:
        host, port = self.spec.targets[index % len(self.spec.targets)]
        request = self.spec.request_bytes(host, port)
        tally = self.tally
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        perf = time.perf_counter
        try:
            while not self.stop and perf() < self.deadline:
                try:
                    if writer is None or reader is None:
                        reader, writer = await asyncio.open_connection(host, port)
                    sent = perf()
                    writer.write(request)
                    status, body, keep_alive = await read_answer(reader)
                    done = perf()
                except (OSError, Closed, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                    tally.errors[type(exc).__name__] += 1
                    if writer is not None:
                        writer.close()
                    reader = writer = None
                    await asyncio.sleep(0.01)  # a refused connection must not spin
                    continue
                if done > self.deadline:
                    break  # answered after the end: not part of the measured window
                tally.latencies.append(done - sent)
                tally.statuses[status] += 1
                tally.per_second[int(done - self.started)] += 1
                tally.answered += 1
                tally.last_answer = done
                if not 200 <= status < 300 and len(tally.bodies) < MAX_BODIES:
                    tally.bodies.append(f"{status}: {body[:BODY_EXCERPT].decode(errors='replace')}")
                if self.spec.max_requests is not None and tally.answered >= self.spec.max_requests:
                    self.stop = True
                if not keep_alive:
                    writer.close()
                    reader = writer = None
        finally:
            if writer is not None:
                writer.close()

    async def run(self) -> dict[str, Any]:
        self.started = time.perf_counter()
        self.deadline = self.started + self.spec.seconds
        tasks = [asyncio.create_task(self.connection(i)) for i in range(self.spec.concurrency)]
        _, pending = await asyncio.wait(tasks, timeout=self.spec.seconds + self.spec.timeout)
        for task in pending:  # stuck past the deadline plus the timeout: a timeout each
            task.cancel()
            self.tally.errors["Timeout"] += 1
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        return self.result()

    def result(self) -> dict[str, Any]:
        tally = self.tally
        end = tally.last_answer if self.stop else min(time.perf_counter(), self.deadline)
        elapsed = max(1e-9, end - self.started)
        ordered = sorted(tally.latencies)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        ok = sum(n for s, n in tally.statuses.items() if 200 <= s < 300)
        seconds = [tally.per_second.get(i, 0) for i in range(int(math.ceil(elapsed)))]
        return {
            "answered": tally.answered,
            "ok": ok,
            "elapsed_s": round(elapsed, 3),
            "rate_per_s": round(tally.answered / elapsed, 1),
            "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
            "errors": dict(tally.errors),
            "latency_ms": summary_ms(ordered),
            "per_second": seconds,
            "bodies": tally.bodies,
            "generator_cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "concurrency": self.spec.concurrency,
        }


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of sorted values (q in 0..100); NaN for none."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summary_ms(ordered: list[float]) -> dict[str, float | None]:
    """p50/p95/p99/max/mean of sorted seconds, in milliseconds (None when there are none)."""

    def ms(value: float) -> float | None:
        return None if math.isnan(value) else round(value * 1000, 2)

    mean = sum(ordered) / len(ordered) if ordered else math.nan
    return {
        "p50": ms(percentile(ordered, 50)),
        "p95": ms(percentile(ordered, 95)),
        "p99": ms(percentile(ordered, 99)),
        "max": ms(ordered[-1] if ordered else math.nan),
        "mean": ms(mean),
    }


# --- the null server, to calibrate the generator ------------------------------------------------------------------
NULL_BODY = b'{"id": 1, "state": "pending"}'
NULL_ANSWER = (
    b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: "
    + str(len(NULL_BODY)).encode()
    + b"\r\n\r\n"
    + NULL_BODY
)


async def _null_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(NULL_ANSWER)
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def null_server(port: int) -> None:
    server = await asyncio.start_server(_null_client, "127.0.0.1", port, backlog=1024)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--null-server", type=int, metavar="PORT", help="answer 201 to everything on this port")
    args = parser.parse_args()
    if args.null_server:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(null_server(args.null_server))
        return 0
    spec = Spec.from_json(json.load(sys.stdin))
    result = asyncio.run(Generator(spec).run())
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
