"""Telemetry shipping with the real simulated probe and a real HTTP peer: batches, outage buffering, drops."""

from __future__ import annotations

import itertools

import pytest

from agent.client import PortalClient, Registration
from agent.telemetry_shipper import ProbeGate, TelemetryShipper
from telemetry.probe import SimulatedProbe
from telemetry.probe.simulated import XidFault
from telemetry.sample import GpuSample, XidEvent


@pytest.fixture
def shipper_for(portal):
    clients: list[PortalClient] = []

    def make(probe: SimulatedProbe, *, registered: bool = True, **kwargs) -> TelemetryShipper:
        client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
        clients.append(client)
        ticks = itertools.count(1_700_000_000, 10)
        shipper = TelemetryShipper(ProbeGate(probe), client, wall_clock=lambda: float(next(ticks)), **kwargs)
        if registered:  # as after the agent's first successful registration
            shipper.registered.set()
        return shipper

    yield make
    for client in clients:
        client.close()


def test_each_tick_ships_one_sample_per_gpu(portal, shipper_for) -> None:
    shipper = shipper_for(SimulatedProbe(3, seed=1))
    shipper.tick()
    (post,) = portal.sample_posts
    assert post["dropped"] == 0 and post["xid_events"] == []
    samples = [GpuSample.from_dict(item) for item in post["samples"]]
    assert [sample.index for sample in samples] == [0, 1, 2]
    assert {sample.timestamp for sample in samples} == {1_700_000_000.0}


def test_xid_events_are_shipped_with_the_samples(portal, shipper_for) -> None:
    probe = SimulatedProbe(2, seed=1)
    shipper = shipper_for(probe)
    shipper.tick()
    probe.inject(1, XidFault(13))
    shipper.tick()
    events = [XidEvent.from_dict(item) for post in portal.sample_posts for item in post["xid_events"]]
    assert [event.xid for event in events] == [13]
    assert events[0].gpu_uuid == probe.inventory()[1].uuid


def test_outage_is_buffered_then_shipped_with_the_drop_count(portal, shipper_for) -> None:
    shipper = shipper_for(SimulatedProbe(2, seed=1), sample_capacity=5, samples_per_post=4)
    portal.down()
    for _ in range(4):
        shipper.tick()  # 8 samples into a buffer of 5: the 3 oldest are dropped, nothing raises
    assert len(shipper.samples) == 5 and shipper.dropped == 3
    portal.serve()
    assert shipper.ship()
    assert [len(post["samples"]) for post in portal.sample_posts] == [4, 1]
    assert {post["dropped"] for post in portal.sample_posts} == {3}
    shipped = [item["timestamp"] for post in portal.sample_posts for item in post["samples"]]
    assert shipped == sorted(shipped) and len(shipper.samples) == 0


def test_busy_gpus_show_the_task_processes(portal, shipper_for) -> None:
    probe = SimulatedProbe(2, seed=1)
    shipper = shipper_for(probe)
    shipper.gate.mark((1,), True, 4242)
    shipper.gate.mark((1,), True, 4343)  # two tasks sharing a GPU
    shipper.gate.mark((1,), False, 4242)
    shipper.tick()
    idle, busy = (GpuSample.from_dict(item) for item in portal.sample_posts[-1]["samples"])
    assert idle.processes == () and [pid for pid, _ in busy.processes] == [4343]
    shipper.gate.mark((1,), False, 4343)
    shipper.tick()
    assert GpuSample.from_dict(portal.sample_posts[-1]["samples"][1]).processes == ()


def test_sampling_period_follows_the_portal_unless_fixed(shipper_for) -> None:
    registration = Registration(node="n", heartbeat_interval=2.0, sample_interval=30.0)
    following = shipper_for(SimulatedProbe(1))
    following.on_registered(registration)
    fixed = shipper_for(SimulatedProbe(1), interval=1.5)
    fixed.on_registered(registration)
    assert (following.interval, fixed.interval) == (30.0, 1.5)


def test_nothing_is_shipped_before_the_node_has_registered(portal, shipper_for) -> None:  # noqa: ANN001
    """The portal rejects samples of GPUs it has not been told about, so they wait in the outbox. Ref: #4"""
    shipper = shipper_for(SimulatedProbe(2, seed=1), registered=False)
    shipper.tick()
    assert portal.sample_posts == [] and len(shipper.samples) == 2
    shipper.registered.set()
    shipper.tick()
    assert sum(len(post["samples"]) for post in portal.sample_posts) == 4 and len(shipper.samples) == 0
