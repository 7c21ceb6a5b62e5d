"""Agent registration, heartbeats and liveness: the reconciliation rules of docs/agent-protocol.md. Ref: #2"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.models import Node
from portal.nodes.services import (
    GpuReport,
    NodeFenced,
    TaskReport,
    node_heartbeat,
    node_register,
    node_release_fenced,
    nodes_mark_stale_down,
)
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client


def _placed(world: World, gpus: int = 1, command: str = "train") -> Job:
    job = job_submit(user=world.alice, command=command, gpus=gpus)
    scheduling_round()
    return Job.objects.get(pk=job.pk)


def _node_of(job: Job) -> Node:
    return JobTask.objects.get(job=job, attempt=job.attempt, rank=0).node


def test_start_order_carries_the_full_environment(world: World) -> None:
    job = _placed(world, gpus=2)
    reply = node_heartbeat(node=_node_of(job), reports=[])
    (order,) = reply.start
    assert order["job"] == job.pk and order["attempt"] == 1 and order["rank"] == 0
    assert order["env"]["CUDA_VISIBLE_DEVICES"] == "0,1" and order["env"]["CORRAL_JOB_ID"] == str(job.pk)
    assert order["env"]["WORLD_SIZE"] == "1" and order["env"]["MASTER_ADDR"] == "127.0.0.1"


def test_multi_node_gang_gets_ranks_and_one_master(world: World) -> None:
    job = job_submit(user=world.eve, command="torchrun train.py", gpus=8)  # eve's tenant has no cap
    scheduling_round()
    tasks = list(JobTask.objects.filter(job=job).order_by("rank"))
    assert [t.rank for t in tasks] == [0, 1] and {t.node.name for t in tasks} == {"n1", "n2"}
    envs = [node_heartbeat(node=t.node, reports=[]).start[0]["env"] for t in tasks]
    assert [e["RANK"] for e in envs] == ["0", "1"] and {e["WORLD_SIZE"] for e in envs} == {"2"}
    assert len({e["MASTER_ADDR"] + e["MASTER_PORT"] for e in envs}) == 1


def test_run_log_and_exit_reach_the_job(world: World) -> None:
    job = _placed(world)
    node = _node_of(job)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=42, log="hel", log_size=3)])
    reply = node_heartbeat(
        node=node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=0, log_offset=3, log="lo\n", log_size=6)]
    )
    job.refresh_from_db()
    assert (job.state, job.exit_code, job.log_size) == ("succeeded", 0, 6)
    assert reply.forget == [{"job": job.pk, "attempt": 1}] and reply.log_offsets == {f"{job.pk}:1:0": 6}
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_the_log_cap_changes_nothing_the_agent_sees(world: World, settings) -> None:  # noqa: ANN001
    """Dropping stored output (CORRAL_JOB_LOG_MAX_CHARS) keeps the agent's byte offsets: every piece is acknowledged
    where it ended, never asked for again, and the task is forgotten once its whole log has arrived."""
    settings.CORRAL_JOB_LOG_MAX_CHARS = 30
    job = _placed(world)
    agent = agent_client(world.tokens[_node_of(job).name])
    key, sent = f"{job.pk}:1:0", 0
    for i in range(8):
        piece = f"étape {i}\n"  # 8 characters, 9 bytes: the agent counts bytes, the portal characters
        task = {"job": job.pk, "attempt": 1, "state": "running", "pid": 7, "log_offset": sent, "log": piece}
        sent += len(piece.encode())
        reply = agent.post("/api/v1/agent/heartbeat/", {"tasks": [{**task, "log_size": sent}]}, format="json")
        assert reply.status_code == 200 and reply.json() == {
            "start": [],
            "kill": [],
            "forget": [],
            "signal": [],
            "log_offsets": {key: sent},
            "heartbeat_interval": 2.0,
        }
    last = {"job": job.pk, "attempt": 1, "state": "exited", "exit_code": 1, "log_offset": sent, "log": "boom\n"}
    reply = agent.post("/api/v1/agent/heartbeat/", {"tasks": [{**last, "log_size": sent + 5}]}, format="json")
    assert reply.json()["log_offsets"] == {key: sent + 5} and reply.json()["forget"] == [{"job": job.pk, "attempt": 1}]
    job.refresh_from_db()
    assert (job.state, job.log_size, job.log_dropped) == ("failed", 8 * 8 + 5, 41)  # kept: 15 of head, 13 of tail
    assert JobTask.objects.get(job=job).log_received == sent + 5


def test_a_repeated_log_chunk_is_not_stored_twice(world: World) -> None:
    job = _placed(world)
    node = _node_of(job)
    report = TaskReport(job.pk, 1, 0, "running", pid=1, log="once\n", log_size=5)
    node_heartbeat(node=node, reports=[report])
    reply = node_heartbeat(node=node, reports=[report])  # the first response was lost; the agent resends
    job.refresh_from_db()
    assert job.log_size == 5 and reply.log_offsets[f"{job.pk}:1:0"] == 5


def test_nonzero_exit_fails_the_job(world: World) -> None:
    job = _placed(world)
    node_heartbeat(node=_node_of(job), reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=3)])
    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("failed", 3)
    assert "exit code 3" in job.events.get(kind="failed").reason


def test_cancel_kills_then_settles_as_cancelled(world: World) -> None:
    job = _placed(world)
    node = _node_of(job)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7)])
    job_cancel(job=job, by=world.alice)
    reply = node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7)])
    assert reply.kill == [{"job": job.pk, "attempt": 1, "grace_seconds": 10.0}]
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=-15)])
    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("cancelled", -15)


def test_cancel_before_the_agent_started_it(world: World) -> None:
    job = _placed(world)
    job_cancel(job=job, by=world.alice)
    reply = node_heartbeat(node=_node_of(job), reports=[])  # the agent never had it
    job.refresh_from_db()
    assert reply.start == [] and job.state == "cancelled"


def test_unknown_running_task_is_killed(world: World) -> None:
    reply = node_heartbeat(node=world.nodes[0], reports=[TaskReport(999, 1, 0, "running", pid=5)])
    assert reply.kill == [{"job": 999, "attempt": 1, "grace_seconds": 0}]


def test_agent_restart_requeues_its_jobs(world: World) -> None:
    job = _placed(world, gpus=2)
    node = _node_of(job)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7)])
    node_register(
        node=node,
        hostname="x",
        address="127.0.0.1",
        agent_version="t",
        gpus=[GpuReport(i, f"GPU-{node.name}-{i}") for i in range(4)],
        clean=True,
    )
    job.refresh_from_db()
    assert job.state == "pending" and job.hardware_retries == 1
    assert list(job.events.values_list("kind", flat=True)) == ["submitted", "started", "requeued"]
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2


def test_a_restarted_agent_that_could_not_kill_everything_leaves_the_gpus_fenced(world: World) -> None:
    """Without the agent's word that its old processes are gone, their GPUs stay held and the job does not start
    again beside a copy that may still run, until an admin releases them. Ref: #15"""
    job = _placed(world, gpus=2)
    node = _node_of(job)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7)])
    gpus = [GpuReport(i, f"GPU-{node.name}-{i}") for i in range(4)]
    node_register(node=node, hostname="x", address="a", agent_version="t", gpus=gpus, clean=False)
    assert Allocation.objects.filter(job=job, attempt=1, released_at__isnull=True).count() == 2
    scheduling_round()
    job.refresh_from_db()
    assert (job.state, job.reason_code) == ("pending", "previous_attempt_stopping")
    assert node_release_fenced(node=node, by="admin") == 2
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2


def test_silent_node_goes_down_and_its_gang_restarts_whole(world: World) -> None:
    job = job_submit(user=world.eve, command="x", gpus=8)  # spans both nodes
    scheduling_round()
    n1, n2 = world.nodes
    for node in (n1, n2):
        rank = JobTask.objects.get(job=job, node=node).rank
        node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, rank, "running", pid=9)])
    Node.objects.filter(pk=n1.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    assert nodes_mark_stale_down() == ["n1"]
    job.refresh_from_db()
    assert job.state == "pending" and Node.objects.get(pk=n1.pk).state == "down"
    # The surviving rank on n2 is told to stop and keeps its GPUs until it has.
    rank_n2 = JobTask.objects.get(job=job, node=n2).rank
    reply = node_heartbeat(node=n2, reports=[TaskReport(job.pk, 1, rank_n2, "running", pid=9)])
    assert reply.kill and Allocation.objects.filter(job=job, node=n2, released_at__isnull=True).count() == 4
    node_heartbeat(node=n2, reports=[TaskReport(job.pk, 1, rank_n2, "exited", exit_code=-15)])
    # n1's GPUs stay fenced: its processes may still run until its agent registers again having killed them.
    assert set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("node", flat=True)) == {n1.pk}
    node_register(
        node=n1,
        hostname="x",
        address="a",
        agent_version="t",
        gpus=[GpuReport(i, f"GPU-n1-{i}") for i in range(4)],
        clean=True,
    )
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()


def test_hardware_retries_are_bounded(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_MAX_HARDWARE_RETRIES = 1
    job = _placed(world)
    node = _node_of(job)
    gpus = [GpuReport(i, f"GPU-{node.name}-{i}") for i in range(4)]
    node_register(node=node, hostname="x", address="a", agent_version="t", gpus=gpus, clean=True)  # retry 1
    scheduling_round()
    job.refresh_from_db()
    node_register(
        node=_node_of(job),
        hostname="x",
        address="a",
        agent_version="t",
        gpus=[GpuReport(i, f"GPU-{_node_of(job).name}-{i}") for i in range(4)],
        clean=True,
    )
    job.refresh_from_db()
    assert job.state == "failed" and "gave up after 1 hardware retries" in job.events.last().reason


def test_drained_node_gets_no_new_work(world: World) -> None:
    from portal.nodes.services import node_set_draining

    node_set_draining(node=world.nodes[0], draining=True)
    job = _placed(world, gpus=4)
    assert _node_of(job).name == "n2"


# --- over HTTP ---------------------------------------------------------------------------------------------------
def test_agent_endpoints_need_a_node_token(world: World, api) -> None:  # noqa: ANN001
    assert agent_client("wrong").post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 401
    # A user's token is not a node token.
    assert api.post("/api/v1/agent/heartbeat/", {}, format="json").status_code == 401


def test_agent_http_round_trip(world: World) -> None:
    client = agent_client(world.tokens["n1"])
    body = {"hostname": "n1", "address": "10.0.0.1", "gpus": [{"index": i, "uuid": f"GPU-n1-{i}"} for i in range(4)]}
    registered = client.post("/api/v1/agent/register/", body, format="json")
    assert registered.status_code == 200 and registered.json()["node"] == "n1"
    beat = client.post("/api/v1/agent/heartbeat/", {"tasks": []}, format="json")
    assert beat.status_code == 200 and set(beat.json()) >= {"start", "kill", "forget", "log_offsets"}


@pytest.mark.parametrize(
    "body",
    [
        {"tasks": [{"job": "x", "attempt": 1, "state": "running"}]},
        {"tasks": [{"job": 1, "attempt": 1, "state": "dancing"}]},
        {"tasks": "nope"},
    ],
)
def test_bad_heartbeat_is_a_400(world: World, body: dict) -> None:
    assert agent_client(world.tokens["n1"]).post("/api/v1/agent/heartbeat/", body, format="json").status_code == 400


def test_duplicate_gpu_uuids_are_a_400(world: World) -> None:
    body = {"gpus": [{"index": 0, "uuid": "GPU-x"}, {"index": 1, "uuid": "GPU-x"}]}
    response = agent_client(world.tokens["n1"]).post("/api/v1/agent/register/", body, format="json")
    assert response.status_code == 400 and "gpus" in response.json()


def test_a_down_node_must_register_again_before_it_is_up(world: World) -> None:
    """A heartbeat does not bring a node marked down back: its agent must kill what it ran and register. Ref: #15"""
    n1 = world.nodes[0]
    Node.objects.filter(pk=n1.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    assert nodes_mark_stale_down() == ["n1"]
    with pytest.raises(NodeFenced):
        node_heartbeat(node=Node.objects.get(pk=n1.pk), reports=[])
    assert Node.objects.get(pk=n1.pk).state == "down"
    gpus = [GpuReport(i, f"GPU-n1-{i}") for i in range(4)]
    node_register(node=n1, hostname="x", address="a", agent_version="t", gpus=gpus, clean=True)
    n1.refresh_from_db()
    assert (n1.state, n1.state_reason) == ("up", "")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("heartbeat", {"tasks": [{"job": 2**70, "attempt": 1, "state": "running"}]}, "job"),
        ("heartbeat", {"tasks": [{"job": 1, "attempt": 2**31, "state": "running"}]}, "attempt"),
        ("heartbeat", {"tasks": [{"job": 1, "attempt": 1, "state": "exited", "exit_code": 2**40}]}, "exit_code"),
        ("heartbeat", {"tasks": [{"job": 1, "attempt": 1, "state": "running", "log_end": 2**63}]}, "log_end"),
        ("register", {"gpus": [{"index": 0, "uuid": "GPU-n1-0", "memory_mb": 2**63}]}, "memory_mb"),
    ],
)
def test_a_number_its_column_cannot_hold_is_a_400(world: World, path: str, body: dict, field: str) -> None:
    """It was a 500 (an overflow in the database driver). Ref: schema fuzzing"""
    response = agent_client(world.tokens["n1"]).post(f"/api/v1/agent/{path}/", body, format="json")
    assert response.status_code == 400, response.content
    assert field in str(response.json())


def test_a_heartbeat_that_is_not_json_is_a_415_and_changes_nothing(world: World) -> None:
    """A form body cannot carry the task list: it was read as "no tasks" and the node's jobs were requeued."""
    job = _placed(world)
    node = _node_of(job)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=42)])
    client = agent_client(world.tokens[node.name])
    response = client.post("/api/v1/agent/heartbeat/", {"tasks": "[]"})  # multipart, as a form would send it
    assert response.status_code == 415
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 1


def test_a_gpu_live_on_another_node_is_refused_and_one_from_a_down_node_moves(world: World) -> None:
    n1, n2 = world.nodes
    stolen = {"gpus": [{"index": 0, "uuid": "GPU-n1-2", "model": "Fake", "memory_mb": 1000}]}
    response = agent_client(world.tokens["n2"]).post("/api/v1/agent/register/", stolen, format="json")
    assert response.status_code == 409
    (message,) = response.json()["gpus"]
    assert message == "GPU GPU-n1-2 is registered on node n1, which is up; one GPU cannot be on two nodes"
    assert n1.gpus.filter(uuid="GPU-n1-2", present=True).exists()  # nothing changed
    assert n2.gpus.filter(present=True).count() == 4

    Node.objects.filter(pk=n1.pk).update(state="down")  # the card was moved out of a dead machine
    response = agent_client(world.tokens["n2"]).post("/api/v1/agent/register/", stolen, format="json")
    assert response.status_code == 200, response.content
    assert n2.gpus.get(uuid="GPU-n1-2").present
