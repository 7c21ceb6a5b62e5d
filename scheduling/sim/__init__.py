"""The trace-driven simulator: replays a job trace through the scheduling core under any policy and placement.

``simulate(trace, policy, cluster=Cluster(nodes, gpus_per_node))`` returns every job's outcome;
``metrics.measure`` turns it into the numbers ``corral simulate`` prints. See docs/scheduling.md.
"""

from __future__ import annotations

from scheduling.sim.simulator import Cluster, JobOutcome, SimResult, simulate
from scheduling.sim.trace import TraceJob, read_trace

__all__ = ["Cluster", "JobOutcome", "SimResult", "TraceJob", "read_trace", "simulate"]
