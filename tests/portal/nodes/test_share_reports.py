"""What an agent reports about shares (issue #17): an eviction requeues the job (never fails it) with the reason as
a recorded event; an MPS fault restarts online work and requeues offline work; a job the MPS logs name repeatedly
becomes the culprit and is kept off shared GPUs, with a wait reason that says so. Ref: #17"""

from __future__ import annotations

from portal.jobs.models import Allocation, Job, JobTask
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client
from tests.portal.scheduler.test_share_round import share_gpus, submit_share


def _running_share(world: World, cls: str = "offline") -> Job:
    share_gpus(world.nodes[0], [1])
    job = submit_share(world, 0.25, cls=cls)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running"
    return job


def test_an_eviction_requeues_the_job_with_the_reason_as_an_event(world: World) -> None:
    job = _running_share(world)
    agent = agent_client(world.tokens["n1"])
    eviction = {"gpu": 1, "reason": "evicted to protect online work on GPU 1", "cause": "p99 80 ms over 50 ms"}
    task = {"job": job.pk, "attempt": 1, "state": "running", "pid": 9, "eviction": eviction}
    reply = agent.post("/api/v1/agent/heartbeat/", {"tasks": [task]}, format="json")
    assert reply.status_code == 200
    assert {"job": job.pk, "attempt": 1} == {k: reply.json()["kill"][0][k] for k in ("job", "attempt")}
    job.refresh_from_db()
    assert job.state == "pending" and job.evictions == 1 and job.exit_code is None
    event = job.events.get(kind="requeued")
    assert event.reason.startswith("evicted to protect online work on GPU 1") and event.actor == "agent:n1"
    # Its exit, reported with the eviction, only frees the GPU: no second requeue, never a failure.
    exited = {**task, "state": "exited", "exit_code": -15}
    agent.post("/api/v1/agent/heartbeat/", {"tasks": [exited]}, format="json")
    job.refresh_from_db()
    assert job.state == "pending" and job.events.filter(kind="requeued").count() == 1
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_an_mps_fault_restarts_online_work_and_requeues_offline_work(world: World) -> None:
    online = _running_share(world, cls="online")
    offline = submit_share(world, 0.25)
    scheduling_round()
    offline.refresh_from_db()
    assert offline.state == "running"
    node = world.nodes[0]
    fault = {"gpu": 1, "detail": "fatal GPU exception", "faults": 1, "suspect": False, "suspect_faults": 0}
    node_heartbeat(
        node=node,
        reports=[
            TaskReport(online.pk, 1, 0, "exited", exit_code=1, mps_fault={**fault, "action": "restart"}),
            TaskReport(offline.pk, 1, 0, "exited", exit_code=1, mps_fault={**fault, "action": "requeue"}),
        ],
    )
    online.refresh_from_db()
    offline.refresh_from_db()
    assert online.state == offline.state == "pending"
    assert "restarting it (online work first)" in online.events.get(kind="requeued").reason
    assert "MPS server fault on GPU 1: requeued" in offline.events.get(kind="requeued").reason
    scheduling_round()  # both start again: neither is a culprit
    assert set(Job.objects.filter(pk__in=[online.pk, offline.pk]).values_list("state", flat=True)) == {"running"}


def test_a_job_named_by_two_faults_is_the_culprit_and_kept_off_shared_gpus(world: World) -> None:
    job = _running_share(world)
    for attempt in (1, 2):
        fault = {"gpu": 1, "action": "requeue", "suspect": True, "suspect_faults": attempt}
        task = JobTask.objects.get(job=job, attempt=attempt)
        node_heartbeat(node=task.node, reports=[TaskReport(job.pk, attempt, 0, "exited", exit_code=1, mps_fault=fault)])
        scheduling_round()
        job.refresh_from_db()
    assert job.state == "pending" and job.mps_culprit and job.mps_suspect_faults == 2
    assert job.reason_code == "share_mps_culprit" and "Kept off shared GPUs" in job.reason
    assert "kept off shared GPUs" in job.events.filter(kind="requeued").last().reason
