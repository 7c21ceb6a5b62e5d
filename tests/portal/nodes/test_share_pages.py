"""Where shares show (issue #17): the job page says which GPU a share shares and with what share, the node page
lists each shared GPU's shares and evictions, /metrics has series for them, and the demo's second node registers
its GPUs shared. Ref: #17"""

from __future__ import annotations

from django.core.management import call_command
from django.test import Client

from portal.jobs.models import Job
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, register_node
from tests.portal.scheduler.test_share_round import GIB, share_gpus, submit_share


def _two_shares(world: World) -> tuple[Job, Job]:
    share_gpus(world.nodes[0], [3])
    online = submit_share(world, 0.5, cls="online", memory=4 * GIB)
    offline = submit_share(world, 0.1)
    scheduling_round()
    return Job.objects.get(pk=online.pk), Job.objects.get(pk=offline.pk)


def test_the_job_page_says_which_gpu_it_shares_and_with_what(world: World, client: Client) -> None:
    online, _ = _two_shares(world)
    assert online.state == "running"
    client.force_login(world.eve)
    page = client.get(f"/jobs/{online.pk}/").content.decode()
    assert "0.5 of one GPU, online, 4.0" in page
    assert "n1 GPU 3: 50% compute, 4.0 GiB memory, with 1 other share" in page
    body = client.get(f"/api/v1/jobs/{online.pk}/").json()
    assert body["share"] == {
        "node": "n1", "gpu_index": 3, "compute_percent": 50, "memory_bytes": 4 * GIB, "neighbours": 1,
    }  # fmt: skip


def test_the_job_list_shows_a_share_as_its_fraction(world: World, client: Client) -> None:
    _two_shares(world)
    client.force_login(world.eve)
    table = client.get("/jobs/").content.decode()
    assert '<td>0.5 <small class="muted">share</small></td>' in table
    assert '<td>0.1 <small class="muted">share</small></td>' in table


def test_the_node_list_names_shared_gpus_and_counts_their_shares(world: World, client: Client) -> None:
    """The list used to name one of a shared GPU's jobs as if it held the GPU alone."""
    _two_shares(world)
    share_gpus(world.nodes[0], [2])  # shared, and no share on it yet
    client.force_login(world.eve)
    table = client.get("/nodes/").content.decode()
    assert "GPUs allocated, 1 of them to shares of a GPU." in table
    assert 'data-testid="gpu-shares">shared: 2 shares</a>' in table
    assert "#2 free (shared)" in table


def test_the_node_page_lists_shares_and_evictions_and_metrics_count_them(world: World, client: Client) -> None:
    online, offline = _two_shares(world)
    assert offline.state == "running"
    eviction = {"gpu": 3, "reason": "evicted to protect online work on GPU 3", "cause": "load"}
    node_heartbeat(
        node=world.nodes[0], reports=[TaskReport(offline.pk, 1, 0, "exited", exit_code=-15, eviction=eviction)]
    )
    client.force_login(world.admin)
    page = client.get("/nodes/n1/").content.decode()
    assert 'data-testid="shared-gpu-3"' in page and f"job {online.pk}</a> online: 50%" in page
    assert 'data-testid="gpu-share-count">1 share</a>' in page  # the GPUs table: the share that was not evicted
    row = page.split('data-testid="shared-gpu-3"')[1].split("</tr>")[0]
    assert "<td>50%</td>" in row and "<td>1</td>" in row  # compute given, and the one eviction
    world.admin.is_staff = True
    world.admin.save()
    client.force_login(world.admin)
    metrics = client.get("/metrics").content.decode()
    labels = '{Hostname="n1",UUID="GPU-n1-3",device="nvidia3",gpu="3",modelName="Fake"}'
    assert f"corral_gpu_share_clients{labels} 1.0" in metrics  # the evicted share has left
    assert f"corral_gpu_share_compute_percent{labels} 50.0" in metrics
    assert "corral_share_evictions_total 1.0" in metrics


def test_the_demo_node_registers_its_gpus_shared(world: World, tmp_path) -> None:  # noqa: ANN001
    call_command("seed_demo", "--nodes", "local-1", "local-2", "--token-dir", str(tmp_path))
    register_node("local-2", gpus=2)
    register_node("local-1", gpus=2)
    assert set(Gpu.objects.filter(node__name="local-2").values_list("shared", flat=True)) == {True}
    assert set(Gpu.objects.filter(node__name="local-1").values_list("shared", flat=True)) == {False}
