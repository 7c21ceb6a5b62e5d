"""The elastic replay of a what-if run (issue #19): what ``corral simulate --loan-pool N --elastic-share F`` does,
for ``whatif_execute``. Apart from ``services`` so that module stays about asking for and settling runs.

One policy only, the first of the run's that the elastic replay takes (non-preemptive, without quotas: the
replay's own rule), replayed twice on the run's cluster plus the loan pool: the baseline (the pool serves its
diurnal demand and never lends; no job grows) and the elastic arm (the pool lends its idle servers and reclaims
them with the deadline; a share of the jobs may grow). The window's jobs are the ones the policies' replays take;
the tenants' quotas do not apply (the elastic replay has no tenant layer). Pure: no Django, no database.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

from scheduling.core.policies import POLICIES, resolve_policy
from scheduling.sim.cluster import Cluster
from scheduling.sim.elastic_setup import ElasticSetup, LoanSetup
from scheduling.sim.elastic_sim import simulate_elastic
from scheduling.sim.replay_rules import MAX_GPUS_PER_NODE, MAX_NODES, Refusal
from scheduling.sim.trace import TraceJob
from scheduling.sim.units import time_scale

#: The most an elastic job may grow, in multiples of its size; the replay builds no more than the fleet holds anyway.
MAX_ELASTIC_FACTOR = 64
#: ``LoanSetup``'s demand step: a reclaim deadline must be shorter.
DEMAND_STEP = LoanSetup(servers=0).step
#: The arms, in the order the page and the API list them.
ARMS = ("baseline", "elastic")


class ElasticReplayError(ValueError):
    """A run's stored elastic parameters that cannot be replayed (no form or request writes them)."""


@dataclass(frozen=True, slots=True)
class ElasticAsk:
    """What a what-if run asks of the elastic replay; the names are the form's and the API's fields."""

    elastic_share: float = 0.5
    elastic_factor: int = 4
    loan_pool_servers: int = 0
    loan_pool_gpus: int = 8
    reclaim_deadline: float = 60.0


#: The request fields besides the ``elastic`` switch.
ASK_FIELDS = tuple(f.name for f in fields(ElasticAsk))


def elastic_policy(policies: Sequence[str]) -> str | None:
    """The first of ``policies`` the elastic replay takes (a known one, non-preemptive, without quotas)."""
    for name in policies:
        try:
            policy = resolve_policy(name)
        except ValueError:  # an unknown name: the policies' own rule refuses it
            continue
        if not (policy.preemptive or policy.guarantees):
            return name
    return None


def takeable_policies() -> list[str]:
    """Every policy the elastic replay takes, for the words of a refusal."""
    return [name for name in POLICIES if elastic_policy([name])]


def elastic_refusal(policies: Sequence[str], ask: ElasticAsk | None) -> Refusal | None:
    """The first rule ``ask`` breaks with these policies, naming its field; None for no ask or one that passes.

    Each bound is ``LoanSetup``'s or ``ElasticSetup``'s, plus the portal's caps on sizes (as for the cluster).
    An ask with no elastic job and no pool is refused too: both arms would replay the same thing."""
    if ask is None:
        return None
    share, factor, deadline = ask.elastic_share, ask.elastic_factor, ask.reclaim_deadline
    if not (isinstance(share, float | int) and 0 <= share <= 1):
        return Refusal("elastic_share", "enter a share of jobs from 0 to 1")
    if not (isinstance(factor, int) and 1 <= factor <= MAX_ELASTIC_FACTOR):
        return Refusal("elastic_factor", f"enter a whole growth factor from 1 to {MAX_ELASTIC_FACTOR}")
    if not (isinstance(ask.loan_pool_servers, int) and 0 <= ask.loan_pool_servers <= MAX_NODES):
        return Refusal("loan_pool_servers", f"enter a whole number of servers from 0 to {MAX_NODES}")
    if not (isinstance(ask.loan_pool_gpus, int) and 1 <= ask.loan_pool_gpus <= MAX_GPUS_PER_NODE):
        return Refusal("loan_pool_gpus", f"enter a whole number of GPUs from 1 to {MAX_GPUS_PER_NODE}")
    if not (isinstance(deadline, float | int) and math.isfinite(deadline) and 0 <= deadline < DEMAND_STEP):
        return Refusal("reclaim_deadline", f"enter seconds from 0 to under {DEMAND_STEP:.0f} (the pool's demand step)")
    if share == 0 and ask.loan_pool_servers == 0:
        return Refusal(
            "elastic_share", "give a share of elastic jobs above 0 or a loan pool: with neither, both arms are the same"
        )
    if elastic_policy(policies) is None:
        return Refusal(
            "elastic",
            "the elastic replay takes a non-preemptive policy without quotas; choose one of "
            f"{', '.join(takeable_policies())} too",
        )
    return None


def elastic_stored(policies: Sequence[str], ask: ElasticAsk | None) -> dict[str, Any] | None:
    """What the run keeps of ``ask`` (checked by :func:`elastic_refusal`): its fields and the policy replayed."""
    if ask is None:
        return None
    return {"policy": elastic_policy(policies), **asdict(ask)}


def read_ask(stored: Mapping[str, Any]) -> tuple[str, ElasticAsk]:
    """The policy and the ask a run stored; raises ``ElasticReplayError`` for a shape no form writes."""
    try:
        policy = str(stored["policy"])
        ask = ElasticAsk(**{name: stored[name] for name in ASK_FIELDS})
    except (KeyError, TypeError) as exc:
        raise ElasticReplayError(f"the run's stored elastic parameters cannot be read: {exc}") from None
    refusal = elastic_refusal([policy], ask)
    if refusal is not None:
        raise ElasticReplayError(f"the run's stored elastic parameters are refused: {refusal.message}")
    return policy, ask


def elastic_replay(
    stored: Mapping[str, Any] | None, jobs: Sequence[TraceJob], cluster: Cluster, *, placement: str
) -> dict[str, Any] | None:
    """The two arms of the elastic replay of ``jobs`` (see the module), as the run stores them: the policy, and
    per arm ``ElasticResult.summary()`` (seconds, shares of the fleet's GPU-time) in :data:`ARMS` order. None when
    the run did not ask for it."""
    if stored is None:
        return None
    policy, ask = read_ask(stored)
    servers, gpus, deadline = ask.loan_pool_servers, ask.loan_pool_gpus, float(ask.reclaim_deadline)
    try:
        serving = LoanSetup(servers, gpus, lend=False, deadline=deadline) if servers else None
        lending = LoanSetup(servers, gpus, deadline=deadline) if servers else None
        grown = ElasticSetup(share=float(ask.elastic_share), factor=ask.elastic_factor)
    except ValueError as exc:
        raise ElasticReplayError(f"the run's stored elastic parameters are refused: {exc}") from None
    arms = {
        "baseline": simulate_elastic(jobs, policy, cluster=cluster, placement=placement, loan=serving),
        "elastic": simulate_elastic(jobs, policy, cluster=cluster, placement=placement, loan=lending, elastic=grown),
    }
    return {"policy": policy, "arms": [{"arm": name, **arms[name].summary()} for name in ARMS]}


@dataclass(frozen=True, slots=True)
class ElasticRow:
    """One arm of the page's elastic table, formatted."""

    arm: str
    jobs: str
    avg_queue: str
    avg_jct: str
    usage: str
    training_usage: str
    reclaims: str
    preemptions: str
    resizes: str
    lent: str


def elastic_rows(arms: Sequence[Mapping[str, Any]]) -> list[ElasticRow]:
    """The arms as the page shows them, as ``corral simulate --loan-pool`` prints them: both time columns in the
    one unit their values call for; reclaims as on time / all (a dash with none)."""
    scale = time_scale(float(arm[key]) for arm in arms for key in ("avg_queue", "avg_jct"))
    return [
        ElasticRow(
            arm=str(arm["arm"]),
            jobs=str(arm["jobs"]),
            avg_queue=scale.text(arm["avg_queue"]),
            avg_jct=scale.text(arm["avg_jct"]),
            usage=f"{100 * arm['usage']:.1f}%",
            training_usage=f"{100 * arm['training_usage']:.1f}%",
            reclaims=f"{arm['reclaims_on_time']} / {arm['reclaims']}" if arm["reclaims"] else "—",
            preemptions=str(arm["preemptions"]),
            resizes=str(arm["resizes"]),
            lent=f"{arm['lent_node_hours']:.1f}",
        )
        for arm in arms
    ]
