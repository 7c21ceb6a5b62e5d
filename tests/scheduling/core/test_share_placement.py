"""The share placers (issue #17): property tests that none ever breaks the rule, and crafted cases where matching
does better than greedy first-fit."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.share_placement import (
    PLACERS,
    benefit,
    best_fit,
    first_fit,
    matching,
    resolve_placer,
    room_after,
)
from scheduling.core.sharing import (
    DEFAULT_POLICY,
    GIB,
    ShareDemand,
    SharedGpu,
    SharedGpuState,
    SharingPolicy,
    WorkloadClass,
    evictions_for_load,
    fits,
    online_reserved,
    tenant_for,
    violations,
)

ONLINE, OFFLINE = WorkloadClass.ONLINE, WorkloadClass.OFFLINE
STRICT = SharingPolicy(slowdown_budget=1.0, headroom=0.0, squeeze_floor=1.0)


def check_invariants(gpus: tuple[SharedGpuState, ...], policy: SharingPolicy) -> None:
    """The rules of issue #17, written out again here rather than trusted to the code under test."""
    for g in gpus:
        if not g.tenants:
            continue
        assert g.gpu.sharing and g.whole_holder is None
        assert len(g.tenants) <= g.gpu.max_clients
        assert sum(t.memory_bytes for t in g.tenants) + g.gpu.reserve_bytes <= g.gpu.memory_bytes
        assert sum(t.is_online for t in g.tenants) <= 1
        assert sum(t.fraction for t in g.tenants if t.is_online or t.guaranteed) <= 1 + 1e-9
        offline = sum(t.grant for t in g.tenants if not t.is_online)
        assert online_reserved(g, policy) + offline <= 1 + 1e-9
        assert all(0 < t.grant <= t.fraction + 1e-9 for t in g.tenants)
        if any(t.is_online for t in g.tenants):
            assert policy.model.slowdown(offline) <= policy.slowdown_budget + 1e-9
        assert violations(g, policy) == []


@st.composite
def clusters(draw):
    gpus = []
    for i in range(draw(st.integers(1, 5))):
        gpu = SharedGpu(
            "n", i, draw(st.sampled_from([16, 24, 80])) * GIB,
            sharing=draw(st.booleans()) or i == 0, max_clients=draw(st.sampled_from([2, 4, 48])),
        )  # fmt: skip
        whole = "w" if draw(st.integers(0, 4)) == 0 else None
        load = draw(st.one_of(st.none(), st.floats(0, 1)))
        gpus.append(SharedGpuState(gpu=gpu, whole_holder=whole, online_load=load))
    demands = [
        ShareDemand(
            job_id=j,
            gpu_fraction=draw(st.sampled_from([0.05, 0.1, 0.2, 0.25, 0.33, 0.5, 0.6, 0.81, 0.95])),
            workload_class=draw(st.sampled_from([ONLINE, OFFLINE, OFFLINE])),
            gpu_memory_bytes=draw(st.one_of(st.none(), st.sampled_from([GIB, 4 * GIB, 20 * GIB]))),
            guaranteed=draw(st.booleans()),
            evictions=draw(st.integers(0, 3)),
        )
        for j in range(draw(st.integers(0, 14)))
    ]
    policy = SharingPolicy(
        headroom=draw(st.sampled_from([0.0, 0.1])),
        slowdown_budget=draw(st.sampled_from([0.05, 0.15, 1.0])),
        squeeze_floor=draw(st.sampled_from([0.5, 1.0])),
    )
    return gpus, demands, policy


@settings(max_examples=300, deadline=None)
@given(data=clusters(), placer=st.sampled_from(sorted(PLACERS)), rounds=st.integers(1, 3))
def test_no_placer_ever_breaks_the_rule(data, placer, rounds):
    gpus, demands, policy = data
    place = resolve_placer(placer)
    state = tuple(gpus)
    placed: list[object] = []
    for r in range(rounds):  # placers also run on GPUs they filled before
        batch = [d for d in demands if d.job_id % rounds == r]
        result = place(state, batch, float(r), policy)
        for p in result.placements:
            assert state[p.index].gpu == result.gpus[p.index].gpu
        placed += [p.job_id for p in result.placements]
        state = result.gpus
        check_invariants(state, policy)
    assert len(placed) == len(set(placed))  # never twice, online included
    online_per_gpu = [sum(t.is_online for t in g.tenants) for g in state]
    assert max(online_per_gpu, default=0) <= 1


@settings(max_examples=200, deadline=None)
@given(data=clusters(), loads=st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_evictions_for_a_rising_load_leave_a_legal_gpu(data, loads):
    gpus, demands, policy = data
    state = matching(gpus, demands, 0.0, policy).gpus
    for load in loads:
        nxt = []
        for g in state:
            gone = evictions_for_load(g, load, policy) if g.online is not None else ()
            assert all(not t.is_guaranteed for t in g.tenants if t.job_id in gone)
            nxt.append(SharedGpuState(g.gpu, g.without(gone).tenants, g.whole_holder, load if g.online else None))
        state = tuple(nxt)
        check_invariants(state, policy)


def empty(n: int = 2) -> list[SharedGpuState]:
    return [SharedGpuState(SharedGpu("n", i, 80 * GIB)) for i in range(n)]


def demand(job_id: int, fraction: float, cls: WorkloadClass = OFFLINE) -> ShareDemand:
    return ShareDemand(job_id, fraction, cls, gpu_memory_bytes=GIB)


def preload(g: SharedGpuState, d: ShareDemand, policy: SharingPolicy = STRICT) -> SharedGpuState:
    return g.with_tenant(tenant_for(g, d, policy=policy))


def test_matching_places_shares_first_fit_strands():
    """GPU 0 has 0.6 free, GPU 1 has 0.3 free; a 0.3 share then a 0.6 share wait. First-fit puts the 0.3 on GPU 0
    and the 0.6 fits nowhere; the matching pairs each with the GPU it fills."""
    a, b = empty()
    gpus = [preload(a, demand(100, 0.4)), preload(b, demand(101, 0.7))]
    waiting = [demand(1, 0.3), demand(2, 0.6)]
    ff = first_fit(gpus, waiting, 0.0, STRICT)
    mm = matching(gpus, waiting, 0.0, STRICT)
    assert [p.job_id for p in ff.placements] == [1]
    assert sorted((p.job_id, p.index) for p in mm.placements) == [(1, 1), (2, 0)]
    assert len(best_fit(gpus, waiting, 0.0, STRICT).placements) == 2  # best-fit finds it too: exact fits


def test_matching_does_not_squeeze_a_share_that_an_empty_gpu_would_run_at_full_speed():
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.0, squeeze_floor=0.5)
    busy, free = empty()
    gpus = [preload(busy, demand(100, 0.7), policy), free]
    waiting = [demand(1, 0.6)]
    ff, mm = first_fit(gpus, waiting, 0.0, policy), matching(gpus, waiting, 0.0, policy)
    assert (ff.placements[0].index, ff.placements[0].grant) == (0, pytest.approx(0.3))  # squeezed to half, and slowed
    assert (mm.placements[0].index, mm.placements[0].grant) == (1, pytest.approx(0.6))
    assert benefit(gpus[1], waiting[0], 0.0, policy) > benefit(gpus[0], waiting[0], 0.0, policy)


def test_matching_keeps_a_job_with_past_evictions_away_from_a_busy_online_neighbour():
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.0)
    g0, g1 = empty()
    hot = SharedGpuState(g0.gpu, preload(g0, demand(100, 0.5, ONLINE)).tenants, online_load=0.5)
    cool = SharedGpuState(g1.gpu, preload(g1, demand(101, 0.5, ONLINE)).tenants, online_load=0.1)
    evicted = ShareDemand(1, 0.3, gpu_memory_bytes=GIB, evictions=2)
    result = matching([hot, cool], [evicted], 0.0, policy)
    assert result.placements[0].index == 1


def test_online_shares_go_first_and_one_per_gpu():
    waiting = [demand(1, 0.3), demand(2, 0.3, ONLINE), demand(3, 0.3, ONLINE), demand(4, 0.3, ONLINE)]
    for place in PLACERS.values():
        result = place(empty(2), waiting, 0.0, STRICT)
        onl = [p.job_id for p in result.placements if p.job_id != 1]
        assert sorted(onl) == [2, 3]  # two GPUs: two online shares, the third waits
        assert [sum(t.is_online for t in g.tenants) for g in result.gpus] == [1, 1]


def test_more_shares_than_gpus_take_several_matching_rounds():
    waiting = [demand(j, 0.2) for j in range(8)]
    result = matching(empty(2), waiting, 0.0, STRICT)
    assert len(result.placements) == 8  # 4 rounds of 2 pairs, then 0.2 is left on each GPU
    assert [len(g.tenants) for g in result.gpus] == [4, 4]


def test_a_burst_of_shares_packs_instead_of_taking_one_empty_gpu_each():
    """Shares that arrive together still share: each GPU takes one new client per matching round, which used to
    send the second and third share of a burst to empty GPUs of their own. Now a share waits a round for a GPU in
    use, and empty GPUs are opened only as the burst needs."""
    waiting = [demand(1, 0.5, ONLINE), demand(2, 0.25), demand(3, 0.25)]
    result = matching(empty(4), waiting, 0.0, STRICT)
    assert len(result.placements) == 3
    assert [len(g.tenants) for g in result.gpus] == [3, 0, 0, 0]
    # The demo's case, under the default 5 % online slowdown budget: an online share runs, two offline shares arrive
    # together. They took two more GPUs; now one joins the online share (squeezed to what the budget leaves).
    g0, *rest = empty(4)
    online = SharedGpuState(g0.gpu, preload(g0, demand(100, 0.5, ONLINE), DEFAULT_POLICY).tenants)
    demo = matching([online, *rest], [demand(2, 0.25), demand(3, 0.25)], 0.0, DEFAULT_POLICY)
    assert len(demo.placements) == 2 and sum(bool(g.tenants) for g in demo.gpus) == 2
    burst = [demand(j, 0.25) for j in range(10)]  # 2.5 GPUs' worth: three GPUs, not ten
    packed = matching(empty(10), burst, 0.0, STRICT)
    assert len(packed.placements) == 10 and sum(bool(g.tenants) for g in packed.gpus) == 3


def test_matching_still_opens_an_empty_gpu_where_the_benefit_says_so():
    """Waiting a round is offered only at the benefit of the best GPU in use: a share that does better alone
    still takes an empty GPU (here a GPU in use would squeeze it to half its ask)."""
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.0, squeeze_floor=0.5)
    busy, *free = empty(3)
    result = matching([preload(busy, demand(100, 0.7), policy), *free], [demand(1, 0.6)], 0.0, policy)
    assert (result.placements[0].index, result.placements[0].grant) == (1, pytest.approx(0.6))


def test_an_unknown_placer_is_refused():
    with pytest.raises(ValueError, match="first-fit"):
        resolve_placer("random")


def _plain_first_fit(gpus, waiting, policy):  # noqa: ANN001, ANN202
    """First-fit written the plain way: every share asks every GPU from the first."""
    state, out = list(gpus), []
    for d in sorted(waiting, key=lambda d: d.workload_class != ONLINE):
        index = next((i for i, g in enumerate(state) if fits(g, d, policy)), None)
        if index is not None:
            tenant = tenant_for(state[index], d, policy=policy)
            state[index] = state[index].with_tenant(tenant)
            out.append((d.job_id, index, tenant.grant))
    return out


def _plain_best_fit(gpus, waiting, policy):  # noqa: ANN001, ANN202
    """Best-fit written the plain way: every share weighs every GPU afresh."""
    state, out = list(gpus), []
    order = sorted(waiting, key=lambda d: d.workload_class != ONLINE)
    for n, d in enumerate(order):
        smallest = min((x.gpu_fraction for x in order[n + 1 :]), default=0.0)
        keys = []
        for i, g in enumerate(state):
            if fits(g, d, policy):
                left = room_after(g.with_tenant(tenant_for(g, d, policy=policy)), policy)
                keys.append(((not g.tenants, left if 0 < left < smallest else 0.0, left), i))
        if keys:
            index = min(keys)[1]
            tenant = tenant_for(state[index], d, policy=policy)
            state[index] = state[index].with_tenant(tenant)
            out.append((d.job_id, index, tenant.grant))
    return out


@st.composite
def queues_of_few_shapes(draw):
    """A cluster, and a queue in which many shares have the same shape (as in a real queue), so that the placers'
    skipping by shape is exercised."""
    gpus, _, policy = draw(clusters())
    shapes = draw(
        st.lists(
            st.tuples(
                st.sampled_from([0.1, 0.25, 0.5, 0.6]),
                st.sampled_from([None, GIB, 20 * GIB]),
                st.sampled_from([OFFLINE, OFFLINE, ONLINE]),
                st.booleans(),
            ),
            min_size=1,
            max_size=3,
        )
    )
    picks = draw(st.lists(st.sampled_from(shapes), max_size=30))
    demands = [ShareDemand(j, f, c, gpu_memory_bytes=m, guaranteed=g) for j, (f, m, c, g) in enumerate(picks)]
    return gpus, demands, policy


@settings(max_examples=300, deadline=None)
@given(data=st.one_of(clusters(), queues_of_few_shapes()))
def test_first_fit_and_best_fit_place_as_the_plain_versions_do(data):
    """The placers skip shapes that fit nowhere and remember what each GPU would be left with; a placement only
    ever fills a GPU, so the skipping must never change a decision."""
    gpus, demands, policy = data
    for placer, plain in ((first_fit, _plain_first_fit), (best_fit, _plain_best_fit)):
        got = [(p.job_id, p.index, p.grant) for p in placer(gpus, demands, 0.0, policy).placements]
        assert got == plain(gpus, demands, policy), placer.__name__
