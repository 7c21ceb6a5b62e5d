"""``corral submit --latency-slo-ms N``: an online share's p99 target reaches the portal and the agent's start
order; bad values are one line and exit code 2 before any request, or the portal's 400 in one line. And `corral
nodes` says a GPU is shared, by how many shares, rather than allocated to one of them. Ref: #17"""

from __future__ import annotations

import json

import pytest

from portal.jobs.models import Job
from portal.nodes.models import Gpu
from tests.cli.conftest import Invoke
from tests.cli.test_against_portal import FakeAgent, Portal, agent, logged_in, one_error_line, portal  # noqa: F401

ONLINE_SHARE = "an online share of one GPU (--gpus below 1 and --class online)"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--latency-slo-ms", "fast"], "error: --latency-slo-ms must be a whole number of milliseconds, got 'fast'"),
        (["--latency-slo-ms", "2.5"], "error: --latency-slo-ms must be a whole number of milliseconds, got '2.5'"),
        (["--latency-slo-ms", "0"], "error: --latency-slo-ms must be at least 1 millisecond, got 0"),
        (["--latency-slo-ms", "-5"], "error: --latency-slo-ms must be at least 1 millisecond, got -5"),
        (["--latency-slo-ms", "50"], f"error: --latency-slo-ms is for {ONLINE_SHARE}"),
        (["--class", "offline", "--latency-slo-ms", "50"], f"error: --latency-slo-ms is for {ONLINE_SHARE}"),
    ],
)  # fmt: skip
def test_a_bad_latency_target_is_one_line_and_a_usage_error(corral: Invoke, args: list[str], words: str) -> None:
    result = corral("submit", "--gpus", "0.25", *args, "--", "python", "serve.py")
    assert result.exit_code == 2
    assert one_error_line(result) == words


def test_whole_gpus_take_no_latency_target(corral: Invoke) -> None:
    result = corral("submit", "--gpus", "2", "--latency-slo-ms", "50", "--", "python", "serve.py")
    assert result.exit_code == 2
    assert one_error_line(result) == f"error: --latency-slo-ms is for {ONLINE_SHARE}"


def test_the_portal_holds_the_upper_bound(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    Gpu.objects.filter(node__name="gpu-up", index=1).update(shared=True)
    result = corral(
        "submit", "--gpus", "0.25", "--class", "online", "--latency-slo-ms", "3600001", "--", "python", "serve.py"
    )
    assert one_error_line(result) == "error: latency_slo_ms: Ensure this value is less than or equal to 3600000."
    assert not Job.objects.exists()


def test_an_online_shares_latency_target_reaches_the_agent(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    Gpu.objects.filter(node__name="gpu-up", index=1).update(shared=True)
    assert sum("free (shared)" in line for line in corral("nodes").stdout.splitlines()) == 1
    result = corral(
        "submit", "--gpus", "0.25", "--class", "online", "--latency-slo-ms", "50", "--json", "--", "python", "serve.py"
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["latency_slo_ms"] == 50
    assert Job.objects.get(pk=body["id"]).latency_slo_ms == 50
    order = agent.start(body["id"])
    assert order["share"]["latency_slo_ms"] == 50 and order["share"]["workload_class"] == "online"

    shared = [line for line in corral("nodes").stdout.splitlines() if "shared (1 share)" in line]
    assert len(shared) == 1 and not shared[0].rstrip().endswith(str(body["id"])), shared
