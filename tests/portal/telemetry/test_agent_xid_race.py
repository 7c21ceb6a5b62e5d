"""The race of issue #4 with the real agent and the real portal: a job whose GPU falls off the bus dies of it, and is
retried elsewhere instead of ending ``failed``.

The agent runs in this process (its loop, runner, telemetry shipper and a simulated probe, the hardware boundary)
and talks HTTP to pytest-django's live server; the job is a real shell process. Celery runs eagerly, so the
scheduling rounds the services queue run for real inside the portal. Ref: #4
"""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from agent.client import PortalClient
from agent.loop import Agent, Backoff
from agent.runner import Runner
from agent.telemetry_shipper import ProbeGate, TelemetryShipper, gpu_descriptors
from portal import celery_app
from portal.jobs.models import Job, JobEvent, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Node
from portal.nodes.services import node_set_draining
from telemetry.probe import SimulatedProbe
from telemetry.probe.simulated import XidFault
from tests.fixtures import World

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the live server shares the test database"),
]

#: The job dies a moment after its GPU does, as a CUDA program does when the GPU stops answering.
DIES_WITH_ITS_GPU = "echo training; sleep 0.4; echo 'CUDA error: unspecified launch failure' >&2; exit 1"


class InProcessAgent:
    """``corral-agent``'s wiring (agent/main.py) for node ``n1``, driven one heartbeat at a time."""

    def __init__(self, url: str, token: str, workdir: Path, *, flush: bool) -> None:
        self.probe = SimulatedProbe(4, seed=zlib.crc32(b"n1"), node="n1")
        gate = ProbeGate(self.probe)
        ticks = itertools.count(int(time.time()))
        self.clients = [PortalClient(url, lambda: token, timeout=5.0) for _ in range(2)]
        self.shipper = TelemetryShipper(gate, self.clients[1], wall_clock=lambda: float(next(ticks)))
        self.agent = Agent(
            self.clients[0],
            Runner(workdir, on_gpus=gate.mark),
            hostname="n1",
            address="127.0.0.1",
            gpus=gpu_descriptors(self.probe),
            grace=0.5,
            backoff=Backoff(0.01, 0.05),
            flush_xids=self.shipper.flush_xids if flush else None,
        )
        self.agent.on_registered.append(self.shipper.on_registered)

    def beat_until(self, done: Callable[[], object], *, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, "condition not reached in time"
            self.agent.step()
            time.sleep(0.05)

    def close(self) -> None:
        self.agent.shutdown()
        for client in self.clients:
            client.close()


@pytest.fixture
def agent_for(
    world: World, live_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., InProcessAgent]]:
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    node_set_draining(node=Node.objects.get(name="n2"), draining=True)  # so the job can only run on n1
    made: list[InProcessAgent] = []

    def make(*, flush: bool) -> InProcessAgent:
        made.append(InProcessAgent(live_server.url, world.tokens["n1"], tmp_path / "agent", flush=flush))
        return made[-1]

    yield make
    for agent in made:
        agent.close()


def _start(world: World, node: InProcessAgent) -> tuple[Job, JobTask]:
    node.beat_until(lambda: node.agent.registration is not None)
    node.shipper.sample_once()  # the shipper's first period (the simulated probe then knows the time)
    job = job_submit(user=world.alice, command=DIES_WITH_ITS_GPU, gpus=1)  # queues an eager round: placed on n1
    task = JobTask.objects.get(job=job, attempt=1)
    node.beat_until(lambda: JobTask.objects.get(pk=task.pk).state == "running")
    return job, task


def _history(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))


def test_the_agent_ships_the_xid_first_and_the_job_is_retried(world: World, agent_for) -> None:  # noqa: ANN001
    node = agent_for(flush=True)
    job, task = _start(world, node)
    node.probe.inject(task.gpu_indices[0], XidFault(79))  # the GPU falls off the bus under the job
    node.beat_until(lambda: JobTask.objects.get(pk=task.pk).state == "exited")

    job.refresh_from_db()
    assert job.hardware_retries == 1 and "failed" not in _history(job), _history(job)
    assert JobTask.objects.get(pk=task.pk).exit_code == 1
    # Requeued whole and, the round being eager here, already placed again on one of n1's healthy GPUs.
    assert (job.state, job.attempt) == ("running", 2)
    assert JobTask.objects.get(job=job, attempt=2).gpu_indices != task.gpu_indices


def test_without_the_flush_the_late_xid_reopens_the_failed_job(world: World, agent_for) -> None:  # noqa: ANN001
    """An agent that reports the exit first (an older agent, or its XID POST failed): the job fails, and the XID
    shipped a period later puts it back in the queue."""
    node = agent_for(flush=False)
    job, task = _start(world, node)
    node.probe.inject(task.gpu_indices[0], XidFault(79))
    node.beat_until(lambda: Job.objects.get(pk=job.pk).state == "failed")

    node.shipper.tick()  # the shipper's next period carries the XID
    job.refresh_from_db()
    assert job.hardware_retries == 1 and _history(job)[-3:] == ["failed", "requeued", "started"], _history(job)
    assert (job.state, job.attempt) == ("running", 2)
    assert JobTask.objects.get(job=job, attempt=2).gpu_indices != task.gpu_indices
