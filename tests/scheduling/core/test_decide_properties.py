"""decide() on random snapshots: only free GPUs are handed out, each once; caps hold; every waiter has a reason."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core import (
    POLICIES,
    JobState,
    JobView,
    NodeView,
    Snapshot,
    TenantLimits,
    decide,
)
from scheduling.core.model import UsageHistory


@st.composite
def snapshots(draw):
    nodes, free_ids = [], []
    for i in range(draw(st.integers(1, 4))):
        total = draw(st.sampled_from([2, 4, 8]))
        ids = list(range(i * 100, i * 100 + total))
        free = sorted(draw(st.sets(st.sampled_from(ids))))
        up = draw(st.booleans()) or i == 0
        nodes.append(NodeView(f"n{i}", total, tuple(free), rack=f"r{i % 2}", schedulable=up))
        free_ids += [(f"n{i}", g) for g in free] if up else []
    jobs = []
    for j in range(draw(st.integers(0, 12))):
        jobs.append(
            JobView(
                id=j,
                tenant=draw(st.sampled_from("ab")),
                user=draw(st.sampled_from(["u", "v"])),
                gpus=draw(st.sampled_from([1, 2, 3, 4, 8])),
                submit_time=float(draw(st.integers(0, 50))),
                duration=float(draw(st.integers(1, 500))),
                model=draw(st.sampled_from(["", "vgg19", "resnet50"])),
            )
        )
    caps = {
        "a": TenantLimits(gpu_cap=draw(st.sampled_from([None, 2, 4])), user_cap=draw(st.sampled_from([None, 2]))),
        "b": TenantLimits(guaranteed_gpus=draw(st.sampled_from([0, 4]))),
    }
    usage = draw(
        st.one_of(
            st.none(),
            st.builds(lambda a, b: UsageHistory(3600.0, {"a": a, "b": b}), st.floats(0, 1e6), st.floats(0, 1e6)),
        )
    )
    return Snapshot(tuple(nodes), tuple(jobs), caps, usage=usage), set(free_ids)


@settings(max_examples=200, deadline=None)
@given(
    data=snapshots(),
    policy=st.sampled_from([*sorted(POLICIES), "fifo+quota", "tiresias-las+quota"]),
    placement=st.sampled_from(["count", "consolidate", "topology"]),
)
def test_decide_hands_out_only_free_gpus_once_and_explains_every_waiter(data, policy, placement):
    snap, free = data
    decision = decide(snap, now=100.0, policy=policy, placement=placement)
    given_out = [(s.node, s.gpu) for p in decision.start for s in p.slots]
    assert len(given_out) == len(set(given_out))
    assert set(given_out) <= free
    jobs = {j.id: j for j in snap.jobs}
    for p in decision.start:
        assert len(p.slots) == jobs[p.job_id].gpus
    started = {p.job_id for p in decision.start}
    assert started | set(decision.waiting) == {j.id for j in snap.jobs if j.state == JobState.PENDING}
    assert not started & set(decision.waiting)
    for tenant, limits in snap.tenants.items():
        if limits.gpu_cap is not None:
            assert sum(jobs[i].gpus for i in started if jobs[i].tenant == tenant) <= limits.gpu_cap
