"""When each waiting share of a GPU should start (issue #17): the start forecast of :mod:`scheduling.core.forecast`,
for shares, which that forecast never sees (they are placed apart, on shared GPUs).

The play: at ``now`` and then at each expected end of a running share, in time order, the waiting shares are tried
in queue order, each on the first shared GPU the placement rule (:func:`scheduling.core.sharing.fits`) lets it
onto. A share that starts holds its room for its own expected run time, or for ever when that is unknown. The live
share round pairs shares by matching rather than in queue order, so a later share may start before an earlier one;
the forecast does not try to foresee that (it is what a user would guess from the queue).

What a share hears, as for whole-GPU jobs (:class:`~scheduling.core.forecast.StartOutlook`): an expected start, or
that the shares it waits on have no estimable end, that the expected start lies past ``horizon``, or that no shared
GPU could take it even empty (it waits for an admin to share a larger GPU).

Pure: ``now`` is an argument, no I/O.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping, Sequence

from scheduling.core.forecast import StartForecast, StartOutlook
from scheduling.core.model import JobId
from scheduling.core.sharing import (
    DEFAULT_POLICY,
    Shape,
    ShareDemand,
    SharedGpuState,
    SharingPolicy,
    fits,
    share_shape,
    tenant_for,
)


def forecast_share_starts(
    gpus: Sequence[SharedGpuState],
    waiting: Sequence[ShareDemand],
    *,
    ends: Mapping[JobId, float],
    runs: Mapping[JobId, float],
    now: float,
    horizon: float,
    policy: SharingPolicy = DEFAULT_POLICY,
) -> dict[JobId, StartForecast]:
    """Each waiting share's forecast (see the module). ``ends``: when each running share is expected to end
    (absolute; a share left out has no estimable end); ``runs``: how long each waiting share is expected to run
    once started (left out: unknown)."""
    states = list(gpus)
    where = {tenant.job_id: i for i, state in enumerate(states) for tenant in state.tenants}
    events = [(end, str(job_id), job_id) for job_id, end in ends.items() if job_id in where]
    heapq.heapify(events)
    result: dict[JobId, StartForecast] = {}
    could_ever: dict[Shape, bool] = {}
    for demand in waiting:
        if share_shape(demand) not in could_ever:
            could_ever[share_shape(demand)] = _fits_somewhere_empty(states, demand, policy)
    queue = [d for d in waiting if could_ever[share_shape(d)]]
    result.update(
        (d.job_id, StartForecast(StartOutlook.NO_CAPACITY)) for d in waiting if not could_ever[share_shape(d)]
    )
    shapes = Counter(share_shape(d) for d in queue)
    # After each try no waiting share fits any GPU, so the next try need only look at the GPUs that the shares
    # ending then have freed; and within a try, a shape that fits none of them fits none for the rest of the try.
    candidates: Sequence[int] = range(len(states))
    t = now
    while queue:
        if t - now > horizon:
            break
        hopeless: set[Shape] = set()
        started: set[JobId] = set()
        for demand in queue:
            if len(hopeless) == len(shapes):
                break  # every shape still waiting fits nowhere now
            shape = share_shape(demand)
            if shape in hopeless:
                continue
            index = next((i for i in candidates if fits(states[i], demand, policy)), None)
            if index is None:
                hopeless.add(shape)
                continue
            states[index] = states[index].with_tenant(tenant_for(states[index], demand, started=t, policy=policy))
            where[demand.job_id] = index
            started.add(demand.job_id)
            shapes[shape] -= 1
            if not shapes[shape]:
                del shapes[shape]
            result[demand.job_id] = StartForecast(StartOutlook.ESTIMATED, max(now, t))
            run = runs.get(demand.job_id)
            if run is not None:
                heapq.heappush(events, (t + max(0.0, run), str(demand.job_id), demand.job_id))
        if started:
            queue = [d for d in queue if d.job_id not in started]
        if not queue or not events:
            break
        t = events[0][0]
        freed: set[int] = set()
        while events and events[0][0] <= t:  # every share that ends at ``t`` leaves before the next try
            _, _, job_id = heapq.heappop(events)
            index = where.pop(job_id)
            states[index] = states[index].without([job_id])
            freed.add(index)
        candidates = sorted(freed)
    # Left waiting: past the horizon, or behind shares (or a whole-GPU job on a shared GPU) with no estimable end.
    outlook = StartOutlook.BEYOND_HORIZON if t - now > horizon else StartOutlook.UNKNOWN_END
    result.update((demand.job_id, StartForecast(outlook)) for demand in queue)
    return result


def _fits_somewhere_empty(states: Sequence[SharedGpuState], demand: ShareDemand, policy: SharingPolicy) -> bool:
    """Whether some shared GPU, with none of its shares and no whole-GPU holder, would take ``demand``."""
    return any(fits(SharedGpuState(gpu=state.gpu), demand, policy) for state in states)
