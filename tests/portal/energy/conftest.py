"""Energy-saving fixtures: a small training cluster, and real power commands written as tiny shell scripts (the
one hardware boundary: the scripts stand in for ipmitool and the like)."""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from portal.nodes.models import Node
from tests.factories import MembershipFactory, QuotaFactory, TenantFactory, UserFactory
from tests.fixtures import register_node


@dataclass
class Commands:
    ok: str  # logs its arguments to ``log`` (one line a call) and exits 0
    fail: str  # says why on stderr and exits 1
    slow: str  # sleeps past any test's timeout
    missing: str  # no such file
    log: Path

    def logged(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.fixture
def commands(tmp_path: Path) -> Commands:
    log = tmp_path / "power.log"
    return Commands(
        ok=_script(tmp_path / "ok.sh", f'echo "$*" >> {log}\necho "done $*"\n'),
        fail=_script(tmp_path / "fail.sh", 'echo "BMC of $* unreachable" >&2\nexit 1\n'),
        slow=_script(tmp_path / "slow.sh", "sleep 30\n"),
        missing=str(tmp_path / "no-such-command"),
        log=log,
    )


@pytest.fixture
def energy_on(settings, commands: Commands) -> Commands:  # noqa: ANN001
    """Energy saving on, with commands that work; a floor of 1 node, no buffer, 2 s command timeout."""
    settings.CORRAL_POWER_OFF_COMMAND = f"{commands.ok} --off"
    settings.CORRAL_POWER_ON_COMMAND = f"{commands.ok} --on"
    settings.CORRAL_POWER_COMMAND_TIMEOUT = 2.0
    settings.CORRAL_POWER_MIN_NODES_ON = 1
    settings.CORRAL_POWER_BUFFER = 0
    return commands


@dataclass
class Cluster:
    nodes: list[Node]
    user: object


@pytest.fixture
def cluster(db) -> Cluster:  # noqa: ANN001
    """Five training nodes of 4 GPUs (n1..n5), up and on; a member of a tenant without caps."""
    tenant = TenantFactory(slug="lab")
    QuotaFactory(tenant=tenant, gpu_limit=None)
    user = UserFactory(username="alice")
    MembershipFactory(user=user, tenant=tenant)
    nodes = [register_node(f"n{i}")[0] for i in range(1, 6)]
    return Cluster(nodes=nodes, user=user)
