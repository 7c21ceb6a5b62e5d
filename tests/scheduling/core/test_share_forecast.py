"""When waiting shares of a GPU should start: at the expected ends of the shares ahead of them. Ref: #17"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


def _forecast_by_trying_everything(gpus, waiting, *, ends, runs, now, horizon):  # noqa: ANN001, ANN202
    """The forecast's play written the plain way: at every try, every waiting share against every GPU. The real one
    skips what cannot have changed; both must say the same."""
    import heapq

    from scheduling.core.forecast import StartForecast
    from scheduling.core.sharing import fits, tenant_for

    states = list(gpus)
    where = {t.job_id: i for i, s in enumerate(states) for t in s.tenants}
    events = [(end, str(j), j) for j, end in ends.items() if j in where]
    heapq.heapify(events)
    never = {d.job_id for d in waiting if not any(fits(SharedGpuState(gpu=s.gpu), d) for s in states)}
    result = {j: StartForecast(StartOutlook.NO_CAPACITY) for j in never}
    queue, t = [d for d in waiting if d.job_id not in never], now
    while queue and t - now <= horizon:
        left = []
        for d in queue:
            index = next((i for i, s in enumerate(states) if fits(s, d)), None)
            if index is None:
                left.append(d)
                continue
            states[index] = states[index].with_tenant(tenant_for(states[index], d, started=t))
            where[d.job_id] = index
            result[d.job_id] = StartForecast(StartOutlook.ESTIMATED, max(now, t))
            if d.job_id in runs:
                heapq.heappush(events, (t + runs[d.job_id], str(d.job_id), d.job_id))
        queue = left
        if not queue or not events:
            break
        t = events[0][0]
        while events and events[0][0] <= t:
            _, _, j = heapq.heappop(events)
            index = where.pop(j)
            states[index] = states[index].without([j])
    outlook = StartOutlook.BEYOND_HORIZON if t - now > horizon else StartOutlook.UNKNOWN_END
    result.update((d.job_id, StartForecast(outlook)) for d in queue)
    return result


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_the_forecast_says_what_trying_every_share_on_every_gpu_says(data: st.DataObject) -> None:
    sizes = st.sampled_from([0.1, 0.25, 0.5, 0.75])  # few shapes, as in a real queue: the skipping is exercised
    gpus, ends, job = [], {}, 100
    for i in range(data.draw(st.integers(1, 4))):
        tenants = []
        for _ in range(data.draw(st.integers(0, 2))):
            fraction = data.draw(sizes)
            if sum(t.fraction for t in tenants) + fraction <= 1:
                tenants.append(_running(job, fraction, 8))
                if data.draw(st.booleans()):
                    ends[job] = NOW + data.draw(st.integers(0, 5)) * 100.0
                job += 1
        gpus.append(
            SharedGpuState(gpu=SharedGpu("n", i, data.draw(st.sampled_from([16, 40])) * GIB), tenants=tuple(tenants))
        )
    waiting = [
        _wants(j, data.draw(sizes), data.draw(st.sampled_from([4, 8, 20])))
        for j in range(data.draw(st.integers(0, 12)))
    ]
    runs = {d.job_id: data.draw(st.integers(1, 4)) * 100.0 for d in waiting if data.draw(st.booleans())}
    horizon = data.draw(st.sampled_from([250.0, 86_400.0]))
    args = {"ends": ends, "runs": runs, "now": NOW, "horizon": horizon}
    assert forecast_share_starts(gpus, waiting, **args) == _forecast_by_trying_everything(gpus, waiting, **args)
