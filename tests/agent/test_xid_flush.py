"""A task's non-zero exit never reaches the portal ahead of the XID events its GPUs had pending: the loop ships
them first, so the portal can blame the hardware and retry the job. Real processes, the simulated probe (the
hardware boundary) and a real HTTP peer. Ref: #4"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.client import PortalClient
from agent.loop import Agent, Backoff
from agent.runner import Runner
from agent.telemetry_shipper import ProbeGate, TelemetryShipper, gpu_descriptors
from telemetry.probe import SimulatedProbe
from telemetry.probe.simulated import XidFault

HEARTBEAT = "/api/v1/agent/heartbeat/"
SAMPLES = "/api/v1/agent/samples/"


@dataclass
class Node:
    probe: SimulatedProbe
    shipper: TelemetryShipper
    agent: Agent


@pytest.fixture
def node(portal: Any, tmp_path: Path) -> Iterator[Node]:
    """One node wired as ``corral-agent`` wires it: loop and shipper share a probe gate, the loop flushes XIDs."""
    probe = SimulatedProbe(2, seed=3)
    gate = ProbeGate(probe)
    ticks = itertools.count(1_700_000_000, 10)
    shipper_client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
    loop_client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
    shipper = TelemetryShipper(gate, shipper_client, wall_clock=lambda: float(next(ticks)))
    agent = Agent(
        loop_client,
        Runner(tmp_path / "work", on_gpus=gate.mark),
        hostname="node-a",
        address="127.0.0.1",
        gpus=gpu_descriptors(probe),
        grace=0.5,
        backoff=Backoff(0.01, 0.05),
        flush_xids=shipper.flush_xids,
    )
    agent.on_registered.append(shipper.on_registered)
    shipper.sample_once()  # the shipper has sampled once, as it does at start-up
    yield Node(probe, shipper, agent)
    agent.shutdown()
    loop_client.close()
    shipper_client.close()


def _exit_reported(body: dict[str, Any], job: int) -> bool:
    return any(task["job"] == job and task["state"] == "exited" for task in body["tasks"])


def _first(calls: list[tuple[str, dict[str, Any]]], path: str, match: Any) -> int:
    return next(i for i, (p, body) in enumerate(calls) if p == path and match(body))


def _xids(body: dict[str, Any]) -> list[int]:
    return [event["xid"] for event in body["xid_events"]]


def _start_running(portal: Any, node: Node, step_until: Any, command: str) -> None:
    portal.add_task(1, command, gpus=(0,))
    step_until(node.agent, lambda: "running" in portal.states(1))


def test_a_failing_tasks_pending_fatal_xid_is_shipped_before_its_exit(portal, node, step_until) -> None:  # noqa: ANN001
    _start_running(portal, node, step_until, "sleep 0.3; exit 3")
    node.probe.inject(0, XidFault(79))  # the GPU falls off the bus; the job's process dies of it
    step_until(node.agent, lambda: "exited" in portal.states(1))

    xid_post = _first(portal.calls, SAMPLES, lambda body: 79 in _xids(body))
    exit_report = _first(portal.calls, HEARTBEAT, lambda body: _exit_reported(body, 1))
    assert xid_post < exit_report
    # The flush sends XIDs only; the samples wait for the shipper's next period.
    assert portal.calls[xid_post][1]["samples"] == []
    assert portal.last(1)["exit_code"] == 3 and len(node.shipper.xids) == 0


def test_a_clean_exit_sends_nothing_ahead(portal, node, step_until) -> None:  # noqa: ANN001
    _start_running(portal, node, step_until, "sleep 0.2")
    node.probe.inject(1, XidFault(13))  # some other GPU's application XID: the shipper's business, not the exit's
    step_until(node.agent, lambda: "exited" in portal.states(1))
    assert portal.last(1)["exit_code"] == 0
    assert portal.sample_posts == []
    node.shipper.tick()
    assert [xid for post in portal.sample_posts for xid in _xids(post)] == [13]


def test_the_exit_is_reported_even_when_the_xids_cannot_be_shipped(portal, node, step_until) -> None:  # noqa: ANN001
    """The samples endpoint failing must not hide the node's state from the portal: the exit goes, the XID stays
    in the bounded outbox, and the shipper delivers it (the portal then pairs it with the exit after the fact)."""
    _start_running(portal, node, step_until, "sleep 0.2; exit 1")
    node.probe.inject(0, XidFault(48))
    portal.samples_status = 503
    step_until(node.agent, lambda: "exited" in portal.states(1))
    assert portal.sample_posts == [] and len(node.shipper.xids) == 1

    portal.samples_status = None
    node.agent.step()  # the exit has been delivered: the loop does not try again; the shipper's cadence does
    assert portal.sample_posts == []
    assert node.shipper.ship()
    assert [_xids(post) for post in portal.sample_posts] == [[48]]
    assert node.shipper.dropped == 0


def test_after_an_outage_the_xid_still_goes_first(portal, node, step_until) -> None:  # noqa: ANN001
    _start_running(portal, node, step_until, "sleep 0.3; exit 2")
    portal.down()
    node.probe.inject(0, XidFault(95))
    deadline = time.monotonic() + 5
    task = next(iter(node.agent.runner.tasks.values()))
    while task.exit_code is None:
        assert time.monotonic() < deadline, "the task did not exit"
        node.agent.step()  # heartbeats fail; so does each flush before them
        time.sleep(0.05)
    node.agent.step()
    assert len(node.shipper.xids) == 1

    portal.serve()
    step_until(node.agent, lambda: "exited" in portal.states(1))
    xid_post = _first(portal.calls, SAMPLES, lambda body: 95 in _xids(body))
    assert xid_post < _first(portal.calls, HEARTBEAT, lambda body: _exit_reported(body, 1))


def test_a_flush_before_registration_keeps_the_xids(portal) -> None:  # noqa: ANN001
    probe = SimulatedProbe(1, seed=3)
    probe.sample(1_700_000_000.0)
    probe.inject(0, XidFault(79))
    client = PortalClient(portal.url, lambda: portal.token)
    shipper = TelemetryShipper(ProbeGate(probe), client)
    try:
        assert not shipper.flush_xids(client)  # the portal does not know this node's GPUs yet
        assert len(shipper.xids) == 1 and portal.sample_posts == []
        shipper.registered.set()
        assert shipper.flush_xids(client)
    finally:
        client.close()
    assert [_xids(post) for post in portal.sample_posts] == [[79]]


def test_a_busy_probe_never_holds_up_the_exit_report(portal) -> None:  # noqa: ANN001
    """A sample stuck in the driver (a GPU falling off the bus can hang NVML calls) holds the probe: the flush gives
    up after its bound and still ships what the outbox holds, so the heartbeat is late by that bound at most."""
    probe = SimulatedProbe(1, seed=3)
    probe.sample(1_700_000_000.0)
    gate = ProbeGate(probe)
    client = PortalClient(portal.url, lambda: portal.token)
    shipper = TelemetryShipper(gate, client)
    shipper.registered.set()
    probe.inject(0, XidFault(79))  # queued in the probe, behind the stuck sample
    try:
        with gate._lock:  # the shipper thread's sample, hung in the driver
            started = time.monotonic()
            assert not shipper.flush_xids(client, lock_timeout=0.2)
            assert time.monotonic() - started < 1.0
        assert shipper.flush_xids(client, lock_timeout=0.2)  # the probe answers again: the XID goes now
    finally:
        client.close()
    assert [xid for post in portal.sample_posts for xid in _xids(post)] == [79]
