"""A stand-in for the ``pynvml`` module, used only at the NvmlProbe boundary.

It implements exactly the NVML functions the probe calls, with the same argument order and return shapes, and
raises the real ``pynvml`` exception classes, so the probe's error handling is exercised as it will run against a
driver. Constants and exception classes come from the installed ``pynvml``; any other attribute is missing, which
also lets a test remove a function to imitate an older binding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024 * 1024


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    total_mb: int = 81_559
    used_mb: int = 1_024
    util: int = 50
    temperature: int = 55
    power_mw: int = 300_000
    sm_clock: int = 1_980
    throttle: int = 0
    sbe_volatile: int = 0
    dbe_volatile: int = 0
    sbe_aggregate: int = 3
    dbe_aggregate: int = 0
    retired_sbe: list[int] = field(default_factory=list)
    retired_dbe: list[int] = field(default_factory=list)
    remapped: tuple[int, int, bool, bool] = (0, 0, False, False)
    pcie_replay: int = 0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes or None)
    supported_events: int = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
    unsupported: set[str] = field(default_factory=set)  # function names that raise NVMLError_NotSupported
    lost: bool = False


class FakeNvml:
    """``FakeNvml(gpus)`` behaves like an imported ``pynvml`` on a node with those GPUs."""

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None, missing: tuple[str, ...] = ()) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialised = False
        self.shutdowns = 0
        self.event_sets: dict[int, list[int]] = {}  # event set id -> registered GPU indices
        self.freed: list[int] = []
        self.queued: list[tuple[Any, int, int]] = []  # (device handle, event type, event data)
        self.calls: list[str] = []
        self._missing = set(missing)

    def __getattr__(self, name: str) -> Any:
        # Only reached for names not defined on the class: constants and exception classes from the real module.
        if name in self.__dict__.get("_missing", ()):
            raise AttributeError(name)
        value = getattr(pynvml, name)
        if callable(value) and not isinstance(value, type):
            raise AttributeError(f"fake NVML does not implement {name}")
        return value

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and name in object.__getattribute__(self, "_missing"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # -- helpers --------------------------------------------------------------------------------------------------

    def queue_xid(self, index: int, xid: int) -> None:
        self.queued.append((index, pynvml.nvmlEventTypeXidCriticalError, xid))

    def _gpu(self, handle: int, fn: str) -> FakeGpu:
        self.calls.append(fn)
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        gpu = self.gpus[handle]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    # -- the pynvml functions NvmlProbe calls -----------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        if self.gpus[index].lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: int) -> str:
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> Any:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        total, used = gpu.total_mb * MIB, gpu.used_mb * MIB
        return SimpleNamespace(total=total, used=used, free=total - used)

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> Any:
        return SimpleNamespace(gpu=self._gpu(handle, "nvmlDeviceGetUtilizationRates").util, memory=10)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._gpu(handle, "nvmlDeviceGetTemperature").temperature

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetClockInfo(self, handle: int, clock_type: int) -> int:
        assert clock_type == pynvml.NVML_CLOCK_SM
        return self._gpu(handle, "nvmlDeviceGetClockInfo").sm_clock

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").throttle

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").throttle

    def nvmlDeviceGetTotalEccErrors(self, handle: int, error_type: int, counter_type: int) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        corrected = error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
        if counter_type == pynvml.NVML_VOLATILE_ECC:
            return gpu.sbe_volatile if corrected else gpu.dbe_volatile
        assert counter_type == pynvml.NVML_AGGREGATE_ECC
        return gpu.sbe_aggregate if corrected else gpu.dbe_aggregate

    def nvmlDeviceGetRetiredPages(self, handle: int, cause: int) -> list[int]:
        gpu = self._gpu(handle, "nvmlDeviceGetRetiredPages")
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            return list(gpu.retired_sbe)
        return list(gpu.retired_dbe)

    def nvmlDeviceGetRemappedRows(self, handle: int) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._gpu(handle, "nvmlDeviceGetRemappedRows").remapped
        return corr, unc, int(pending), int(failure)

    def nvmlDeviceGetPcieReplayCounter(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replay

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        gpu = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in gpu.processes]

    def nvmlEventSetCreate(self) -> int:
        set_id = len(self.event_sets) + 100
        self.event_sets[set_id] = []
        return set_id

    def nvmlDeviceGetSupportedEventTypes(self, handle: int) -> int:
        return self._gpu(handle, "nvmlDeviceGetSupportedEventTypes").supported_events

    def nvmlDeviceRegisterEvents(self, handle: int, event_types: int, event_set: int) -> None:
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if event_types & ~gpu.supported_events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        self.event_sets[event_set].append(handle)

    def nvmlEventSetWait(self, event_set: int, timeout_ms: int) -> Any:
        registered = self.event_sets[event_set]
        while self.queued:
            handle, event_type, data = self.queued.pop(0)
            if handle in registered:
                return SimpleNamespace(
                    device=handle, eventType=event_type, eventData=data, gpuInstanceId=0, computeInstanceId=0
                )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: int) -> None:
        self.freed.append(event_set)
