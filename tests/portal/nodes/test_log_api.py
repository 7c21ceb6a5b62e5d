"""``POST /api/v1/agent/logs/``: a task's output as raw bytes, under the heartbeat's offset rule. Ref: #15"""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.jobs.logs import LOG_PIECE_CHARS, decode_log_bytes
from portal.jobs.models import Job, JobLogChunk, JobTask
from portal.jobs.selectors import job_log_read
from portal.jobs.services import job_submit
from portal.nodes.log_api import LogChunkView
from portal.nodes.models import Node
from portal.nodes.services import TaskReport, node_heartbeat, node_token_issue
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client

LOGS = "/api/v1/agent/logs/"


def _running(world: World) -> tuple[Job, JobTask]:
    job = job_submit(user=world.alice, command="python train.py", gpus=1)
    scheduling_round()
    task = JobTask.objects.select_related("node").get(job=job)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7)])
    return Job.objects.get(pk=job.pk), task


def _post(client: APIClient, task: JobTask, offset: int, data: bytes, **params: int) -> tuple[int, dict[str, object]]:
    where = {"job": task.job_id, "attempt": task.attempt, "rank": task.rank, "offset": offset, **params}
    query = "&".join(f"{name}={value}" for name, value in where.items())
    response = client.post(f"{LOGS}?{query}", data=data, content_type="application/octet-stream")
    return response.status_code, response.json()


def _stored(job: Job) -> str:
    job.refresh_from_db()
    return job_log_read(job=job, offset=0, limit=10**9)[0]


@pytest.fixture
def running(world: World) -> tuple[Job, JobTask, APIClient]:
    job, task = _running(world)
    return job, task, agent_client(world.tokens[task.node.name])


def test_bytes_are_stored_at_the_offset_held_and_the_answer_is_the_new_offset(running) -> None:  # noqa: ANN001
    job, task, agent = running
    assert _post(agent, task, 0, b"epoch 1\n") == (200, {"log_offset": 8})
    assert _post(agent, task, 8, "épοch 2 ✓\n".encode()) == (200, {"log_offset": 8 + 14})
    assert _stored(job) == "epoch 1\népοch 2 ✓\n"
    task.refresh_from_db()
    assert task.log_received == 22 and job.log_size == len("epoch 1\népοch 2 ✓\n")  # bytes there, characters here


def test_a_retried_chunk_is_stored_once(running) -> None:  # noqa: ANN001
    """The answer was lost and the agent sends the same bytes again: nothing changes, the same answer comes back."""
    job, task, agent = running
    assert _post(agent, task, 0, b"once\n") == (200, {"log_offset": 5})
    assert _post(agent, task, 0, b"once\n") == (200, {"log_offset": 5})
    assert _stored(job) == "once\n" and JobLogChunk.objects.filter(job=job).count() == 1


@pytest.mark.parametrize("offset", [3, 9, 10**12])
def test_bytes_at_another_offset_are_not_stored_and_the_answer_says_where_to_send_from(running, offset: int) -> None:  # noqa: ANN001
    job, task, agent = running
    _post(agent, task, 0, b"hello\n")
    assert _post(agent, task, offset, b"later\n") == (200, {"log_offset": 6})
    assert _stored(job) == "hello\n"


def test_the_heartbeat_and_the_endpoint_share_one_offset(running) -> None:  # noqa: ANN001
    """An older agent's heartbeat text and the endpoint's bytes append to the same log under the same rule."""
    job, task, agent = running
    node = task.node
    reply = node_heartbeat(node=node, reports=[TaskReport(job.pk, 1, 0, "running", pid=7, log="from a beat\n")])
    assert reply.log_offsets == {f"{job.pk}:1:0": 12}
    assert _post(agent, task, 0, b"from a beat\n") == (200, {"log_offset": 12})  # already there: not stored again
    assert _post(agent, task, 12, b"from a post\n") == (200, {"log_offset": 24})
    stale = TaskReport(job.pk, 1, 0, "running", pid=7, log_offset=12, log="from a post\n")
    assert node_heartbeat(node=node, reports=[stale]).log_offsets == {f"{job.pk}:1:0": 24}
    assert _stored(job) == "from a beat\nfrom a post\n"


def test_bytes_that_are_not_utf8_keep_their_count(running) -> None:  # noqa: ANN001
    """Each byte that is not UTF-8, and each NUL, is one "?": the offsets stay the agent's bytes, and a character
    an agent cut in two (it does not: ``agent.task_log.read_bytes``) costs two "?" but no offset."""
    job, task, agent = running
    raw = b"ok \xff\xfe nul:\x00 " + "é".encode()[:1]
    assert _post(agent, task, 0, raw) == (200, {"log_offset": len(raw)})
    rest = "é".encode()[1:] + b" end\n"
    assert _post(agent, task, len(raw), rest) == (200, {"log_offset": len(raw) + len(rest)})
    assert _stored(job) == "ok ?? nul:? ?? end\n"
    assert len(_stored(job).encode()) == len(raw + rest)
    assert decode_log_bytes(raw + rest) == "ok ?? nul:? é end\n"  # whole, the character survives


def test_a_body_larger_than_djangos_limit_is_taken_and_stored_in_pieces(running, settings) -> None:  # noqa: ANN001
    """Django refuses request.body over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB); this view reads the stream."""
    job, task, agent = running
    line = "épοch ✓ loss 0.25\n".encode()
    data = line * (3 * 2**20 // len(line))
    assert len(data) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert _post(agent, task, 0, data) == (200, {"log_offset": len(data)})
    assert _stored(job) == data.decode()
    sizes = [len(d) for d in JobLogChunk.objects.filter(job=job).values_list("data", flat=True)]
    assert max(sizes) == LOG_PIECE_CHARS and sum(sizes) == len(data.decode())


def test_a_body_over_the_views_limit_is_refused(running, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    job, task, agent = running
    monkeypatch.setattr(LogChunkView, "max_body_bytes", 16)
    status, body = _post(agent, task, 0, b"x" * 17)
    assert status == 413 and body["code"] == "too_large"
    assert _post(agent, task, 0, b"x" * 16) == (200, {"log_offset": 16})
    assert LogChunkView.max_body_bytes == 16  # the attribute the body-limit middleware reads


def test_another_nodes_task_is_refused(world: World, running) -> None:  # noqa: ANN001
    job, task, _ = running
    other = next(name for name in world.tokens if name != task.node.name)
    status, body = _post(agent_client(world.tokens[other]), task, 0, b"not mine\n")
    assert status == 404 and body["code"] == "not_found"
    assert _post(agent_client(world.tokens[task.node.name]), task, 0, b"x\n", attempt=2)[0] == 404  # no such attempt
    assert _stored(job) == "" and JobTask.objects.get(pk=task.pk).log_received == 0


@pytest.mark.parametrize(
    "authorization", [None, "Node not-a-token", "Token not-a-token", "Node"], ids=["none", "bad", "user", "empty"]
)
def test_only_a_node_token_may_send(running, authorization: str | None) -> None:  # noqa: ANN001
    job, task, _ = running
    client = APIClient()
    if authorization:
        client.credentials(HTTP_AUTHORIZATION=authorization)
    assert _post(client, task, 0, b"intruder\n")[0] == 401
    assert _stored(job) == ""


def test_a_user_token_is_refused(world: World, running, api: APIClient) -> None:  # noqa: ANN001
    job, task, _ = running
    assert _post(api, task, 0, b"alice\n")[0] in (401, 403)
    assert _stored(job) == ""


def test_bad_input(running) -> None:  # noqa: ANN001
    job, task, agent = running
    for query in (
        "",
        f"job={job.pk}&attempt=1",
        f"job={job.pk}&attempt=1&offset=-1",
        f"job={job.pk}&attempt=1&offset=x",
        "job=0&attempt=1&offset=0",
        f"job={job.pk}&attempt=1&offset={2**63}",
    ):
        response = agent.post(f"{LOGS}?{query}", b"x", content_type="application/octet-stream")
        assert response.status_code == 400, query
    json_body = agent.post(f"{LOGS}?job={job.pk}&attempt=1&offset=0", {"log": "x"}, format="json")
    assert json_body.status_code == 415
    assert _stored(job) == ""


def test_a_node_that_never_registered_is_told_to_register(running) -> None:  # noqa: ANN001
    _, task, _ = running
    node, token = node_token_issue(name="fresh")
    assert Node.objects.get(pk=node.pk).registered_at is None
    status, body = _post(agent_client(token), task, 0, b"x")
    assert (status, body["detail"]) == (409, "register again")


def test_the_exit_report_records_the_final_size_and_forget_waits_for_the_last_byte(running) -> None:  # noqa: ANN001
    """The heartbeat reports the exit and the log's size, without the bytes; the portal forgets the task only once
    the endpoint has brought the last of them."""
    job, task, agent = running
    _post(agent, task, 0, b"a" * 10)
    key = f"{job.pk}:1:0"
    exited = TaskReport(job.pk, 1, 0, "exited", exit_code=0, log_offset=10, log_size=25)
    reply = node_heartbeat(node=task.node, reports=[exited])
    assert reply.forget == [] and reply.log_offsets == {key: 10}
    task.refresh_from_db()
    assert (task.log_final_size, task.log_received, task.state) == (25, 10, "exited")
    assert _post(agent, task, 10, b"b" * 15) == (200, {"log_offset": 25})
    reply = node_heartbeat(node=task.node, reports=[exited])
    assert reply.forget == [{"job": job.pk, "attempt": 1}] and reply.log_offsets == {key: 25}
