"""Services of what-if runs: ask for one (``whatif_create``) and carry it out (``whatif_execute``, from a task).

The replay is ``corral history`` piped into ``corral simulate``, done in a worker: the finished jobs of the window
from ``job_history_trace``, each policy through ``scheduling.sim.simulate`` on the live cluster's nodes (or a
uniform cluster) with the tenants' quotas (or none), and what the page needs of the results kept on the row
(``portal.whatif.results``). The nodes and quotas are copied onto the row when the run is asked for. The rules the
parameters obey are ``scheduling.sim.replay_rules``' (the form judges with them too); here they become refusals.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import OperationalError, transaction
from django.utils import timezone

from portal.errors import NotAllowed, ServiceError, ValidationFailed
from portal.jobs.selectors import job_history_trace
from portal.queue import WHATIF_RUN, enqueue, enqueue_on_commit
from portal.whatif.elastic_replay import ElasticAsk, ElasticReplayError, elastic_refusal, elastic_replay, elastic_stored
from portal.whatif.models import WhatIfRun, WhatIfState
from portal.whatif.quotas import run_quotas
from portal.whatif.results import merge_figures, observed, policy_figures, policy_record
from portal.whatif.selectors import whatif_live_cluster, whatif_live_shared_gpus, whatif_window_has_jobs
from portal.whatif.share_replay import SharedGpuError, share_replay
from scheduling.core.model import TenantLimits
from scheduling.core.preemption import PreemptionCost
from scheduling.core.share_placement import PLACERS
from scheduling.sim.metrics import measure
from scheduling.sim.replay_rules import (
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    Refusal,
    replay_refusal,
    share_refusal,
    size_refusal,
    uniform_size_refusals,
)
from scheduling.sim.replay_setup import ReplaySetup, SetupError, read_setup
from scheduling.sim.report import Figure, Run
from scheduling.sim.simulator import Cluster, can_ever_run, simulate
from scheduling.sim.trace import TraceError

if TYPE_CHECKING:
    from django.contrib.auth.models import User

log = logging.getLogger(__name__)

NO_JOBS = "no finished jobs were submitted in this window"
NO_LIVE_NODES = "no live node has GPUs now; choose a uniform cluster and give its size"
UNEXPECTED = "The replay stopped on an unexpected error; the worker's log has the details."
#: A queued run nobody took for this long lost its message (the broker was down when it was asked for): send it
#: again. A run still running after this long lost its worker (killed mid-replay; acks_late redelivers the message,
#: but the redelivery finds it taken): it fails. The longest replay measured (100k jobs, eight policies) takes a few
#: minutes.
REQUEUE_AFTER = timedelta(minutes=10)
LOST_AFTER = timedelta(hours=2)
#: The share placers a sharing run replays when none is named: all of them, to compare.
DEFAULT_SHARE_PLACERS = tuple(PLACERS)
LOST = "The worker stopped during the replay (restarted or killed); ask for a new run."


class WhatIfProblem(Exception):
    """An expected reason a replay cannot be done, worded for the page."""


class ReplayCluster(StrEnum):
    """What a run replays on."""

    LIVE = "live"  # a copy of the live nodes, each with its own GPU count and rack
    UNIFORM = "uniform"  # nodes x gpus_per_node, spread over racks: "what if we had more"


def whatif_create(
    *,
    user: User,
    policies: Sequence[str],
    placement: str,
    preemption_overhead: str,
    cluster: ReplayCluster = ReplayCluster.UNIFORM,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    racks: int = 1,
    apply_quotas: bool = False,
    quota_changes: Mapping[str, TenantLimits] | None = None,
    fair_share_half_life_hours: float | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    sharing: bool = False,
    share_placers: Sequence[str] = (),
    shared_gpus: int | None = None,
    elastic: ElasticAsk | None = None,
) -> WhatIfRun:
    """Store a queued what-if run for ``user`` (staff only) and have a worker replay it.

    ``cluster=live`` copies the live nodes onto the run (``nodes``, ``gpus_per_node`` and ``racks`` are then
    ignored); ``uniform`` needs ``nodes`` and ``gpus_per_node``. ``apply_quotas`` copies every tenant's quota of
    now onto the run, so caps hold jobs back and ``+quota`` policies lend and reclaim guarantees as live.
    ``quota_changes`` replaces the quotas of the tenants it names (by slug) for this run only: "what if lab had 16
    guaranteed GPUs"; each is marked ``edited`` on the run. ``fair_share_half_life_hours`` replays ``+quota``
    policies with fair share (usage metered from the replay itself, with that half-life); None or 0: without.
    ``sharing`` also replays the window's shares of a GPU (issue #17), a GPU each and under each of
    ``share_placers`` (none named: every placer), on ``shared_gpus`` uniform 80 GiB GPUs or, without a count, a
    copy of the live GPUs marked shared. ``elastic`` also replays the first policy the elastic replay takes
    without and with elastic jobs and a loaned inference pool (issue #19, ``portal.whatif.elastic_replay``).

    Refuses (``ValidationFailed``, field-scoped) unknown policies or placement, an overhead that is neither a number
    of seconds >= 0 nor ``helios``, a live cluster with no node, a uniform one out of bounds, ``until`` not after
    ``since``, an unknown share placer, sharing with no live shared GPU and no count, an elastic replay its rules
    refuse (``elastic_refusal``), and a window in which no finished job was submitted; ``NotAllowed`` for a user
    who is not staff (the replay reads every tenant's jobs). Side effect: ``whatif_run`` is queued once the run is
    committed (``robust``: a broker that is briefly down leaves the run queued, not the request failed).
    """
    if not user.is_staff:
        raise NotAllowed("only admins may replay the cluster's history")
    names = list(dict.fromkeys(policies))
    layout: list[list[int | str]] = []
    if cluster == ReplayCluster.LIVE:
        live = whatif_live_cluster()
        if live is None:
            raise ValidationFailed(NO_LIVE_NODES, field="cluster")
        layout = [[gpus, rack] for gpus, rack in live.layout]
        copy = Cluster.of_nodes(live.layout)  # its racks count nodes with no rack as one more, as placement does
        nodes, gpus_per_node, racks = copy.nodes, copy.gpus_per_node, copy.racks
    else:
        for refusal in uniform_size_refusals(nodes=nodes, gpus_per_node=gpus_per_node):
            _refuse(refusal)
    assert nodes is not None and gpus_per_node is not None  # set above, or refused
    _check(
        policies=names,
        placement=placement,
        preemption_overhead=preemption_overhead,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        racks=racks,
        since=since,
        until=until,
        half_life_hours=fair_share_half_life_hours,
    )
    placers: list[str] = []
    shared_layout: list[list[int | str]] = []
    if sharing:
        placers = list(dict.fromkeys(share_placers)) or list(DEFAULT_SHARE_PLACERS)
        if shared_gpus is None:
            shared_layout = [list(gpu) for gpu in whatif_live_shared_gpus()]
            shared_gpus = len(shared_layout) or None
        _refuse(share_refusal(sharing=True, placers=placers, shared_gpus=shared_gpus))
    else:
        shared_gpus = None
    _refuse(elastic_refusal(names, elastic))
    if not whatif_window_has_jobs(since=since, until=until):
        raise ValidationFailed(NO_JOBS, field="since")
    quotas = run_quotas(apply_quotas, quota_changes or {})
    with transaction.atomic():
        run = WhatIfRun.objects.create(
            requested_by=user,
            since=since,
            until=until,
            policies=names,
            live_policy=settings.CORRAL_POLICY,
            placement=placement,
            preemption_overhead=preemption_overhead.strip(),
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            racks=racks,
            layout=layout,
            quotas=quotas,
            fair_share_half_life_hours=fair_share_half_life_hours or None,
            sharing=sharing,
            share_placers=placers,
            shared_gpus=shared_gpus,
            shared_layout=shared_layout,
            elastic=elastic_stored(names, elastic),
        )
        enqueue_on_commit(WHATIF_RUN, run.pk)
    return run


def whatif_execute(run_id: int) -> WhatIfRun | None:
    """Replay run ``run_id`` if it is still queued; returns it once settled, or None when there was nothing to do.

    Safe to run twice: the run is claimed (queued -> running) under its row lock, so a redelivered or concurrent
    task finds it taken and returns at once. The replay itself runs outside any transaction (it may take minutes
    and must not hold a lock, least of all SQLite's database-wide one). It ends ``done`` with the results, or
    ``failed`` with one readable sentence: an expected problem (no jobs in the window, every job larger than the
    cluster) says what it was; anything else is logged with its traceback and the page says to look there. A
    database error while reading the history puts the run back in the queue and re-raises, for the task's retry.
    """
    run = _claim(run_id)
    if run is None:
        return None
    try:
        jobs, results, elastic = _replay(run)
    except WhatIfProblem as problem:
        return _settle(run, WhatIfState.FAILED, error=str(problem))
    except OperationalError:
        WhatIfRun.objects.filter(pk=run.pk, state=WhatIfState.RUNNING).update(state=WhatIfState.QUEUED, started_at=None)
        raise
    except Exception:
        log.exception("what-if run %s failed", run.pk)
        return _settle(run, WhatIfState.FAILED, error=UNEXPECTED)
    return _settle(run, WhatIfState.DONE, jobs=jobs, results=results, elastic=elastic)


def whatif_sweep(*, now: datetime | None = None) -> tuple[list[int], list[int]]:
    """Recover runs whose replay was lost, so none stays *queued* or *running* for ever: queued runs older than
    :data:`REQUEUE_AFTER` are sent to the worker again (the claim makes a duplicate harmless), runs running longer
    than :data:`LOST_AFTER` end *failed* with :data:`LOST`. Returns (requeued ids, failed ids). Beat runs it."""
    now = now or timezone.now()
    stale = list(
        WhatIfRun.objects.filter(state=WhatIfState.QUEUED, created_at__lt=now - REQUEUE_AFTER).values_list(
            "pk", flat=True
        )
    )
    for pk in stale:
        enqueue(WHATIF_RUN, pk)
    lost = list(
        WhatIfRun.objects.filter(state=WhatIfState.RUNNING, started_at__lt=now - LOST_AFTER).values_list(
            "pk", flat=True
        )
    )
    if lost:
        WhatIfRun.objects.filter(pk__in=lost, state=WhatIfState.RUNNING).update(
            state=WhatIfState.FAILED, finished_at=now, error=LOST
        )
    return stale, lost


def _claim(run_id: int) -> WhatIfRun | None:
    with transaction.atomic():
        run = WhatIfRun.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.state != WhatIfState.QUEUED:
            return None
        run.state = WhatIfState.RUNNING
        run.started_at = timezone.now()
        run.save(update_fields=["state", "started_at"])
    return run


def _settle(
    run: WhatIfRun, state: WhatIfState, *, error: str = "", jobs: int = 0, results: Any = None, elastic: Any = None
) -> WhatIfRun:
    """Record the end of a run this worker claimed (a single UPDATE, guarded on ``running``)."""
    fields = {"state": state, "finished_at": timezone.now(), "error": error, "jobs": jobs, "results": results or {}}
    fields["elastic_results"] = elastic
    WhatIfRun.objects.filter(pk=run.pk, state=WhatIfState.RUNNING).update(**fields)
    run.refresh_from_db()
    return run


def _replay(run: WhatIfRun) -> tuple[int, dict[str, Any], dict[str, Any] | None]:
    """(jobs replayed, results, the elastic replay's arms or None) of ``run``; raises ``WhatIfProblem`` for what
    the admin can fix."""
    try:
        _check(
            policies=run.policies,
            placement=run.placement,
            preemption_overhead=run.preemption_overhead,
            nodes=run.nodes,
            gpus_per_node=run.gpus_per_node,
            racks=run.racks,
            since=run.since,
            until=run.until,
            half_life_hours=run.fair_share_half_life_hours,
        )
        if run.sharing:
            _refuse(share_refusal(sharing=True, placers=run.share_placers, shared_gpus=run.shared_gpus))
    except ServiceError as refusal:
        raise WhatIfProblem(_sentence(refusal.message)) from None
    setup = replay_setup(run)
    cluster, tenants = setup.cluster, setup.tenants
    assert cluster is not None  # replay_setup refuses a row without one
    try:
        trace = list(job_history_trace(since=run.since, until=run.until))
    except TraceError as exc:
        raise WhatIfProblem(_sentence(f"the history could not be read as a trace: {exc}")) from None
    if not trace:
        raise WhatIfProblem(_sentence(NO_JOBS))
    # Jobs over the cluster or their cap are skipped by every policy alike; "what really happened" leaves them out
    # too, so it compares the same jobs.
    replayable = [job for job in trace if can_ever_run(job, cluster, tenants)]
    if not replayable:
        smallest = min(job.gpus for job in trace)
        capped = " or their tenant's quota allows" if any(job.gpus <= cluster.total_gpus for job in trace) else ""
        raise WhatIfProblem(
            f"Every job in this window needs more GPUs than the {cluster.total_gpus} of the replayed cluster "
            f"({cluster.describe()}){capped}; the smallest asks for {smallest}."
        )
    overhead = PreemptionCost.parse(run.preemption_overhead)
    records: list[dict[str, Any]] = []
    figures: list[list[Figure]] = []
    for name in run.policies:  # one replay in memory at a time: a 100k-job run holds 100k outcomes
        result = simulate(
            trace,
            name,
            cluster=cluster,
            placement=run.placement,
            overhead=overhead,
            tenants=tenants,
            usage_half_life=setup.usage_half_life,
        )
        metrics = measure(result)
        records.append(policy_record(metrics))
        figures.append(policy_figures(Run(result, metrics)))
    skipped = records[0]["skipped"] if records else 0
    results = {
        "policies": records,
        "observed": observed(replayable),
        "skipped": skipped,
        "figures": merge_figures(figures, live_policy=run.live_policy),
    }
    if run.sharing:
        try:
            results["sharing"] = share_replay(run)
        except SharedGpuError as exc:
            raise WhatIfProblem(_sentence(f"the run's stored shared GPUs cannot be read: {exc}")) from None
    try:  # on the jobs the policies replayed; None when the run did not ask for it
        elastic = elastic_replay(run.elastic, replayable, cluster, placement=run.placement)
    except ElasticReplayError as exc:
        raise WhatIfProblem(_sentence(str(exc))) from None
    return len(trace) - skipped, results, elastic


def replay_setup(run: WhatIfRun) -> ReplaySetup:
    """The cluster, tenant limits and fair-share half-life ``run`` replays with, read back from its row; raises
    ``WhatIfProblem`` for a row no form would have written (a layout or quotas of the wrong shape)."""
    stored = {
        "layout": run.layout,
        "quotas": run.quotas,
        "nodes": run.nodes,
        "gpus_per_node": run.gpus_per_node,
        "racks": run.racks,
        "fair_share_half_life_hours": run.fair_share_half_life_hours,
    }
    try:
        setup = read_setup(stored)
    except SetupError as exc:
        raise WhatIfProblem(_sentence(f"the run's stored cluster or quotas cannot be read: {exc}")) from None
    cluster = setup.cluster
    assert cluster is not None  # the row always has nodes and gpus_per_node
    sizes = (("nodes", cluster.nodes, MAX_NODES), ("gpus_per_node", cluster.gpus_per_node, MAX_GPUS_PER_NODE))
    if any(size_refusal(*size) for size in sizes):  # a stored layout (a live copy) beyond the bounds
        raise WhatIfProblem(_sentence(f"the replayed cluster is larger than {MAX_NODES} nodes of {MAX_GPUS_PER_NODE}"))
    return setup


def _check(
    *,
    policies: Sequence[str],
    placement: str,
    preemption_overhead: str,
    nodes: int,
    gpus_per_node: int,
    racks: int,
    since: datetime | None,
    until: datetime | None,
    half_life_hours: float | None,
) -> None:
    """The parameters' rules, shared by ``whatif_create`` and the replay (a row written some other way fails with
    the same words)."""
    _refuse(
        replay_refusal(
            policies=policies,
            placement=placement,
            preemption_overhead=preemption_overhead,
            nodes=nodes,
            gpus_per_node=gpus_per_node,
            racks=racks,
            since=since,
            until=until,
            half_life_hours=half_life_hours,
        )
    )


def _refuse(refusal: Refusal | None) -> None:
    """A broken rule as the service's field-scoped refusal."""
    if refusal is not None:
        raise ValidationFailed(refusal.message, field=refusal.field)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:].rstrip(".") + "."
