"""The demo's web process as `make run` starts it (scripts/run_dev.py's command and environment, from a shell with
no DEBUG set): an unknown address is the site's own 404 page, not Django's debug page listing every URL pattern, and
with debug off the stylesheet and the favicon are still served. Ref: #15, #18"""

from __future__ import annotations

import importlib.util
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[3]
#: What Django's technical 404 page shows and the site's must not.
TECHNICAL = ("URLconf", "Django tried these URL patterns", "DEBUG = True", "portal.urls")
START_TIMEOUT = 30.0

pytestmark = pytest.mark.timeout(90)


def _run_dev(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """scripts/run_dev.py (not a package) as a module; registered while it loads, as its dataclasses need."""
    spec = importlib.util.spec_from_file_location("run_dev", ROOT / "scripts" / "run_dev.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "run_dev", module)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def demo_web(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The demo's gunicorn on a free port, on SQLite and the filesystem broker in tmp_path (a bare machine)."""
    for name in ("DEBUG", "DATABASE_URL", "REDIS_URL", "CORRAL_PRODUCTION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CORRAL_DATA_DIR", str(tmp_path))
    run_dev = _run_dev(monkeypatch)
    port = _free_port()
    (web,) = [c for c in run_dev.build_children(port=port, fake_gpus=1, simulate_only=True) if c.name == "web"]
    log = (tmp_path / "web.log").open("wb")
    process = subprocess.Popen(web.argv, cwd=ROOT, env=run_dev.child_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not run_dev.port_in_use(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the demo's web process did not start:\n{(tmp_path / 'web.log').read_text()[-3000:]}")
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_the_demo_answers_an_unknown_address_with_the_sites_404(demo_web: str) -> None:
    with httpx.Client(base_url=demo_web, timeout=10) as http:
        missing = http.get("/no/such/page/")
        assert missing.status_code == 404
        assert "<h1>Page not found</h1>" in missing.text and 'href="/"' in missing.text
        for leak in TECHNICAL:
            assert leak not in missing.text, leak
        # Debug off does not cost the demo its static files: WhiteNoise serves them, the icon too.
        assert http.get("/static/corral.css").status_code == 200
        icon = http.get("/favicon.ico", follow_redirects=True)
        assert icon.status_code == 200 and icon.history[0].status_code == 301
        assert icon.content[:4] == b"\x00\x00\x01\x00"


def test_the_demo_on_another_port_links_to_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ref: #18: with CORRAL_PORT=8731 a notification's link still read http://127.0.0.1:8000/jobs/4/."""
    run_dev = _run_dev(monkeypatch)
    monkeypatch.delenv("CORRAL_PUBLIC_URL", raising=False)
    assert run_dev.child_env(port=8731)["CORRAL_PUBLIC_URL"] == "http://127.0.0.1:8731"
    monkeypatch.setenv("CORRAL_PUBLIC_URL", "https://corral.example.org")  # the caller's wins
    assert run_dev.child_env(port=8731)["CORRAL_PUBLIC_URL"] == "https://corral.example.org"
