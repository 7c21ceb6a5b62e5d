"""Short-only GPUs (soft-cordoned in the live loop): only jobs with a short enough time limit may use them, a long
job's gang never includes one, and a long job that only they would hold is told so. Ref: #4"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from scheduling.core import (
    POLICIES,
    Decision,
    GpuSlot,
    JobState,
    JobView,
    NodeView,
    Snapshot,
    Wait,
    WaitReason,
    decide,
)
from scheduling.core.placement import explain_short_only, resolve_placement
from scheduling.core.pool import FreePool

HOUR = 3600.0
SHORT = {"time_limit": HOUR}  # within the 2h the tests' placements allow
LONG = {"time_limit": 3 * HOUR}
PREEMPTIVE = ("tiresias-las", "tiresias-gittins", "fifo+quota")


def started(decision: Decision) -> dict:
    return {p.job_id: sorted((s.node, s.gpu) for s in p.slots) for p in decision.start}


def cordoned_node(b, name: str = "n1", total: int = 4, barred: tuple[int, ...] = (100, 101), **kw) -> NodeView:  # noqa: ANN001
    """``name`` (GPU ids ``<n> * 100 + k``, all free unless ``free`` says otherwise) with ``barred`` short-only."""
    return replace(b.node(name, total, **kw), short_only=barred)


@pytest.mark.parametrize("placement", ["count", "consolidate", "topology"])
@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", *PREEMPTIVE])
def test_a_long_job_is_refused_short_only_gpus_and_a_short_one_takes_them(b, policy: str, placement: str) -> None:  # noqa: ANN001
    # Only the two short-only GPUs are free: n1's others are held by a running job.
    node = cordoned_node(b, free=[100, 101])
    hog = b.running("hog", [("n1", 102), ("n1", 103)], last_started=0.0)
    long_job, no_limit, short_job = (
        b.job("long", 2, 1.0, **LONG),
        b.job("none", 2, 2.0),
        b.job("short", 2, 3.0, **SHORT),
    )
    plc = resolve_placement(placement, short_limit=2 * HOUR)

    for jobs, expected in (([long_job], {}), ([no_limit], {}), ([short_job], {"short": [("n1", 100), ("n1", 101)]})):
        decision = decide(b.snapshot([node], [hog, *jobs]), now=4.0, policy=policy, placement=plc)
        assert started(decision) == expected, jobs
        assert decision.preempt == () or policy in PREEMPTIVE


def test_the_default_placement_lets_no_job_use_short_only_gpus(b) -> None:  # noqa: ANN001
    snap = b.snapshot([cordoned_node(b, barred=(100, 101, 102, 103))], [b.job("short", 1, 0.0, time_limit=1.0)])
    assert decide(snap, now=1.0).start == ()  # "topology" by name: short_limit 0
    assert started(decide(snap, now=1.0, placement=resolve_placement("topology", short_limit=1.0))) == {
        "short": [("n1", 100)]
    }


@pytest.mark.parametrize("placement", ["count", "topology"])
def test_a_long_gang_is_never_mixed_with_a_short_only_gpu(b, placement: str) -> None:  # noqa: ANN001
    # 6 GPUs free over two nodes, 2 of them short-only: a 5-GPU long job must not take one.
    nodes = [cordoned_node(b, "n1", barred=(100, 101)), b.node("n2", 4, free=[202, 203])]
    plc = resolve_placement(placement, short_limit=2 * HOUR)
    long_only = b.snapshot(nodes, [b.job("long", 5, 0.0)])
    assert decide(long_only, now=1.0, placement=plc).start == ()
    fits = b.snapshot(nodes, [b.job("long", 4, 0.0)])
    assert started(decide(fits, now=1.0, placement=plc)) == {
        "long": [("n1", 102), ("n1", 103), ("n2", 202), ("n2", 203)]
    }
    # A short gang may mix them, and takes the short-only GPUs of a node first.
    short = b.snapshot(nodes, [b.job("short", 3, 0.0, **SHORT)])
    assert started(decide(short, now=1.0, placement=plc)) == {"short": [("n1", 100), ("n1", 101), ("n1", 102)]}


@pytest.mark.parametrize("policy", ["fifo-backfill", "tiresias-las"])
def test_a_short_job_behind_a_failed_long_job_of_the_same_size_still_starts(b, policy: str) -> None:  # noqa: ANN001
    """The round remembers shapes that did not fit; a short job must not inherit a long one's failure."""
    snap = b.snapshot(
        [cordoned_node(b, barred=(100, 101, 102))],
        [b.job("long", 2, 0.0), b.job("short", 2, 1.0, **SHORT), b.job("long2", 2, 2.0)],
    )
    decision = decide(snap, now=3.0, policy=policy, placement=resolve_placement("topology", short_limit=2 * HOUR))
    assert started(decision) == {"short": [("n1", 100), ("n1", 101)]}
    assert set(decision.waiting) == {"long", "long2"}


def test_a_preempted_job_gives_short_only_gpus_back_as_short_only(b) -> None:  # noqa: ANN001
    """A running job that holds a cordoned GPU returns it to the pool as short-only: the long newcomer gets the
    other GPU, the short one the cordoned GPU."""
    node = cordoned_node(b, total=2, free=[], barred=(100,))
    hog = b.running("hog", [("n1", 100), ("n1", 101)], last_started=0.0, attained_service=1e9)
    snap = b.snapshot([node], [hog, b.job("long", 1, 5.0), b.job("short", 1, 6.0, **SHORT)])
    decision = decide(snap, now=10.0, policy="tiresias-las", placement=resolve_placement("count", short_limit=HOUR))
    assert decision.preempt == ("hog",)
    assert started(decision) == {"long": [("n1", 101)], "short": [("n1", 100)]}


def test_pool_views_stay_in_step() -> None:
    pool = FreePool([NodeView("a", 4, (1, 2, 3, 4), short_only=(1, 2)), NodeView("b", 2, (5, 6))])
    assert pool.open is not None and (pool.total_free, pool.open.total_free) == (6, 4)
    assert pool.take(0, 3) == [GpuSlot("a", 1), GpuSlot("a", 2), GpuSlot("a", 3)]  # short-only ones first
    assert (pool.total_free, pool.open.total_free, pool.open.free_on(0)) == (3, 3, 1)
    assert pool.open.take(1, 1) == [GpuSlot("b", 5)]
    assert (pool.total_free, pool.free[1]) == (2, [6])
    pool.give([GpuSlot("a", 1), GpuSlot("a", 3), GpuSlot("b", 5)])
    assert (pool.free[0], pool.open.free[0], pool.open.free[1]) == ([1, 3, 4], [3, 4], [5, 6])
    pool.take_exact([GpuSlot("a", 1), GpuSlot("a", 4)])
    assert (pool.free[0], pool.open.free[0], pool.total_free, pool.open.total_free) == ([3], [3], 3, 3)
    assert FreePool([NodeView("a", 2, (1, 2))]).open is None  # nothing short-only: one pool, as before


def test_a_long_job_that_only_short_only_gpus_would_hold_says_so(b) -> None:  # noqa: ANN001
    snap = b.snapshot([cordoned_node(b, barred=(100, 101))], [b.job("long", 3, 0.0), b.job("short", 1, 1.0, **SHORT)])
    plc = resolve_placement("topology", short_limit=2 * HOUR)
    decision = explain_short_only(snap, decide(snap, now=2.0, policy="fifo-backfill", placement=plc), plc)
    assert started(decision) == {"short": [("n1", 100)]}
    assert decision.waiting == {
        "long": Wait(
            WaitReason.SHORT_JOBS_ONLY,
            "needs 3 GPUs; 1 of 3 GPUs free is cordoned; "
            "only jobs with a time limit of at most 2h may use cordoned GPUs",
        )
    }
    assert WaitReason.SHORT_JOBS_ONLY.label.startswith("Waiting for GPUs: the only free ones that would fit")
    # With short_limit 0 the detail says cordoned GPUs take nothing new.
    none = resolve_placement("topology")
    detail = explain_short_only(snap, decide(snap, now=2.0, policy="fifo-backfill", placement=none), none)
    assert (
        detail.waiting["long"].detail == "needs 3 GPUs; 2 of 3 GPUs free are cordoned; cordoned GPUs take no new jobs"
    )


def test_other_reasons_are_left_alone(b) -> None:  # noqa: ANN001
    plc = resolve_placement("topology", short_limit=2 * HOUR)
    # Too big even with the short-only GPUs, and a job that fits open GPUs but waits behind a FIFO head.
    snap = b.snapshot([cordoned_node(b, barred=(100,))], [b.job("huge", 8, 0.0), b.job("one", 1, 1.0)])
    decision = decide(snap, now=2.0, policy="fifo", placement=plc)
    assert explain_short_only(snap, decision, plc) is decision
    # A healthy cluster: the decision comes back untouched.
    healthy = b.snapshot([b.node("n1", 1)], [b.job("a", 1, 0.0), b.job("b", 1, 1.0)])
    decision = decide(healthy, now=2.0, placement=plc)
    assert explain_short_only(healthy, decision, plc) is decision


def test_job_view_time_limit_defaults_to_none(b) -> None:  # noqa: ANN001
    job = b.job(1)
    assert job.time_limit is None and job.state == JobState.PENDING


@st.composite
def cordoned_snapshots(draw):  # noqa: ANN001, ANN201
    """Random nodes, some GPUs short-only (free or held), running jobs holding the rest, and pending jobs with and
    without time limits."""
    nodes, jobs = [], []
    for i in range(draw(st.integers(1, 4))):
        total = draw(st.sampled_from([2, 4, 8]))
        ids = list(range(i * 100, i * 100 + total))
        barred = tuple(sorted(draw(st.sets(st.sampled_from(ids)))))
        free = sorted(draw(st.sets(st.sampled_from(ids))))
        held = [g for g in ids if g not in free]
        while held:
            size = draw(st.integers(1, len(held)))
            chunk, held = held[:size], held[size:]
            jobs.append(
                JobView(
                    id=f"r{len(jobs)}",
                    tenant="a",
                    user="u",
                    gpus=size,
                    submit_time=0.0,
                    state=JobState.RUNNING,
                    allocation=tuple(GpuSlot(f"n{i}", g) for g in chunk),
                    attained_service=float(draw(st.integers(0, 10**6))),
                    last_started=0.0,
                    duration=1e6,
                )
            )
        nodes.append(NodeView(f"n{i}", total, tuple(free), rack=f"r{i % 2}", short_only=barred))
    for j in range(draw(st.integers(0, 10))):
        jobs.append(
            JobView(
                id=j,
                tenant=draw(st.sampled_from("ab")),
                user="u",
                gpus=draw(st.sampled_from([1, 2, 3, 4, 8])),
                submit_time=float(draw(st.integers(1, 50))),
                duration=float(draw(st.integers(1, 500))),
                time_limit=draw(st.sampled_from([None, 60.0, HOUR, 3 * HOUR])),
            )
        )
    return Snapshot(tuple(nodes), tuple(jobs), {})


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    snap=cordoned_snapshots(),
    policy=st.sampled_from(sorted(POLICIES)),
    placement=st.sampled_from(["count", "consolidate", "topology"]),
)
def test_no_long_job_ever_gets_a_short_only_gpu(snap: Snapshot, policy: str, placement: str) -> None:
    plc = resolve_placement(placement, short_limit=2 * HOUR)
    decision = explain_short_only(snap, decide(snap, now=100.0, policy=policy, placement=plc), plc)
    barred = {(n.name, g) for n in snap.nodes for g in n.short_only}
    jobs = {j.id: j for j in snap.jobs}
    usable = {(n.name, g) for n in snap.nodes for g in n.free_gpus}
    usable |= {(s.node, s.gpu) for job_id in decision.preempt for s in jobs[job_id].allocation}
    given_out = [(s.node, s.gpu) for p in decision.start for s in p.slots]
    assert len(given_out) == len(set(given_out)) and set(given_out) <= usable
    for p in decision.start:
        job = jobs[p.job_id]
        assert len(p.slots) == job.gpus
        if not plc.may_use_short_only(job):
            assert not {(s.node, s.gpu) for s in p.slots} & barred, (job, p.slots)
    pending = {j.id for j in snap.jobs if j.state == JobState.PENDING}
    assert {p.job_id for p in decision.start} | set(decision.waiting) >= pending
    for job_id, wait in decision.waiting.items():
        if wait.reason == WaitReason.SHORT_JOBS_ONLY:
            assert not plc.may_use_short_only(jobs[job_id])
