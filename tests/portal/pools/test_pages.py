"""Where pools show (issue #19): the nodes page gives each node's pool and whether it is lent or being given back;
staff see the pools and their reclaims under it; /metrics has gauges of lent nodes and late reclaims; the beat task
hands nodes back. Ref: #19"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.pools.models import Reclaim
from portal.pools.services import pool_lend, pool_reclaim
from portal.pools.tasks import progress_reclaims
from tests.fixtures import World
from tests.portal.pools.helpers import POOL, exit_all, later, pool_state, start, submit


def _busy_reclaim(world: World, root: AbstractBaseUser) -> Reclaim:
    """A reclaim of s2 with no time to spare (deadline 0) while a job runs there: s2 is forced back, the reclaim
    late. s1 is lent afterwards (lent before, the idle s1 would have been the one given back)."""
    pool_lend(pool=POOL, nodes=["s2"], by=root)
    start(submit(world.eve, 4), {"s2": 4})
    reclaim = pool_reclaim(pool=POOL, count=1, deadline_seconds=0, by=root, now=timezone.now())
    pool_lend(pool=POOL, nodes=["s1"], by=root)
    return reclaim


def test_the_nodes_page_shows_each_nodes_pool_and_loan(pool: World, root: AbstractBaseUser, client: Client) -> None:
    pool_lend(pool=POOL, nodes=["s1", "s2"], by=root)
    start(submit(pool.eve, 4), {"s2": 4})
    pool_reclaim(pool=POOL, count=1, deadline_seconds=60, by=root, now=timezone.now())  # s1: idle, back at once
    assert pool_state() == {"s1": (False, False), "s2": (True, False), "s3": (False, False)}
    pool_reclaim(pool=POOL, count=1, deadline_seconds=60, by=root, now=timezone.now())  # s2: busy, returning
    client.force_login(pool.alice)
    cells = client.get("/nodes/").content.decode()
    assert 'data-testid="node-pool">training</td>' in cells
    assert 'data-testid="node-pool">inference <span class="state node-draining"' in cells  # s2 returning
    assert cells.count("not lent</span>") == 2  # s1 (given back) and s3
    assert "pool-reclaims" not in cells  # the reclaims panel is for staff
    assert client.get("/pools/reclaims/").status_code == 403


def test_staff_see_pools_and_reclaims_on_the_nodes_page(pool: World, root: AbstractBaseUser, client: Client) -> None:
    reclaim = _busy_reclaim(pool, root)
    client.force_login(root)
    assert 'hx-get="/pools/reclaims/"' in client.get("/nodes/").content.decode()
    panel = client.get("/pools/reclaims/", headers={"HX-Request": "true"}).content.decode()
    assert f"<td>{reclaim.pk}</td>" in panel
    assert 's2 <small>(back)</small> <small class="state node-fenced">forced</small>' in panel
    assert ">late</span>" in panel and "preempted 1" in panel


def test_metrics_count_lent_nodes_and_late_reclaims(pool: World, root: AbstractBaseUser, client: Client) -> None:
    _busy_reclaim(pool, root)
    response = client.get("/metrics")
    assert response.status_code == 200
    found = {f.name: f.samples for f in text_string_to_metric_families(response.content.decode())}
    assert [(s.labels, s.value) for s in found["corral_pool_nodes_lent"]] == [({"pool": POOL}, 1.0)]
    assert [(s.labels, s.value) for s in found["corral_pool_nodes"]] == [({"pool": POOL}, 3.0)]
    assert found["corral_reclaims_late"][0].value == 1.0


def test_the_beat_task_hands_back_emptied_nodes(pool: World, root: AbstractBaseUser) -> None:
    pool_lend(pool=POOL, nodes=["s1"], by=root)
    job = start(submit(pool.eve, 4), {"s1": 4})
    now = timezone.now()
    reclaim = pool_reclaim(pool=POOL, count=1, deadline_seconds=600, by=root, now=now)
    assert progress_reclaims() == []
    exit_all(job)
    assert progress_reclaims() == [reclaim.pk]
    reclaim.refresh_from_db()
    assert not reclaim.late and reclaim.finished_at is not None and pool_state()["s1"] == (False, False)
    assert later(now, 600) > reclaim.finished_at
