"""Fixtures for the ``corral`` client tests: an isolated config file and a runner for the real commands.

The commands are mounted on a throwaway ``typer.Typer`` through :func:`cli.client_commands.register`, exactly as
``cli.main`` mounts them, so these tests do not depend on the simulator and telemetry commands being importable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from cli import client_commands

Invoke = Callable[..., Result]


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the client at a config file under ``tmp_path`` and clear the overrides a developer may have set."""
    path = tmp_path / "home" / "corral" / "config.json"
    monkeypatch.setenv("CORRAL_CONFIG", str(path))
    for var in ("CORRAL_URL", "CORRAL_TOKEN", "CORRAL_DEBUG"):
        monkeypatch.delenv(var, raising=False)
    return path


@pytest.fixture
def corral(config_file: Path) -> Invoke:
    """Run ``corral <args>`` in-process and return click's result (``stdout``, ``stderr``, ``exit_code``)."""
    app = typer.Typer(pretty_exceptions_enable=False)
    client_commands.register(app)
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        # catch_exceptions=False: a traceback escaping a command is exactly the bug these tests exist to catch.
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return invoke


#: One canned answer: (status, content type, body) or (status, content type, body, extra headers).
Reply = tuple[int, str, str] | tuple[int, str, str, dict[str, str]]
NOT_FOUND: Reply = (404, "application/json", '{"detail": "Not found."}')


@dataclass
class Canned:
    """What the stub portal answers: ``routes`` maps ``"METHOD /path"`` to a reply, or to a list of replies given
    one per request in order (the last one repeats), to script a portal that fails and then recovers."""

    routes: dict[str, Reply | list[Reply]] = field(default_factory=dict)
    seen: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def next_reply(self, key: str) -> Reply:
        route = self.routes.get(key, NOT_FOUND)
        if isinstance(route, list):
            return route.pop(0) if len(route) > 1 else route[0]
        return route


@pytest.fixture
def stub_portal() -> Iterator[tuple[str, Canned]]:
    """A real HTTP server on a free port that answers canned responses: how the client meets 5xx answers, HTML
    from a wrong URL and other misbehaviour that the real portal does not produce on demand."""
    canned = Canned()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            path = self.path.split("?", 1)[0]
            canned.seen.append((self.command, self.path, dict(self.headers)))
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            status, content_type, body, *extra = canned.next_reply(f"{self.command} {path}")
            data = body.encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in (extra[0] if extra else {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 (http.server's naming)

        def log_message(self, format: str, *args: object) -> None:  # keep test output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", canned
    finally:
        server.shutdown()
        server.server_close()
