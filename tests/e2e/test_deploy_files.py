"""docker-compose.yml and the Dockerfile stay valid and keep mirroring what `make test` and `make run` start.

No Docker engine is needed (CI has none): the compose file is parsed and checked here, and the production settings
are loaded with exactly the environment compose gives the portal's containers.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PORTAL_SERVICES = ("migrate", "web", "worker", "beat")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def interpolate(value: str) -> str:
    """Compose's ${VAR:-default} and ${VAR:?error} with nothing set: the default, or a stand-in value."""
    value = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)
    return re.sub(r"\$\{[A-Z_]+:\?[^}]*\}", "stand-in-for-a-required-variable", value)


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "redis", *PORTAL_SERVICES, "agent"}
    assert services["postgres"]["image"] == "postgres:15"
    assert services["redis"]["image"] == "redis:7"
    for name in (*PORTAL_SERVICES, "agent"):
        assert services[name]["image"] == "corral:latest" and services[name]["build"] == ".", name
    assert "python:3.11" in (ROOT / "Dockerfile").read_text()  # pyproject: requires-python ~3.11
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".git", ".venv", "var"} <= set(ignored)


def test_commands_mirror_the_processes_the_tests_start(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["web"]["command"][:2] == ["gunicorn", "portal.wsgi:application"]
    assert services["worker"]["command"][:4] == ["celery", "-A", "portal", "worker"]
    assert services["beat"]["command"][:4] == ["celery", "-A", "portal", "beat"]
    agent = services["agent"]["command"]
    assert agent[0] == "corral-agent"
    assert agent[agent.index("--fake-gpus") + 1] == "4"
    assert agent[agent.index("--server") + 1] == "http://web:8000"
    migrate = " ".join(services["migrate"]["command"])
    assert "manage.py migrate" in migrate and "manage.py node_token node-1" in migrate


def test_web_scales_out(compose: dict[str, Any]) -> None:
    """`--scale web=N` needs a host port per replica: a fixed "8000:8000" would make the second replica fail."""
    (mapping,) = compose["services"]["web"]["ports"]
    host, container = interpolate(mapping).rsplit(":", 1)
    first, last = (int(port) for port in host.split("-"))
    assert container == "8000" and last - first >= 3
    for name in ("web", "worker", "beat"):
        assert "container_name" not in compose["services"][name], name  # a fixed name cannot be scaled either


def test_portal_containers_run_in_production_mode(compose: dict[str, Any]) -> None:
    for name in PORTAL_SERVICES:
        env = compose["services"][name]["environment"]
        assert env["CORRAL_PRODUCTION"] == "1", name
        assert {"SECRET_KEY", "DATABASE_URL", "REDIS_URL"} <= set(env), name
        assert env["DATABASE_URL"].startswith("postgres://") and "@postgres:5432/" in env["DATABASE_URL"]
        assert env["REDIS_URL"].startswith("redis://redis:6379/")
    # The agent holds no database credentials: only the portal's URL and its token.
    assert "environment" not in compose["services"]["agent"]


def test_production_settings_load_with_the_compose_environment(compose: dict[str, Any], tmp_path: Path) -> None:
    env = {k: interpolate(str(v)) for k, v in compose["services"]["web"]["environment"].items()}
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "SYSTEMROOT")}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env={**keep, **env, "CORRAL_DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_management_commands_the_deployment_relies_on_exist() -> None:
    from django.core.management import get_commands

    assert {"migrate", "collectstatic", "node_token", "seed_demo"} <= set(get_commands())


def test_test_servers_match_the_compose_versions() -> None:
    """`make test` runs against PostgreSQL 15 and Redis 7, the versions production gets."""
    database_url, redis_url = os.environ.get("DATABASE_URL", ""), os.environ.get("REDIS_URL", "")
    if not (database_url.startswith("postgres") and redis_url):
        pytest.skip("needs the PostgreSQL and Redis of `make test`")
    import psycopg
    import redis

    with psycopg.connect(database_url, connect_timeout=5) as connection:
        pg_major = connection.info.server_version // 10000
    redis_major = int(redis.Redis.from_url(redis_url).info("server")["redis_version"].split(".")[0])
    if (pg_major, redis_major) != (15, 7) and not os.environ.get("CI"):
        pytest.skip(f"local servers are PostgreSQL {pg_major} / Redis {redis_major}; CI checks for 15 / 7")
    assert (pg_major, redis_major) == (15, 7)
