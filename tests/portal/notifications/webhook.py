"""A webhook to send to: a real HTTP server in a thread that records each request and answers as told."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: What the receiver answers after a failure status: text a webhook's page might hold, that must never reach a user.
SECRET_BODY = b"internal page: SECRET-123"


@dataclass
class Receiver:
    """A webhook: records each request; answers the statuses in ``answers`` in turn, then 200."""

    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: deque[int] = field(default_factory=deque)
    delay: float = 0.0

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [request["json"] for request in self.requests]


@contextmanager
def serve_webhook() -> Iterator[Receiver]:
    """A receiver listening on a free port of 127.0.0.1 until the block ends."""
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            received.requests.append(
                {"path": self.path, "content_type": self.headers.get("Content-Type"), "json": json.loads(body)}
            )
            if received.delay:
                time.sleep(received.delay)
            status = received.answers.popleft() if received.answers else 200
            try:
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(b"ok" if status == 200 else SECRET_BODY)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the sender gave up waiting (the timeout test)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    received.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T000/B000/abc"
    try:
        yield received
    finally:
        server.shutdown()
        server.server_close()
