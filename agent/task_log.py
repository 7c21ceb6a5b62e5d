"""Reading a task's log for the portal: byte-exact chunks of ``output.log`` as text.

The portal keeps byte offsets into each log (see the protocol), so a chunk must re-encode to exactly as many bytes
as were read: a multi-byte character cut by the end of a chunk waits for the next one, and bytes that are not
UTF-8 (and NULs) become ``?``, one byte for one byte.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LOG_NAME = "output.log"

#: Invalid UTF-8 bytes (decoded as surrogates) and NULs become "?", one byte for one byte, so the text we send
#: re-encodes to exactly as many bytes as we read and the portal's byte offsets stay right (see the protocol).
_SANITISE = {code: "?" for code in range(0xDC80, 0xDD00)} | {0: "?"}


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Log bytes ``[offset, offset + len(text.encode()))`` of a task, and the size of its whole log."""

    offset: int
    text: str
    size: int


def read_chunk(log_fd: int | None, offset: int, limit: int, *, error: str | None, growing: bool) -> LogChunk:
    """Up to ``limit`` bytes from ``offset`` of the log open as ``log_fd``, or of ``error`` (a task that failed to
    start has that sentence as its whole log), as text of exactly as many UTF-8 bytes. ``growing``: the task still
    writes, so the last character may be incomplete."""
    chunk, size = read_bytes(log_fd, offset, limit, error=error, growing=growing)
    text = chunk.decode("utf-8", errors="surrogateescape").translate(_SANITISE)
    return LogChunk(offset=offset, text=text, size=size)


def read_bytes(log_fd: int | None, offset: int, limit: int, *, error: str | None, growing: bool) -> tuple[bytes, int]:
    """Up to ``limit`` raw bytes from ``offset`` of the log (as :func:`read_chunk` reads it), and the size of the
    whole log. The bytes end on a whole character when the task still writes or the read stopped at ``limit``: a
    character cut in two would reach the portal as two ``?``. At the end of a finished log they are all sent."""
    if error is not None:
        data = error.encode()
        size, chunk = len(data), data[offset : offset + limit]
    else:
        try:
            size = os.fstat(log_fd).st_size if log_fd is not None else 0
            chunk = os.pread(log_fd, limit, offset) if log_fd is not None and offset < size else b""
        except OSError:
            size, chunk = 0, b""
    if growing or len(chunk) == limit:
        chunk = _trim_partial_utf8(chunk)
    return chunk, size


def _trim_partial_utf8(chunk: bytes) -> bytes:
    """Cut an incomplete multi-byte character off the end; it is sent whole with the next chunk."""
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): how long should its sequence be?
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return chunk[:-back] if need > back else chunk
    return chunk
