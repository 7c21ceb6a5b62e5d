"""The sharing replay of a what-if run (issue #17): what ``corral history | corral simulate --sharing on`` does,
for ``whatif_execute``. Apart from ``services`` so that module stays about asking for and settling runs."""

from __future__ import annotations

from typing import Any

from portal.jobs.selectors import job_history_rows
from portal.whatif.models import WhatIfRun
from scheduling.core.sharing import GIB, SharedGpu, WorkloadClass
from scheduling.sim.share_metrics import measure_sharing
from scheduling.sim.share_trace import ShareTask
from scheduling.sim.sharing import simulate_sharing

#: The memory of each GPU of a uniform count of shared GPUs, as ``corral simulate --sharing on`` takes it.
UNIFORM_SHARED_GPU_MEMORY = 80 * GIB


class SharedGpuError(ValueError):
    """A run's stored copy of the live shared GPUs that cannot be read back (no form writes one)."""


def share_replay(run: WhatIfRun) -> dict[str, Any]:
    """The sharing replay of ``run``'s window (issue #17), as ``corral simulate --sharing on`` replays a trace:
    first a GPU each (the whole-GPU baseline), then with shares under each placer. Only the window's shares are
    replayed, as on the live cluster, where whole-GPU jobs never run on a shared GPU (``corral simulate`` on the
    export also takes its whole one-GPU jobs). ``modes`` is empty when no job of the window asked for a share."""
    tasks = [
        ShareTask(
            task_id=job.job_id,
            submit_time=job.submit_time,
            duration=max(1.0, job.duration),  # a job that held its GPU for no time still passes through
            gpu_fraction=fraction,
            workload_class=WorkloadClass(klass),
        )
        for job, fraction, klass in job_history_rows(since=run.since, until=run.until)
        if fraction is not None
    ]
    summary: dict[str, Any] = {"gpus": run.shared_gpus, "shares": len(tasks), "modes": []}
    if not tasks:
        return summary
    gpus = shared_gpus(run)
    modes = [measure_sharing(simulate_sharing(tasks, gpus, sharing=False))]
    modes += [measure_sharing(simulate_sharing(tasks, gpus, placer=name)) for name in run.share_placers]
    summary["modes"] = [m.summary() for m in modes]
    return summary


def shared_gpus(run: WhatIfRun) -> list[SharedGpu]:
    """The shared GPUs ``run`` replays on: its copy of the live ones, else its uniform count of 80 GiB GPUs (eight
    to a node, as names only: a share never spans GPUs)."""
    try:
        if run.shared_layout:
            return [
                SharedGpu(node=str(node), gpu=int(index), memory_bytes=int(memory), max_clients=int(clients))
                for node, index, memory, clients in run.shared_layout
            ]
    except (TypeError, ValueError) as exc:
        raise SharedGpuError(str(exc)) from None
    count = run.shared_gpus or 0
    return [SharedGpu(f"shared{k // 8}", k % 8, UNIFORM_SHARED_GPU_MEMORY) for k in range(count)]
