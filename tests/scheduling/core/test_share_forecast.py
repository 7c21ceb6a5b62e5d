"""When waiting shares of a GPU should start: at the expected ends of the shares ahead of them. Ref: #17"""

from __future__ import annotations

from scheduling.core.forecast import StartOutlook
from scheduling.core.share_forecast import forecast_share_starts
from scheduling.core.sharing import ShareDemand, SharedGpu, SharedGpuState, ShareTenant, WorkloadClass

GIB = 1 << 30
NOW = 1_000.0
GPU = SharedGpu(node="n1", gpu=1, memory_bytes=40 * GIB)


def _running(job_id: int, fraction: float, memory_gib: float) -> ShareTenant:
    return ShareTenant(job_id, WorkloadClass.OFFLINE, fraction, fraction, int(memory_gib * GIB), started=0.0)


def _wants(job_id: int, fraction: float, memory_gib: float) -> ShareDemand:
    return ShareDemand(job_id, fraction, gpu_memory_bytes=int(memory_gib * GIB))


def test_a_share_that_fits_now_starts_now_and_one_that_does_not_waits_for_the_end_ahead_of_it() -> None:
    state = SharedGpuState(gpu=GPU, tenants=(_running(1, 0.5, 30),))
    small, big = _wants(2, 0.25, 5), _wants(3, 0.5, 20)
    got = forecast_share_starts([state], [small, big], ends={1: NOW + 600}, runs={}, now=NOW, horizon=86_400)
    assert got[2].outlook == StartOutlook.ESTIMATED and got[2].at == NOW
    assert got[3].outlook == StartOutlook.ESTIMATED and got[3].at == NOW + 600


def test_a_share_started_in_the_forecast_holds_its_room_for_its_own_run_time() -> None:
    state = SharedGpuState(gpu=GPU, tenants=(_running(1, 0.5, 30),))
    first, second = _wants(2, 0.5, 30), _wants(3, 0.5, 30)
    got = forecast_share_starts([state], [first, second], ends={1: NOW + 100}, runs={2: 300.0}, now=NOW, horizon=86_400)
    assert (got[2].at, got[3].at) == (NOW + 100, NOW + 400)


def test_waiting_on_a_share_with_no_estimable_end_says_so() -> None:
    state = SharedGpuState(gpu=GPU, tenants=(_running(1, 0.5, 30),))
    got = forecast_share_starts([state], [_wants(2, 0.5, 30)], ends={}, runs={}, now=NOW, horizon=86_400)
    assert got[2].outlook == StartOutlook.UNKNOWN_END and got[2].at is None


def test_past_the_horizon_and_too_big_for_any_gpu() -> None:
    state = SharedGpuState(gpu=GPU, tenants=(_running(1, 0.5, 30),))
    late = forecast_share_starts([state], [_wants(2, 0.5, 30)], ends={1: NOW + 10_000}, runs={}, now=NOW, horizon=60)
    assert late[2].outlook == StartOutlook.BEYOND_HORIZON
    huge = forecast_share_starts([state], [_wants(3, 0.5, 80)], ends={1: NOW + 10}, runs={}, now=NOW, horizon=60)
    assert huge[3].outlook == StartOutlook.NO_CAPACITY
