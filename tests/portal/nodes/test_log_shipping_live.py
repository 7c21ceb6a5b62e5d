"""A job's output from a real agent to the real portal over HTTP (pytest-django's live server): 20 MiB with
multi-byte characters across chunk boundaries and bytes that are not UTF-8 arrive whole, stored exactly as the
agent's own rule turns bytes into text, and the job says "output still arriving" until they have. Ref: #15

The agent's heartbeat loop and its log shipper are driven by hand from the test (``step``, ``tick``), so the
in-memory SQLite database is never used by two threads at once; ``make test`` runs the same on PostgreSQL.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agent.client import GpuDescriptor, PortalClient
from agent.log_shipper import LogShipper
from agent.loop import Agent, Backoff
from agent.runner import Runner
from agent.task_log import read_chunk
from portal.jobs.logs import OutputState, job_output_progress
from portal.jobs.models import Job, JobTask
from portal.jobs.selectors import job_log_read
from portal.jobs.services import job_submit
from portal.nodes.services import node_token_issue
from portal.scheduler.services import scheduling_round
from tests.factories import MembershipFactory, TenantFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_large_log_reaches_the_portal_whole(live_server: Any, settings: Any, tmp_path: Path) -> None:
    settings.CORRAL_JOB_LOG_MAX_CHARS = 0  # keep all of it, to compare
    settings.CORRAL_HEARTBEAT_INTERVAL = 0.05
    user = UserFactory(username="alice")
    MembershipFactory(user=user, tenant=TenantFactory(slug="lab"))
    _, token = node_token_issue(name="live-1")
    agent = Agent(
        PortalClient(live_server.url, lambda: token, timeout=30.0),
        Runner(tmp_path / "agent"),
        hostname="live-1",
        address="127.0.0.1",
        gpus=[GpuDescriptor(0, "GPU-live-1-0", "Test GPU", 1024)],
        backoff=Backoff(0.01, 0.05),
    )
    shipper = agent.log_shipper = LogShipper(PortalClient(live_server.url, lambda: token, timeout=30.0))

    line = "épοch ✓ 𝛼 loss 0.25\n".encode()  # characters of 1, 2, 3 and 4 bytes
    data = bytearray(line * (20 * 2**20 // len(line)))
    for k in range(1, 5):
        data[k * shipper.post_bytes - 1] = 0xFF  # not UTF-8, where a chunk would end
    data += b"tail \xfe\x00 " + "𝛼".encode()[:2]  # and a character cut off at the very end
    source = tmp_path / "big.log"
    source.write_bytes(data)
    try:
        agent.step()  # registers
        job = job_submit(user=user, command=f"cat {source}", gpus=1)
        scheduling_round()
        task = JobTask.objects.get(job=job)
        seen_arriving = False
        for _ in range(500):
            agent.step()
            task.refresh_from_db()
            job.refresh_from_db()
            if job.is_terminal:
                seen_arriving |= job_output_progress(job=job).state is OutputState.ARRIVING
            if task.forgotten:
                break
            shipper.tick()
        else:
            pytest.fail(f"{task.log_received} of {len(data)} bytes arrived")
    finally:
        agent.shutdown()
        shipper.close()
        agent.client.close()
        shipper.client.close()

    assert (job.state, task.log_received, task.log_final_size) == ("succeeded", len(data), len(data))
    assert job_output_progress(job=job).complete and seen_arriving
    fd = os.open(source, os.O_RDONLY)
    try:
        as_the_agent_reads_it = read_chunk(fd, 0, len(data) + 1, error=None, growing=False).text
    finally:
        os.close(fd)
    stored, _ = job_log_read(job=Job.objects.get(pk=job.pk), offset=0, limit=10**9)
    assert stored == as_the_agent_reads_it  # the heartbeat's text rule and the endpoint's bytes rule agree
    assert len(stored.encode()) == len(data) and stored.endswith("tail ?? ??")
