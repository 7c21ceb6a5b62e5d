"""What-if runs: asking for one, replaying it in a worker, and what the row keeps. Ref: #3 (replay the cluster's own
history under another policy before switching)."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.utils import timezone

from portal.errors import NotAllowed, ValidationFailed
from portal.jobs.models import Job
from portal.jobs.selectors import job_history_trace
from portal.nodes.models import Node, NodeState
from portal.tenants.models import Quota
from portal.whatif.models import WhatIfRun
from portal.whatif.selectors import ClusterShape, whatif_live_cluster
from portal.whatif.services import ReplayCluster, whatif_create, whatif_execute, whatif_sweep
from portal.whatif.tasks import whatif_run
from scheduling.core.model import TenantLimits
from scheduling.core.preemption import PreemptionCost
from scheduling.sim.metrics import measure
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import TraceJob, parse_trace, trace_lines
from tests.concurrency import run_together
from tests.fixtures import World, register_node
from tests.history import T0, finished_job

SUMMARY_KEYS = {"avg_jct", "median_jct", "p95_jct", "avg_queue", "makespan", "jobs", "preemptions", "clairvoyant"}


def _params(**overrides: object) -> dict[str, object]:
    params: dict[str, object] = {
        "policies": ["fifo"],
        "placement": "count",
        "preemption_overhead": "0",
        "nodes": 2,
        "gpus_per_node": 4,
    }
    return params | overrides


def _queued(user: AbstractBaseUser, **overrides: object) -> WhatIfRun:
    """A run row as ``whatif_create`` leaves it, without its checks (to replay windows the form would refuse)."""
    fields = _params(live_policy="fifo") | overrides
    return WhatIfRun.objects.create(requested_by=user, **fields)


def test_a_run_replays_the_window_under_each_policy(
    root: AbstractBaseUser,
    history: dict[str, Job],
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    with django_capture_on_commit_callbacks() as callbacks:
        run = whatif_create(user=root, **_params(policies=["fifo", "srsf", "tiresias-gittins", "fifo"]))
    assert len(callbacks) == 1  # the task, queued once the run is committed
    assert (run.state, run.live_policy, run.policies) == ("queued", "fifo", ["fifo", "srsf", "tiresias-gittins"])

    run = whatif_execute(run.pk)
    assert run is not None and (run.state, run.error, run.jobs) == ("done", "", 4)
    assert run.started_at is not None and run.finished_at is not None and run.started_at <= run.finished_at
    records = run.results["policies"]
    assert [r["policy"] for r in records] == ["fifo", "srsf", "tiresias-gittins"]  # the order asked for
    assert all(SUMMARY_KEYS <= set(r) and r["jobs"] == 4 for r in records)
    assert records[0]["avg_jct"] == 5400  # see tests.history.small_history
    assert records[1]["clairvoyant"] is True
    # What really happened: the preempted job's 2 h of running are its replayed duration, the rest it waited.
    assert run.results["observed"] == {
        "jobs": 4, "avg_jct": 13050.0, "median_jct": 14400.0, "p95_jct": 14400.0, "avg_queue": 7650.0,
    }  # fmt: skip
    figures = run.results["figures"]
    assert len(figures) == 4 and all(len(f["data"]) == 3 for f in figures)
    assert figures[0]["data"][0]["name"] == "fifo (live)"


def test_the_numbers_are_those_corral_simulate_gives_for_the_export(
    root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    run = whatif_execute(_queued(root, policies=["tiresias-gittins", "sjf"], preemption_overhead="helios").pk)
    assert run is not None and run.state == "done"
    exported = parse_trace(io.StringIO("".join(trace_lines(job_history_trace()))))  # `corral history`, as CSV
    for record in run.results["policies"]:
        result = simulate(
            exported, record["policy"], cluster=Cluster(2, 4), placement="count", overhead=PreemptionCost.helios()
        )
        assert {k: record[k] for k in SUMMARY_KEYS} == measure(result).summary()


def test_the_task_replays_once_and_a_second_delivery_changes_nothing(
    root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    run = _queued(root)
    whatif_run(run.pk)
    done = WhatIfRun.objects.get(pk=run.pk)
    assert done.state == "done"
    whatif_run(run.pk)  # a redelivered message
    again = WhatIfRun.objects.get(pk=run.pk)
    assert (again.finished_at, again.results, again.jobs) == (done.finished_at, done.results, done.jobs)
    assert whatif_execute(run.pk) is None


def test_a_run_another_worker_holds_is_left_alone(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = _queued(root, state="running")
    assert whatif_execute(run.pk) is None
    assert WhatIfRun.objects.get(pk=run.pk).state == "running"
    assert whatif_execute(run.pk + 1000) is None  # a run deleted before its task ran


def test_an_empty_window_fails_with_one_readable_sentence(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = _queued(root, since=T0 + timedelta(days=30))
    run = whatif_execute(run.pk)
    assert run is not None and run.state == "failed" and run.finished_at is not None
    assert run.error == "No finished jobs were submitted in this window."
    assert run.results == {} and run.jobs == 0


def test_a_cluster_smaller_than_every_job_fails_readably(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = _queued(root, until=T0 + timedelta(minutes=30), nodes=1, gpus_per_node=1)  # only the 2-GPU job
    run = whatif_execute(run.pk)
    assert run is not None and run.state == "failed"
    assert run.error == (
        "Every job in this window needs more GPUs than the 1 of the replayed cluster (1 x 1 GPUs); "
        "the smallest asks for 2."
    )


def test_jobs_larger_than_the_cluster_are_left_out_and_counted(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = whatif_execute(_queued(root, nodes=1, policies=["fifo", "qssf"], placement="consolidate").pk)
    assert run is not None and run.state == "done"
    assert (run.jobs, run.results["skipped"]) == (3, 1)  # the 8-GPU job cannot run on 4 GPUs
    assert run.results["observed"]["jobs"] == 3  # nor is it in what really happened, which compares the same jobs


def test_a_row_with_parameters_the_form_would_refuse_fails_readably(
    root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    run = whatif_execute(_queued(root, policies=["lottery"]).pk)
    assert run is not None and run.state == "failed"
    assert run.error.startswith("Unknown policy lottery; choose from fifo, ")


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"policies": []}, "policies", "choose at least one policy"),
        ({"policies": ["fifo", "lottery"]}, "policies", "unknown policy lottery"),
        ({"placement": "anywhere"}, "placement", "unknown placement anywhere"),
        ({"preemption_overhead": "soon"}, "preemption_overhead", "number of seconds (0 or more) or helios"),
        ({"preemption_overhead": "-1"}, "preemption_overhead", "number of seconds"),
        ({"preemption_overhead": "nan"}, "preemption_overhead", "number of seconds"),
        ({"nodes": 0}, "nodes", "from 1 to 10000"),
        ({"gpus_per_node": 65}, "gpus_per_node", "from 1 to 64"),
        ({"racks": 3}, "racks", "number of nodes (2)"),
        ({"since": T0, "until": T0}, "until", "after the start of the window"),
        ({"since": T0 + timedelta(days=30)}, "since", "no finished jobs were submitted in this window"),
    ],
)
def test_create_refuses_what_cannot_be_replayed(
    root: AbstractBaseUser, history: dict[str, Job], overrides: dict[str, object], field: str, words: str
) -> None:
    with pytest.raises(ValidationFailed, match=words.replace("(", r"\(").replace(")", r"\)")) as refusal:
        whatif_create(user=root, **_params(**overrides))
    assert refusal.value.field == field
    assert not WhatIfRun.objects.exists()


def test_only_admins_may_replay_the_history(world: World, history: dict[str, Job]) -> None:
    with pytest.raises(NotAllowed):
        whatif_create(user=world.admin, **_params())  # a tenant admin is not staff


def test_the_default_cluster_is_the_live_one(world: World) -> None:
    Node.objects.filter(name="n1").update(rack="a")
    Node.objects.filter(name="n2").update(rack="b", state=NodeState.DRAINING)  # draining still counts
    register_node("n3", gpus=8)
    down, _ = register_node("n4", gpus=4)
    Node.objects.filter(pk=down.pk).update(state=NodeState.DOWN)
    # Two up nodes of 4 GPUs and one of 8: a uniform cluster of three 4-GPU nodes on the two racks named, and the
    # nodes themselves, by name, for a copy.
    assert whatif_live_cluster() == ClusterShape(
        layout=((4, "a"), (4, "b"), (8, "")), nodes=3, gpus_per_node=4, racks=2
    )
    Node.objects.update(state=NodeState.DOWN)
    assert whatif_live_cluster() is None


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)")
def test_two_workers_given_the_same_run_replay_it_once(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = _queued(root)
    outcomes = run_together(lambda: whatif_execute(run.pk), threads=2)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    assert sum(o is not None for o in outcomes) == 1
    assert WhatIfRun.objects.get(pk=run.pk).state == "done"


def test_the_sweep_sends_lost_queued_runs_again_and_fails_runs_whose_worker_died(
    root: AbstractBaseUser,
    history: dict[str, Job],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from portal.celery import app as celery_app

    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)  # the re-sent task runs here
    now = timezone.now()
    lost_message = _queued(root)
    fresh = _queued(root)
    dead_worker = _queued(root, state="running", started_at=now - timedelta(hours=3))
    busy_worker = _queued(root, state="running", started_at=now - timedelta(minutes=5))
    WhatIfRun.objects.filter(pk=lost_message.pk).update(created_at=now - timedelta(minutes=30))

    requeued, failed = whatif_sweep(now=now)

    assert (requeued, failed) == ([lost_message.pk], [dead_worker.pk])
    states = dict(WhatIfRun.objects.values_list("pk", "state"))
    assert states == {lost_message.pk: "done", fresh.pk: "queued", dead_worker.pk: "failed", busy_worker.pk: "running"}
    assert "worker stopped" in WhatIfRun.objects.get(pk=dead_worker.pk).error
    assert whatif_sweep(now=now) == ([], [])  # nothing left to recover


def _export() -> list[TraceJob]:
    """The history as ``corral history`` writes it and ``corral simulate`` reads it."""
    return parse_trace(io.StringIO("".join(trace_lines(job_history_trace()))))


def test_a_live_copy_replays_the_live_nodes_as_they_are(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    Node.objects.filter(name="n2").update(rack="b")
    register_node("n3", gpus=8)
    run = whatif_create(user=root, **_params(nodes=None, gpus_per_node=None, cluster=ReplayCluster.LIVE))
    assert run.layout == [[4, ""], [4, "b"], [8, ""]]  # by node name, each with its own size and rack
    assert (run.nodes, run.gpus_per_node, run.racks, run.quotas) == (3, 8, 2, None)

    Node.objects.filter(name="n3").update(state=NodeState.DOWN)  # later changes do not touch the run
    run = whatif_execute(run.pk)
    assert run is not None and run.state == "done"
    cluster = Cluster.of_nodes([(4, ""), (4, "b"), (8, "")])
    expected = measure(simulate(_export(), "fifo", cluster=cluster, placement="count"))
    assert {k: run.results["policies"][0][k] for k in SUMMARY_KEYS} == expected.summary()
    # Its 16 GPUs, not a uniform 3 x 8: every job starts at once on both, but utilization is of the cluster replayed.
    assert run.results["policies"][0]["utilization"] == expected.utilization


def test_quotas_are_copied_when_asked_and_hold_jobs_back(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    Quota.objects.filter(tenant__slug="other").update(guaranteed_gpus=2, user_gpu_limit=4)
    run = whatif_create(user=root, **_params(policies=["fifo", "fifo+quota"], apply_quotas=True))
    assert run.quotas == {
        "lab": {"gpu_cap": 6, "guaranteed_gpus": 0, "user_cap": None},
        "other": {"gpu_cap": None, "guaranteed_gpus": 2, "user_cap": 4},
    }
    Quota.objects.filter(tenant__slug="lab").update(gpu_limit=None)  # the run keeps the quotas it was asked with

    run = whatif_execute(run.pk)
    assert run is not None and run.state == "done"
    assert (run.jobs, run.results["skipped"]) == (3, 1)  # lab's 8-GPU job can never run under its cap of 6
    assert run.results["observed"]["jobs"] == 3  # what really happened to the same three jobs
    tenants = {"lab": TenantLimits(gpu_cap=6), "other": TenantLimits(guaranteed_gpus=2, user_cap=4)}
    for record in run.results["policies"]:
        result = simulate(_export(), record["policy"], cluster=Cluster(2, 4), placement="count", tenants=tenants)
        assert {k: record[k] for k in SUMMARY_KEYS} == measure(result).summary()


def test_without_quotas_every_tenant_may_use_the_whole_cluster(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = whatif_execute(whatif_create(user=root, **_params(apply_quotas=False)).pk)
    assert run is not None and run.quotas is None
    assert (run.jobs, run.results["skipped"]) == (4, 0)


def test_every_job_over_its_cap_fails_readably(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    quotas = {"lab": {"gpu_cap": 1, "guaranteed_gpus": 0, "user_cap": None}}
    run = whatif_execute(_queued(root, until=T0 + timedelta(minutes=30), quotas=quotas).pk)  # lab's 2-GPU job only
    assert run is not None and run.state == "failed"
    assert run.error == (
        "Every job in this window needs more GPUs than the 8 of the replayed cluster (2 x 4 GPUs) or their "
        "tenant's quota allows; the smallest asks for 2."
    )


@pytest.mark.parametrize(
    ("stored", "words"),
    [
        ({"layout": [["four", "r1"]]}, "a node's gpus is 'four', not a whole number"),
        ({"layout": [[0, "r1"]]}, "every node needs at least one GPU"),
        ({"layout": [[4]]}, "a node is [4], not [gpus, rack]"),
        ({"quotas": {"lab": {"gpu_cap": "six"}}}, "lab's gpu_cap is 'six', not a whole number"),
        ({"quotas": ["lab"]}, "quotas is not a JSON object"),
    ],
)
def test_a_row_with_a_malformed_cluster_or_quotas_fails_readably(
    root: AbstractBaseUser, history: dict[str, Job], stored: dict[str, object], words: str
) -> None:
    run = whatif_execute(_queued(root, **stored).pk)
    assert run is not None and run.state == "failed"
    assert run.error.startswith("The run's stored cluster or quotas cannot be read") and words in run.error


def test_a_live_copy_needs_a_live_node_and_a_uniform_cluster_its_size(
    root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    Node.objects.update(state=NodeState.DOWN)
    with pytest.raises(ValidationFailed, match="no live node has GPUs now") as refusal:
        whatif_create(user=root, **_params(cluster=ReplayCluster.LIVE))
    assert refusal.value.field == "cluster"
    with pytest.raises(ValidationFailed, match="give the uniform cluster's size") as refusal:
        whatif_create(user=root, **_params(gpus_per_node=None))
    assert refusal.value.field == "gpus_per_node"
    assert not WhatIfRun.objects.exists()


def test_quota_changes_replace_named_tenants_quotas_for_the_run_only(
    root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    lifted = {"lab": TenantLimits(gpu_cap=None, guaranteed_gpus=4), "other": TenantLimits()}  # other: as today
    run = whatif_create(user=root, **_params(apply_quotas=True, quota_changes=lifted))
    assert run.quotas == {
        "lab": {"gpu_cap": None, "guaranteed_gpus": 4, "user_cap": None, "edited": True},
        "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None},  # the same as today: not marked
    }
    assert Quota.objects.get(tenant__slug="lab").gpu_limit == 6
    run = whatif_execute(run.pk)
    assert run is not None and (run.jobs, run.results["skipped"]) == (4, 0)  # lab's 8-GPU job runs without its cap


@pytest.mark.parametrize(
    ("changes", "apply", "words"),
    [
        ({"nobody": TenantLimits()}, True, "no tenant nobody"),
        ({"lab": TenantLimits(gpu_cap=2, guaranteed_gpus=3)}, True, "lab: the guarantee (3) cannot exceed the cap (2)"),
        ({"lab": TenantLimits(user_cap=-1)}, True, "lab: GPU counts cannot be negative"),
        ({"lab": TenantLimits()}, False, "quota changes need the tenants' quotas applied"),
    ],
)
def test_quota_changes_that_cannot_be_applied_are_refused(
    root: AbstractBaseUser, history: dict[str, Job], changes: dict[str, TenantLimits], apply: bool, words: str
) -> None:
    with pytest.raises(ValidationFailed) as refusal:
        whatif_create(user=root, **_params(apply_quotas=apply, quota_changes=changes))
    assert (refusal.value.field, refusal.value.message) == ("quota_changes", words)
    assert not WhatIfRun.objects.exists()


def _contended_history(world: World) -> None:
    """Lab ran alone on all 6 GPUs for a day; then lab and other each queued four 2-GPU jobs at the same moment
    (other's shorter), more than their guarantees of 2: one of them borrows the 2 idle GPUs first."""
    h = timedelta(hours=1)
    finished_job(world.tenant, world.alice, name="early", gpus=6, state="succeeded", submitted=0 * h, started=0 * h,
                 finished=24 * h)  # fmt: skip
    for i in range(4):
        finished_job(world.tenant, world.alice, name=f"lab{i}", gpus=2, state="succeeded", submitted=25 * h,
                     started=25 * h, finished=26 * h)  # fmt: skip
        finished_job(world.other_tenant, world.eve, name=f"other{i}", gpus=2, state="succeeded", submitted=25 * h,
                     started=25 * h, finished=25.5 * h)  # fmt: skip
    Quota.objects.update(guaranteed_gpus=2, gpu_limit=None)


def test_fair_share_replays_with_the_half_life_the_run_was_asked_with(root: AbstractBaseUser, world: World) -> None:
    _contended_history(world)
    params = _params(policies=["fifo+quota"], nodes=1, gpus_per_node=6, apply_quotas=True)
    fair = whatif_execute(whatif_create(user=root, fair_share_half_life_hours=24, **params).pk)
    plain = whatif_execute(whatif_create(user=root, fair_share_half_life_hours=0, **params).pk)
    assert fair is not None and plain is not None
    assert (fair.fair_share_half_life_hours, plain.fair_share_half_life_hours) == (24, None)
    tenants = {"lab": TenantLimits(guaranteed_gpus=2), "other": TenantLimits(guaranteed_gpus=2)}

    def replayed(half_life: float | None) -> dict[str, object]:
        kwargs = {"cluster": Cluster(1, 6), "placement": "count", "tenants": tenants, "usage_half_life": half_life}
        return measure(simulate(_export(), "fifo+quota", **kwargs)).summary()  # type: ignore[arg-type]

    summaries = [{k: run.results["policies"][0][k] for k in SUMMARY_KEYS} for run in (fair, plain)]
    assert summaries == [replayed(24 * 3600.0), replayed(None)]
    assert summaries[0] != summaries[1]  # other (no usage yet) borrowed first: its shorter jobs end sooner


@pytest.mark.parametrize("hours", [-1.0, 87_601.0, float("nan"), float("inf")])
def test_a_half_life_out_of_bounds_is_refused(root: AbstractBaseUser, history: dict[str, Job], hours: float) -> None:
    with pytest.raises(ValidationFailed, match="number of hours from 0") as refusal:
        whatif_create(user=root, fair_share_half_life_hours=hours, **_params())
    assert refusal.value.field == "fair_share_half_life_hours"
    run = whatif_execute(_queued(root, fair_share_half_life_hours=-1.0).pk)  # a row no form would write
    assert run is not None and run.state == "failed" and run.error.startswith("Enter a number of hours from 0")
