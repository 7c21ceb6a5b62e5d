"""Production settings: `manage.py check --deploy` is quiet once a TLS site sets its variables, debug is refused in
production and off by default everywhere, and production answers no host it was not told of. Settings are read
once, at import, so each case runs in a fresh interpreter with its own environment. Ref: #15"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Variables the settings read that a developer's shell (or `make test`) may have set: each case sets its own.
READ = ("CORRAL_", "DEBUG", "SECRET_KEY", "DATABASE_URL", "REDIS_URL", "ALLOWED_HOSTS", "SESSION_", "CSRF_")
PRODUCTION = {
    "CORRAL_PRODUCTION": "1",
    "SECRET_KEY": "k7Qx2-not-a-real-secret-but-long-and-random-enough-for-django-9fLw3ZpR8tV",
    # Never connected to: `check` reads no database unless asked (--database).
    "DATABASE_URL": "postgres://corral:corral@127.0.0.1:9/corral",
    "REDIS_URL": "redis://127.0.0.1:9/0",
    "ALLOWED_HOSTS": "corral.example.org",
}
TLS = {
    "CORRAL_SECURE_SSL_REDIRECT": "1",
    "CORRAL_HSTS_SECONDS": "31536000",
    "CORRAL_HSTS_INCLUDE_SUBDOMAINS": "1",
    "CORRAL_HSTS_PRELOAD": "1",
    "CORRAL_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
}


def _run(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(READ)}
    full = {**base, "CORRAL_DATA_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "portal.settings", **env}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=full, capture_output=True, text=True, timeout=120)


def _settings(env: dict[str, str], tmp_path: Path, *names: str) -> list[str]:
    code = f"import portal.settings as s; print(*(repr(getattr(s, n)) for n in {names!r}), sep='\\n')"
    done = _run(["-c", code], env, tmp_path)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_check_deploy_is_quiet_with_the_tls_variables_set(tmp_path: Path) -> None:
    done = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], PRODUCTION | TLS, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout
    assert _settings(PRODUCTION | TLS, tmp_path, "SECURE_PROXY_SSL_HEADER", "SESSION_COOKIE_SECURE") == [
        "('HTTP_X_FORWARDED_PROTO', 'https')",
        "True",
    ]


def test_check_deploy_names_what_is_missing_without_them(tmp_path: Path) -> None:
    done = _run(["manage.py", "check", "--deploy"], PRODUCTION, tmp_path)
    for warning in ("security.W004", "security.W008"):  # HSTS, SSL redirect
        assert warning in done.stderr, done.stderr
    for quiet in ("security.W012", "security.W016", "security.W018"):  # secure cookies, DEBUG
        assert quiet not in done.stderr


def test_debug_is_refused_in_production(tmp_path: Path) -> None:
    done = _run(["-c", "import portal.settings"], PRODUCTION | {"DEBUG": "1"}, tmp_path)
    assert done.returncode != 0
    assert "ImproperlyConfigured: DEBUG=1 cannot be combined with CORRAL_PRODUCTION=1" in done.stderr


def test_debug_is_off_unless_asked_for(tmp_path: Path) -> None:
    # The demo (`make run`) included: Django's technical pages list every URL pattern to anyone.
    assert _settings({}, tmp_path, "DEBUG") == ["False"]
    assert _settings({"DEBUG": "1"}, tmp_path, "DEBUG") == ["True"]


def test_production_answers_no_test_host(tmp_path: Path) -> None:
    production = {k: v for k, v in PRODUCTION.items() if k != "ALLOWED_HOSTS"}
    assert "testserver" not in _settings(production, tmp_path, "ALLOWED_HOSTS")[0]
    assert "testserver" in _settings({}, tmp_path, "ALLOWED_HOSTS")[0]


def test_a_metrics_network_that_is_no_network_fails_at_start_up(tmp_path: Path) -> None:
    done = _run(["-c", "import portal.settings"], {"CORRAL_METRICS_ALLOW_FROM": "10.0.0.0/8,prometheus"}, tmp_path)
    assert done.returncode != 0 and "CORRAL_METRICS_ALLOW_FROM" in done.stderr
