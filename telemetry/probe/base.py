"""The one interface the node agent uses to read GPUs.

Two implementations exist: :class:`telemetry.probe.nvml.NvmlProbe` (the only code in Corral that talks to NVML) and
:class:`telemetry.probe.simulated.SimulatedProbe` (demo and CI, with fault injection). The agent owns the clock and
passes ``now`` into :meth:`GpuProbe.sample`, so a probe never reads time on its own and a test can replay any
sequence of instants.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from telemetry.sample import GpuInfo, GpuSample, XidEvent


@runtime_checkable
class GpuProbe(Protocol):
    def inventory(self) -> list[GpuInfo]:
        """The GPUs on this node, in index order. Stable for the probe's lifetime, lost GPUs included."""
        ...

    def sample(self, now: float) -> list[GpuSample]:
        """One sample per GPU in inventory order, stamped ``now``. A GPU that fell off the bus yields a sample with
        ``lost=True`` rather than disappearing, so the control plane sees the loss."""
        ...

    def xid_events(self, timeout_ms: int = 0) -> list[XidEvent]:
        """XIDs reported since the last call. Waits at most ``timeout_ms`` for the first one; never raises for
        "no events"."""
        ...

    def close(self) -> None:
        """Release driver resources. Safe to call twice."""
        ...
