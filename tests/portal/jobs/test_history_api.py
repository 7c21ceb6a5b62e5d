"""``GET /api/v1/history/trace/``: the cluster's finished jobs as a trace that the simulator replays.
Ref: #3 (an admin compares policies on the cluster's own history)"""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from portal.jobs.models import Job
from scheduling.core.sharing import WorkloadClass
from scheduling.sim.share_trace import read_share_trace
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import parse_trace
from tests.factories import UserFactory
from tests.fixtures import World
from tests.history import T0, finished_job


@pytest.fixture
def history(world: World) -> dict[str, Job]:
    lab, other = world.tenant, world.other_tenant
    h = timedelta(hours=1)
    return {
        # Ran 2 h on 2 GPUs after waiting 30 min.
        "plain": finished_job(lab, world.alice, name="resnet", gpus=2, state="succeeded", submitted=0 * h,
                              started=0.5 * h, finished=2.5 * h),
        # Preempted after 1 h on 4 GPUs (4 x 3600 GPU-s attained), resumed, ran 1 h more, then failed.
        "preempted": finished_job(other, world.eve, name="bert", gpus=4, state="failed", submitted=1 * h,
                                  started=4 * h, finished=5 * h, attained=4 * 3600.0),
        # Ran 1 h, was requeued, and was cancelled while pending: its service is all in earlier attempts.
        "cancelled_after_running": finished_job(lab, world.bob, name="gan", gpus=1, state="cancelled",
                                                submitted=2 * h, started=None, finished=6 * h, attained=3600.0),
        # Never ran: not in the trace.
        "never_ran": finished_job(lab, world.alice, name="typo", gpus=1, state="cancelled", submitted=3 * h,
                                  started=None, finished=3.1 * h),
    }  # fmt: skip


def staff_client() -> APIClient:
    UserFactory(username="root", is_staff=True)
    client = APIClient()
    token = client.post("/api/v1/auth/token/", {"username": "root", "password": "pw"}, format="json").json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def read(response: object) -> str:
    return b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]


def test_the_export_is_a_trace_with_each_jobs_service_and_wait(history: dict[str, Job]) -> None:
    response = staff_client().get("/api/v1/history/trace/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    jobs = {j.name: j for j in parse_trace(io.StringIO(read(response)))}
    assert set(jobs) == {"resnet", "bert", "gan"}
    assert (jobs["resnet"].submit_time, jobs["resnet"].duration, jobs["resnet"].queue_delay) == (0, 7200, 1800)
    assert (jobs["resnet"].gpus, jobs["resnet"].user, jobs["resnet"].tenant) == (2, "alice", "lab")
    # 1 h before the preemption plus 1 h after it; the other 2 h of its 4 h in the system it waited.
    assert (jobs["bert"].submit_time, jobs["bert"].duration, jobs["bert"].queue_delay) == (3600, 7200, 7200)
    assert (jobs["bert"].status, jobs["bert"].tenant) == ("failed", "other")
    assert (jobs["gan"].duration, jobs["gan"].status) == (3600, "killed")
    assert jobs["resnet"].status == "completed"
    assert jobs["resnet"].job_id == str(history["plain"].pk)


def test_the_window_selects_by_submission_and_counts_time_from_the_first_job(history: dict[str, Job]) -> None:
    client = staff_client()
    since, until = (T0 + timedelta(minutes=30)).isoformat(), (T0 + timedelta(hours=2)).isoformat()
    response = client.get("/api/v1/history/trace/", {"since": since, "until": until})
    jobs = parse_trace(io.StringIO(read(response)))
    assert [(j.name, j.submit_time) for j in jobs] == [("bert", 0)]
    empty = client.get("/api/v1/history/trace/", {"since": "2030-01-01"})
    assert read(empty).splitlines() == [
        "job_id,user,vc,submit_time,duration,num_gpus,status,queue_delay,gpu_milli,workload_class,model_name,job_name"
    ]


def test_the_simulator_replays_the_export_under_every_policy(history: dict[str, Job]) -> None:
    trace = parse_trace(io.StringIO(read(staff_client().get("/api/v1/history/trace/"))))
    for policy in ("fifo", "tiresias-gittins", "qssf"):
        result = simulate(trace, policy, cluster=Cluster(1, 4))
        assert sorted(o.job_id for o in result.outcomes) == sorted(j.job_id for j in trace)


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"since": "yesterday"}, "since", "Datetime has wrong format"),
        ({"until": "2026-13-40"}, "until", "Datetime has wrong format"),
        ({"since": "2026-11-02", "until": "2026-11-01"}, "until", "must be later than since"),
    ],
)
def test_a_bad_window_is_a_400_on_its_field(history: dict[str, Job], params: dict, field: str, words: str) -> None:
    response = staff_client().get("/api/v1/history/trace/", params)
    assert response.status_code == 400
    assert words in " ".join(response.json()[field])


def test_only_admins_may_export_the_whole_clusters_history(api: APIClient, history: dict[str, Job]) -> None:
    assert api.get("/api/v1/history/trace/").status_code == 403  # alice, a member
    assert APIClient().get("/api/v1/history/trace/").status_code == 401


def test_staff_download_it_from_the_jobs_page_with_their_session(
    client: Client, world: World, history: dict[str, Job]
) -> None:
    client.force_login(world.alice)
    page = client.get(reverse("job-list")).content.decode()
    assert "Jobs" in page and "Export history" not in page
    client.force_login(UserFactory(username="root", is_staff=True))
    page = client.get(reverse("job-list")).content.decode()
    assert 'href="/api/v1/history/trace/" download' in page
    browser_accept = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    response = client.get("/api/v1/history/trace/", HTTP_ACCEPT=browser_accept)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert len(read(response).splitlines()) == 4  # the header and the three jobs that ran


def test_a_share_of_a_gpu_is_exported_with_its_gpu_milli_and_class_for_the_sharing_replay(
    history: dict[str, Job], world: World, tmp_path: Path
) -> None:
    """Issue #17: the export is a trace ``corral simulate --sharing on`` replays, shares and all."""
    h = timedelta(hours=1)
    share = finished_job(world.tenant, world.alice, name="serve", gpus=1, state="succeeded", submitted=4 * h,
                         started=4 * h, finished=5 * h)  # fmt: skip
    Job.objects.filter(pk=share.pk).update(gpu_fraction=0.25, workload_class="online")
    text = read(staff_client().get("/api/v1/history/trace/", HTTP_ACCEPT="text/csv"))
    rows = {row["job_name"]: row for row in csv.DictReader(io.StringIO(text))}
    assert (rows["serve"]["gpu_milli"], rows["serve"]["workload_class"]) == ("250", "online")
    assert (rows["gan"]["gpu_milli"], rows["gan"]["workload_class"]) == ("", "")  # a whole GPU
    path = tmp_path / "history.csv"
    path.write_text(text)
    tasks = {t.task_id: t for t in read_share_trace(path)}
    assert set(tasks) == {str(share.pk), str(history["cancelled_after_running"].pk)}  # the single-GPU jobs
    serve = tasks[str(share.pk)]
    assert (serve.gpu_fraction, serve.workload_class, serve.duration) == (0.25, WorkloadClass.ONLINE, 3600)
    assert len(parse_trace(io.StringIO(text))) == 4  # the whole-GPU reader ignores the share columns
