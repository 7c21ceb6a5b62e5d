"""The pool services on their own: a job that lands on a node after its reclaim was planned is stopped too, a
reclaim of idle nodes is done at once, and the admin may move a node between pools only while it is not lent.
Ref: #19"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.utils import timezone

from portal.jobs.models import EventKind, JobEvent
from portal.nodes.models import Node
from portal.pools.services import pool_lend, pool_reclaim, reclaims_progress
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.pools.helpers import POOL, later, pool_state, start, submit


def test_a_job_placed_after_the_plan_is_stopped_within_the_deadline(pool: World, root: AbstractBaseUser) -> None:
    pool_lend(pool=POOL, nodes=["s1"], by=root)
    first = start(submit(pool.eve, 2, name="first"), {"s1": 2})
    now = timezone.now()
    reclaim = pool_reclaim(pool=POOL, count=1, deadline_seconds=20, by=root, now=now)
    assert reclaim.preempted == [first.pk]
    # A round that read s1 before the reclaim marked it returning starts a job there anyway.
    latecomer = start(submit(pool.eve, 2, name="late"), {"s1": 2})
    assert reclaims_progress(now=later(now, 5)) == []
    latecomer.refresh_from_db()
    assert latecomer.stop_due_at is not None
    assert abs((latecomer.stop_due_at - later(now, 20)).total_seconds()) < 1  # the deadline's 15 s, not 30
    assert JobEvent.objects.filter(job=latecomer, kind=EventKind.STOP_SCHEDULED, actor="pools").exists()


def test_a_reclaim_of_idle_nodes_is_finished_at_once(pool: World, root: AbstractBaseUser) -> None:
    pool_lend(pool=POOL, nodes=["s1", "s2", "s3"], by=root)
    reclaim = pool_reclaim(pool=POOL, count=2, deadline_seconds=0, by=root, now=timezone.now())
    assert reclaim.nodes == ["s1", "s2"] and reclaim.cost_gpu_seconds == 0
    assert reclaim.finished_at is not None and not reclaim.late and reclaim.forced == []
    assert pool_state() == {"s1": (False, False), "s2": (False, False), "s3": (True, False)}


def test_the_admin_sets_a_nodes_pool_only_while_it_is_not_lent(pool: World, root: AbstractBaseUser) -> None:
    admin = UserFactory(username="super", is_staff=True, is_superuser=True)
    browser = Client()
    browser.force_login(admin)
    s1 = Node.objects.get(name="s1")
    form = browser.get(f"/admin/nodes/node/{s1.pk}/change/").content.decode()
    assert 'name="pool"' in form and 'name="lent"' not in form  # lent changes only through the pools API
    pool_lend(pool=POOL, nodes=["s1"], by=root)
    form = browser.get(f"/admin/nodes/node/{s1.pk}/change/").content.decode()
    assert 'name="pool"' not in form
    pool_reclaim(pool=POOL, count=1, deadline_seconds=0, by=root, now=timezone.now())
    listed = browser.get("/admin/pools/reclaim/")
    assert listed.status_code == 200 and POOL in listed.content.decode()  # read-only: a record of what happened
