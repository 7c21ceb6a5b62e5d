"""The figures a sharing replay is judged by (issue #17), from :class:`scheduling.sim.sharing.ShareSimResult`.

- ``allocation``: the part of the cluster's GPUs held by at least one task, averaged over the replay.
- ``utilization``: the part of the cluster's compute kept busy (each GPU's busy part, at most 1), averaged;
  ``utilization_allocated``: the same over the GPUs that are held only (what MuxFlow's 26 % → 76 % measures).
- ``fragmented_gpus``: GPUs holding shares whose room for more offline work is above 0 but below the replay's
  median share (no typical task could use it), averaged over time.
- offline JCT and queueing (mean, median, 95th percentile); online tasks' slowdown (mean over tasks of each one's
  time-averaged slowdown, and the worst moment of any); evictions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from scheduling.core.sharing import WorkloadClass
from scheduling.sim.sharing import ShareSimResult


@dataclass(frozen=True, slots=True)
class ShareMetrics:
    mode: str
    tasks: int
    allocation: float
    utilization: float
    utilization_allocated: float
    fragmented_gpus: float
    offline_jct_mean: float
    offline_jct_p50: float
    offline_jct_p95: float
    offline_queue_mean: float
    online_queue_mean: float
    online_slowdown_mean: float
    online_slowdown_p99: float
    online_slowdown_max: float
    evictions: int
    evicted_tasks: int
    span: float

    def summary(self) -> dict[str, float | int | str]:
        return asdict(self)


def measure_sharing(result: ShareSimResult) -> ShareMetrics:
    recs = result.records
    offline = [r for r in recs if r.workload_class == WorkloadClass.OFFLINE]
    online = [r for r in recs if r.workload_class == WorkloadClass.ONLINE]
    jct = np.array([r.jct for r in offline]) if offline else np.zeros(1)
    capacity = result.gpus * result.span if result.span > 0 else 1.0
    slow = np.array([r.mean_slowdown for r in online]) if online else np.zeros(1)
    return ShareMetrics(
        mode=result.mode,
        tasks=len(recs),
        allocation=result.allocated_gpu_seconds / capacity,
        utilization=result.busy_gpu_seconds / capacity,
        utilization_allocated=result.busy_gpu_seconds / max(result.allocated_gpu_seconds, 1e-9),
        fragmented_gpus=result.fragmented_gpu_seconds / result.span if result.span > 0 else 0.0,
        offline_jct_mean=float(jct.mean()),
        offline_jct_p50=float(np.percentile(jct, 50)),
        offline_jct_p95=float(np.percentile(jct, 95)),
        offline_queue_mean=float(np.mean([r.queueing for r in offline])) if offline else 0.0,
        online_queue_mean=float(np.mean([r.queueing for r in online])) if online else 0.0,
        online_slowdown_mean=float(slow.mean()),
        online_slowdown_p99=float(np.percentile(slow, 99)),
        online_slowdown_max=max((r.max_slowdown for r in online), default=0.0),
        evictions=result.evictions,
        evicted_tasks=sum(1 for r in recs if r.evictions),
        span=result.span,
    )
