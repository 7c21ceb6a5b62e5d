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
from collections.abc import Mapping, Sequence

from scheduling.core.forecast import StartForecast, StartOutlook
from scheduling.core.model import JobId
from scheduling.core.sharing import DEFAULT_POLICY, ShareDemand, SharedGpuState, SharingPolicy, fits, tenant_for


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
    queue = [d for d in waiting if _fits_somewhere_empty(states, d, policy)]
    result.update((d.job_id, StartForecast(StartOutlook.NO_CAPACITY)) for d in waiting if d not in queue)
    t = now
    while queue:
        if t - now > horizon:
            break
        left: list[ShareDemand] = []
        for demand in queue:
            index = next((i for i, state in enumerate(states) if fits(state, demand, policy)), None)
            if index is None:
                left.append(demand)
                continue
            states[index] = states[index].with_tenant(tenant_for(states[index], demand, started=t, policy=policy))
            where[demand.job_id] = index
            result[demand.job_id] = StartForecast(StartOutlook.ESTIMATED, max(now, t))
            run = runs.get(demand.job_id)
            if run is not None:
                heapq.heappush(events, (t + max(0.0, run), str(demand.job_id), demand.job_id))
        queue = left
        if not queue or not events:
            break
        t = events[0][0]
        while events and events[0][0] <= t:  # every share that ends at ``t`` leaves before the next try
            _, _, job_id = heapq.heappop(events)
            index = where.pop(job_id)
            states[index] = states[index].without([job_id])
    # Left waiting: past the horizon, or behind shares (or a whole-GPU job on a shared GPU) with no estimable end.
    outlook = StartOutlook.BEYOND_HORIZON if t - now > horizon else StartOutlook.UNKNOWN_END
    result.update((demand.job_id, StartForecast(outlook)) for demand in queue)
    return result


def _fits_somewhere_empty(states: Sequence[SharedGpuState], demand: ShareDemand, policy: SharingPolicy) -> bool:
    """Whether some shared GPU, with none of its shares and no whole-GPU holder, would take ``demand``."""
    return any(fits(SharedGpuState(gpu=state.gpu), demand, policy) for state in states)
