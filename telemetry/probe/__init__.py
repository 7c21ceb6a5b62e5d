"""GPU probes: the agent calls :func:`open_probe` and then only the :class:`GpuProbe` methods."""

from __future__ import annotations

import logging
from typing import Any

from telemetry.probe.base import GpuProbe
from telemetry.probe.simulated import SimulatedProbe

__all__ = ["GpuProbe", "SimulatedProbe", "open_probe"]

log = logging.getLogger(__name__)

DEFAULT_FAKE_GPUS = 4


def open_probe(fake_gpus: int | None = None, *, seed: int = 0, nvml: Any = None) -> GpuProbe:
    """NVML when ``fake_gpus`` is None and NVML initialises and finds at least one GPU; otherwise a simulated probe
    with ``fake_gpus`` (default 4) GPUs.

    Falling back is logged at WARNING: on a real GPU node a missing driver would otherwise show up in the portal
    as four perfectly healthy fake GPUs. ``nvml`` replaces the ``pynvml`` module (tests pass a fake).
    """
    if fake_gpus is not None:
        if fake_gpus < 1:
            raise ValueError("fake_gpus must be at least 1")
        return SimulatedProbe(fake_gpus, seed=seed)
    from telemetry.probe.nvml import NvmlProbe, NvmlUnavailable

    try:
        probe = NvmlProbe(nvml)
    except NvmlUnavailable as exc:
        log.warning("NVML unavailable (%s); using %d simulated GPUs", exc, DEFAULT_FAKE_GPUS)
    else:
        if probe.inventory():
            return probe
        probe.close()
        log.warning("NVML found no GPUs; using %d simulated GPUs", DEFAULT_FAKE_GPUS)
    return SimulatedProbe(DEFAULT_FAKE_GPUS, seed=seed)
