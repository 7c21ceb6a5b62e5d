"""The sharing rule (issue #17): one test per rule, the dynamic SM allocation, evictions and the interference fit."""

from __future__ import annotations

import pytest

from scheduling.core.interference import H100, H100_FULL_TFLOPS, H100_MEASUREMENTS, InterferenceModel, fit
from scheduling.core.sharing import (
    GIB,
    MIB,
    ShareDemand,
    SharedGpu,
    SharedGpuState,
    ShareRefusal,
    SharingPolicy,
    WorkloadClass,
    evictions_for_load,
    fits,
    free_for_whole,
    grant_for,
    memory_limit,
    offline_room,
    tenant_for,
    violations,
    why_not,
)

ONLINE, OFFLINE = WorkloadClass.ONLINE, WorkloadClass.OFFLINE
#: No slowdown budget binding: the compute rules alone (the budget has its own tests).
LOOSE = SharingPolicy(slowdown_budget=1.0, headroom=0.0)


def gpu(memory_gib: int = 80, **kw) -> SharedGpuState:
    return SharedGpuState(gpu=SharedGpu("n1", 0, memory_gib * GIB, **kw))


def share(job_id: int, fraction: float, cls: WorkloadClass = OFFLINE, **kw) -> ShareDemand:
    """A share with a small memory limit, so that only the test about memory is about memory."""
    kw.setdefault("gpu_memory_bytes", GIB)
    return ShareDemand(job_id=job_id, gpu_fraction=fraction, workload_class=cls, **kw)


def with_(state: SharedGpuState, *demands: ShareDemand, policy: SharingPolicy = LOOSE) -> SharedGpuState:
    for d in demands:
        assert fits(state, d, policy), why_not(state, d, policy)
        state = state.with_tenant(tenant_for(state, d, policy=policy))
    return state


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.5, 1.5, float("nan")])
def test_a_share_is_strictly_between_zero_and_one_gpu(bad):
    with pytest.raises(ValueError, match="gpu_fraction"):
        share(1, bad)


def test_default_memory_is_the_same_fraction_of_what_the_reserve_leaves():
    g = SharedGpu("n1", 0, 17 * GIB)  # 1 GiB reserve: 16 GiB usable
    assert memory_limit(share(1, 0.25, gpu_memory_bytes=None), g) == 4 * GIB
    assert memory_limit(share(1, 0.25, gpu_memory_bytes=512 * MIB), g) == 512 * MIB


def test_no_share_on_a_gpu_that_does_not_take_shares():
    assert why_not(gpu(sharing=False), share(1, 0.2)) == ShareRefusal.SHARING_OFF


def test_no_share_on_a_gpu_a_whole_gpu_job_holds_and_no_whole_job_on_a_shared_one():
    held = SharedGpuState(gpu=SharedGpu("n1", 0, 80 * GIB), whole_holder="big")
    assert why_not(held, share(1, 0.2)) == ShareRefusal.WHOLE_GPU_HELD
    assert not free_for_whole(held)
    assert free_for_whole(gpu())
    assert not free_for_whole(with_(gpu(), share(1, 0.2)))


def test_client_count_is_capped_by_the_admins_limit():
    state = with_(gpu(max_clients=2), share(1, 0.1), share(2, 0.1))
    assert why_not(state, share(3, 0.1), LOOSE) == ShareRefusal.TOO_MANY_CLIENTS


def test_memory_follows_the_ask_not_the_squeezed_grant():
    state = with_(gpu(17), share(1, 0.7, gpu_memory_bytes=None))  # 0.7 of 16 GiB
    assert why_not(state, share(2, 0.5, gpu_memory_bytes=None), LOOSE) == ShareRefusal.NO_MEMORY


def test_memory_limits_plus_reserve_never_exceed_the_gpu():
    state = with_(gpu(17), share(1, 0.2, gpu_memory_bytes=12 * GIB))  # 16 GiB usable after the reserve
    assert why_not(state, share(2, 0.2, gpu_memory_bytes=5 * GIB), LOOSE) == ShareRefusal.NO_MEMORY
    assert fits(state, share(2, 0.2, gpu_memory_bytes=4 * GIB), LOOSE)


def test_at_most_one_online_job_per_gpu():
    state = with_(gpu(), share(1, 0.3, ONLINE))
    assert why_not(state, share(2, 0.3, ONLINE), LOOSE) == ShareRefusal.ONLINE_TAKEN


def test_guaranteed_compute_never_exceeds_the_gpu():
    state = with_(gpu(), share(1, 0.6, ONLINE), share(2, 0.3, guaranteed=True))
    assert why_not(state, share(3, 0.2, guaranteed=True), LOOSE) == ShareRefusal.NO_GUARANTEED_COMPUTE
    assert fits(state, share(3, 0.1, guaranteed=True), LOOSE)


def test_best_effort_work_is_squeezed_to_the_room_but_not_below_its_floor():
    state = with_(gpu(), share(1, 0.7))
    assert grant_for(state, share(2, 0.5), LOOSE) == pytest.approx(0.3)  # asked 0.5, 0.3 is left
    assert fits(state, share(2, 0.5), LOOSE)  # 0.3 >= half of 0.5
    assert why_not(state, share(2, 0.8), LOOSE) == ShareRefusal.NO_COMPUTE  # 0.3 < half of 0.8


def test_offline_next_to_online_is_held_to_the_slowdown_budget():
    policy = SharingPolicy(slowdown_budget=0.05, headroom=0.0)
    state = with_(gpu(), share(1, 0.3, ONLINE), policy=policy)
    cap = H100.max_neighbour_load(0.05)  # about 0.175 on the H100 fit
    assert offline_room(state, policy) == pytest.approx(cap)
    assert why_not(state, share(2, 0.4), policy) == ShareRefusal.NO_COMPUTE  # 0.175 < half of 0.4
    assert fits(state, share(2, 0.3), policy)  # squeezed to 0.17
    placed = with_(state, share(2, 0.3), policy=policy)
    assert placed.tenants[-1].grant <= cap
    assert H100.slowdown(sum(t.grant for t in placed.tenants if not t.is_online)) <= 0.05


def test_an_online_share_never_needs_an_eviction_to_start():
    state = with_(gpu(), share(1, 0.6))
    assert why_not(state, share(2, 0.5, ONLINE), LOOSE) == ShareRefusal.NO_COMPUTE
    assert fits(state, share(2, 0.4, ONLINE), LOOSE)


def test_dynamic_sm_allocation_follows_the_online_load():
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.1)
    online = with_(gpu(), share(1, 0.8, ONLINE), policy=policy)
    quiet = SharedGpuState(online.gpu, online.tenants, online_load=0.3)
    busy = SharedGpuState(online.gpu, online.tenants, online_load=0.6)
    assert offline_room(online, policy) == pytest.approx(0.2)  # unmeasured: its whole share is held
    assert offline_room(quiet, policy) == pytest.approx(0.6)  # 1 - (0.3 + 0.1 headroom)
    assert offline_room(busy, policy) == pytest.approx(0.3)
    assert grant_for(quiet, share(2, 0.5), policy) == pytest.approx(0.5)
    assert grant_for(busy, share(2, 0.5), policy) == pytest.approx(0.3)


def test_a_rising_online_load_evicts_the_newest_offline_clients_first_and_never_guaranteed_ones():
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.0)
    base = with_(gpu(), share(1, 0.8, ONLINE), policy=policy)
    state = SharedGpuState(base.gpu, base.tenants, online_load=0.2)
    for job, fraction, started, guaranteed in ((2, 0.2, 1.0, True), (3, 0.3, 2.0, False), (4, 0.2, 3.0, False)):
        d = share(job, fraction, guaranteed=guaranteed)
        assert fits(state, d, policy)
        state = state.with_tenant(tenant_for(state, d, started=started, policy=policy))
    assert evictions_for_load(state, 0.2, policy) == ()
    assert evictions_for_load(state, 0.4, policy) == (4,)  # room 0.6 for 0.7 in use: the newest goes
    assert evictions_for_load(state, 0.7, policy) == (4, 3)
    assert evictions_for_load(state, 0.8, policy) == (4, 3)  # the guaranteed 0.2 stays: its share is reserved
    after = state.without(evictions_for_load(state, 0.7, policy))
    assert violations(SharedGpuState(after.gpu, after.tenants, online_load=0.7), policy) == []


def test_thread_percentage_is_the_grant_in_whole_percent():
    state = with_(gpu(), share(1, 0.7))
    t = tenant_for(state, share(2, 0.55), policy=LOOSE)
    assert t.grant == pytest.approx(0.3) and t.thread_percentage == 30


def test_the_interference_fit_reproduces_the_h100_measurements_within_one_percent():
    for m in H100_MEASUREMENTS:
        predicted = H100.speed(m.share, m.neighbour_load) * H100_FULL_TFLOPS
        assert predicted == pytest.approx(m.throughput, rel=0.01)
    assert H100.alone_exponent == pytest.approx(0.835, abs=0.005)
    assert H100.contention == pytest.approx(0.285, abs=0.005)
    assert H100.alone(1.0) == 1.0 and H100.factor(0.0) == 1.0


def test_the_fit_needs_both_kinds_of_measurement():
    with pytest.raises(ValueError, match="at least one"):
        fit(656.0, H100_MEASUREMENTS[:1])
    with pytest.raises(ValueError):
        InterferenceModel(alone_exponent=0.8, contention=1.5)
