"""Invariants every policy and placement must keep, on small generated traces (hypothesis)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core import GpuSlot, JobView, TenantLimits, resolve_policy
from scheduling.core.gittins import geometric_grid
from scheduling.core.policies import Policy, Quota
from scheduling.core.policies.gittins import TiresiasGittins
from scheduling.core.policies.las import TiresiasLas
from scheduling.core.preemption import PreemptionCost
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import TraceJob

POLICY_NAMES = [
    "fifo",
    "fifo-backfill",
    "sjf",
    "srtf",
    "srsf",
    "tiresias-las",
    "tiresias-gittins",
    "qssf",
    "fifo+quota",
    "tiresias-las+quota",
]


def make_policy(name: str, quantum: float) -> Policy:
    """Policies with thresholds scaled to the tiny generated jobs, so queues and indexes actually move."""
    base_name = name.removesuffix("+quota")
    if base_name == "tiresias-las":
        base: Policy = TiresiasLas(thresholds=(60.0, 400.0), starvation_knob=3.0, min_quantum=quantum)
    elif base_name == "tiresias-gittins":
        base = TiresiasGittins(grid=geometric_grid(10.0, 2.0, 1e5), min_samples=3, min_quantum=quantum)
    else:
        base = resolve_policy(base_name)
        if base.preemptive:
            base.min_quantum = quantum
    return Quota(base) if name.endswith("+quota") else base


class Auditor:
    """Checks every GPU hand-out against what is held, and work conservation after every round."""

    def __init__(self, cluster: Cluster, gpus: dict[str, int], work_conserving: bool) -> None:
        pool = cluster.free_pool()  # every GPU of the cluster, uniform or laid out node by node
        self.valid = {GpuSlot(name, gpu) for name, free in zip(pool.names, pool.free, strict=True) for gpu in free}
        self.held: dict[GpuSlot, str] = {}
        self.gpus = gpus
        self.work_conserving = work_conserving

    def started(self, job_id: str, slots: tuple[GpuSlot, ...], now: float) -> None:
        assert len(slots) == len(set(slots)) == self.gpus[job_id]
        for slot in slots:
            assert slot in self.valid
            assert slot not in self.held, f"{slot} given to {job_id} while {self.held.get(slot)} holds it"
            self.held[slot] = job_id

    def stopped(self, job_id: str, slots: tuple[GpuSlot, ...], now: float, *, finished: bool) -> None:
        for slot in slots:
            assert self.held.pop(slot) == job_id

    def round_done(self, now: float, free_gpus: int, waiting: Sequence[JobView]) -> None:
        assert free_gpus == len(self.valid) - len(self.held)
        if self.work_conserving:
            fitting = [j.id for j in waiting if j.gpus <= free_gpus]
            assert not fitting, f"t={now}: {free_gpus} GPUs idle while {fitting} wait"


traces = st.lists(
    st.tuples(st.integers(0, 400), st.integers(1, 300), st.sampled_from([1, 1, 2, 3, 4, 8])), min_size=1, max_size=25
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rows=traces,
    nodes=st.integers(1, 3),
    per_node=st.sampled_from([2, 4, 8]),
    mixed=st.one_of(st.none(), st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=4)),
    policy_name=st.sampled_from(POLICY_NAMES),
    placement=st.sampled_from(["count", "consolidate", "topology"]),
    overhead=st.sampled_from([PreemptionCost(), PreemptionCost.helios()]),
    quantum=st.sampled_from([0.0, 20.0]),
    half_life=st.sampled_from([None, 200.0]),
)
def test_simulation_invariants(rows, nodes, per_node, mixed, policy_name, placement, overhead, quantum, half_life):
    trace = [
        TraceJob(f"j{i}", float(s), float(d), g, user=f"u{i % 3}", tenant="ab"[i % 2], model=("vgg16", "")[i % 2])
        for i, (s, d, g) in enumerate(rows)
    ]
    # A uniform cluster, or nodes of mixed sizes as a copy of a real cluster has them.
    if mixed is None:
        cluster = Cluster(nodes, per_node, racks=2)
    else:
        cluster = Cluster.of_nodes([(gpus, f"r{i % 2}") for i, gpus in enumerate(mixed)])
    policy = make_policy(policy_name, quantum)
    tenants = {"a": TenantLimits(guaranteed_gpus=per_node), "b": TenantLimits(guaranteed_gpus=per_node)}
    work_conserving = placement == "count" and not policy.head_of_line
    auditor = Auditor(cluster, {t.job_id: t.gpus for t in trace}, work_conserving)

    result = simulate(
        trace,
        policy,
        cluster=cluster,
        placement=placement,
        overhead=overhead,
        tenants=tenants,
        observer=auditor,
        usage_half_life=half_life,  # fair share, for the +quota policies
    )

    # Every job that can run finishes exactly once; the rest are reported as skipped.
    finished = [o.job_id for o in result.outcomes]
    assert len(finished) == len(set(finished))
    assert set(finished) | set(result.skipped) == {t.job_id for t in trace}
    assert set(result.skipped) == {t.job_id for t in trace if t.gpus > cluster.total_gpus}
    assert auditor.held == {}
    if not policy.preemptive and not policy.guarantees:
        assert result.preemptions == 0
    # Work is conserved: GPU time held = durations + one restore overhead per preemption.
    for o in result.outcomes:
        assert o.held == pytest.approx(o.duration + o.preemptions * overhead.overhead(o.gpus))
        assert o.first_start >= o.submit
        assert o.finish >= o.submit + o.duration
