"""The NVML probe: the only code in Corral that talks to the NVIDIA driver.

It reads every field through :meth:`NvmlProbe._get`, which turns the ways a GPU says "I can't tell you that"
(``NVMLError_NotSupported`` on consumer cards, ``NoPermission`` without root, ``FunctionNotFound`` on old drivers,
a binding too old to have the function) into ``None``, and turns ``NVMLError_GpuIsLost`` into a sample with
``lost=True``. One unreadable field therefore never costs the whole sample, and a GPU that fell off the bus is
reported, not skipped.

The ``nvml`` argument is the ``pynvml`` module or anything with the same functions; tests pass a fake there and
nowhere else.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import time
from collections.abc import Callable
from typing import Any

from telemetry.sample import GpuInfo, GpuSample, XidEvent
from telemetry.xid import XID_FELL_OFF_BUS

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
#: Bound on events drained per call, so a GPU spamming XIDs cannot stall the agent's sampling loop.
MAX_EVENTS_PER_CALL = 256
#: NVML names for the throttle-reason call, newest first (renamed to "clocks event reasons" in driver 535).
_THROTTLE_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised on this host (no driver, no library, no permission)."""


class _GpuLost(Exception):
    """Internal: an NVML call said the GPU is lost; abandon this GPU's sample."""


class NvmlProbe:
    """Reads GPUs through NVML. ``clock`` stamps XID events, which NVML delivers without a time of its own."""

    def __init__(self, nvml: Any = None, *, clock: Callable[[], float] = time.time) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError as exc:
                raise NvmlUnavailable(f"pynvml is not importable: {exc}") from exc
        self._nvml = nvml
        self._clock = clock
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailable(f"nvmlInit failed: {exc}") from exc
        self._closed = False
        self._warned: set[tuple[str, str]] = set()
        self._handles: list[Any] = []
        self._inventory: list[GpuInfo] = []
        try:
            self._discover()
        except nvml.NVMLError as exc:
            self.close()
            raise NvmlUnavailable(f"listing GPUs failed: {exc}") from exc
        self._by_handle = {_handle_key(h): i for i, h in enumerate(self._handles)}
        self._last_xid: dict[str, int] = {}
        self._was_lost: set[int] = set()
        self._event_set = self._open_event_set()

    # -- GpuProbe -------------------------------------------------------------------------------------------------

    def inventory(self) -> list[GpuInfo]:
        return list(self._inventory)

    def sample(self, now: float) -> list[GpuSample]:
        return [self._sample_one(pos, now) for pos in range(len(self._handles))]

    def xid_events(self, timeout_ms: int = 0) -> list[XidEvent]:
        if self._event_set is None:
            return []
        nvml = self._nvml
        events: list[XidEvent] = []
        wait_ms = max(0, timeout_ms)
        for _ in range(MAX_EVENTS_PER_CALL):
            try:
                data = nvml.nvmlEventSetWait(self._event_set, wait_ms)
            except nvml.NVMLError_Timeout:
                break
            except nvml.NVMLError as exc:
                self._warn_once("nvmlEventSetWait", exc)
                break
            wait_ms = 0  # only the first wait may block; then drain what is queued
            if not int(data.eventType) & nvml.nvmlEventTypeXidCriticalError:
                continue
            uuid = self._uuid_of_event(data.device)
            if uuid is None:
                continue
            xid = int(data.eventData)
            events.append(XidEvent(gpu_uuid=uuid, xid=xid, timestamp=self._clock()))
            self._last_xid[uuid] = xid
        return events

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        nvml = self._nvml
        if getattr(self, "_event_set", None) is not None:
            try:
                nvml.nvmlEventSetFree(self._event_set)
            except nvml.NVMLError as exc:
                self._warn_once("nvmlEventSetFree", exc)
            self._event_set = None
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            self._warn_once("nvmlShutdown", exc)

    # -- discovery ------------------------------------------------------------------------------------------------

    def _discover(self) -> None:
        nvml = self._nvml
        for index in range(nvml.nvmlDeviceGetCount()):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                model = _text(nvml.nvmlDeviceGetName(handle))
                memory_mb = int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB
            except nvml.NVMLError_GpuIsLost:
                # Without a UUID the GPU cannot be named; the node's other GPUs are still worth reporting.
                log.warning("GPU %d is lost at start-up and is left out of the inventory", index)
                continue
            self._handles.append(handle)
            self._inventory.append(GpuInfo(index=index, uuid=uuid, model=model, memory_mb=memory_mb))

    def _open_event_set(self) -> Any:
        nvml = self._nvml
        xid_mask = nvml.nvmlEventTypeXidCriticalError
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self._warn_once("nvmlEventSetCreate", exc)
            return None
        registered = 0
        for handle, info in zip(self._handles, self._inventory, strict=True):
            try:
                if not nvml.nvmlDeviceGetSupportedEventTypes(handle) & xid_mask:
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, xid_mask, event_set)
                registered += 1
            except nvml.NVMLError as exc:
                log.warning("GPU %s: XID events unavailable (%s)", info.uuid, exc)
        if registered == 0:
            nvml.nvmlEventSetFree(event_set)
            return None
        return event_set

    # -- sampling -------------------------------------------------------------------------------------------------

    def _sample_one(self, pos: int, now: float) -> GpuSample:
        info = self._inventory[pos]
        try:
            sample = self._read(self._handles[pos], info, now)
        except _GpuLost:
            first_time = pos not in self._was_lost
            self._was_lost.add(pos)
            if first_time:
                log.error("GPU %s (index %d) has fallen off the bus", info.uuid, info.index)
            return GpuSample(gpu_uuid=info.uuid, index=info.index, timestamp=now, xid=XID_FELL_OFF_BUS, lost=True)
        self._was_lost.discard(pos)
        return sample

    def _read(self, handle: Any, info: GpuInfo, now: float) -> GpuSample:
        nvml = self._nvml
        util = self._get("nvmlDeviceGetUtilizationRates", handle)
        memory = self._get("nvmlDeviceGetMemoryInfo", handle)
        temperature = self._get("nvmlDeviceGetTemperature", handle, nvml.NVML_TEMPERATURE_GPU)
        power_mw = self._get("nvmlDeviceGetPowerUsage", handle)
        sm_clock = self._get("nvmlDeviceGetClockInfo", handle, nvml.NVML_CLOCK_SM)
        throttle = self._throttle_reasons(handle)
        corrected, uncorrected = nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        volatile, aggregate = nvml.NVML_VOLATILE_ECC, nvml.NVML_AGGREGATE_ECC
        sbe_volatile = self._get("nvmlDeviceGetTotalEccErrors", handle, corrected, volatile)
        dbe_volatile = self._get("nvmlDeviceGetTotalEccErrors", handle, uncorrected, volatile)
        sbe_total = self._get("nvmlDeviceGetTotalEccErrors", handle, corrected, aggregate)
        dbe_total = self._get("nvmlDeviceGetTotalEccErrors", handle, uncorrected, aggregate)
        remap = self._get("nvmlDeviceGetRemappedRows", handle)
        processes = self._get("nvmlDeviceGetComputeRunningProcesses", handle) or []
        return GpuSample(
            gpu_uuid=info.uuid,
            index=info.index,
            timestamp=now,
            gpu_util=None if util is None else float(util.gpu),
            mem_used_mb=None if memory is None else int(memory.used) // _MIB,
            mem_total_mb=None if memory is None else int(memory.total) // _MIB,
            temperature_c=None if temperature is None else float(temperature),
            power_w=None if power_mw is None else power_mw / 1000.0,
            sm_clock_mhz=None if sm_clock is None else int(sm_clock),
            throttle_reasons=None if throttle is None else int(throttle),
            ecc_sbe_volatile=_opt_int(sbe_volatile),
            ecc_dbe_volatile=_opt_int(dbe_volatile),
            ecc_corrected_total=_opt_int(sbe_total),
            ecc_uncorrected_total=_opt_int(dbe_total),
            retired_pages=self._retired_pages(handle),
            remapped_rows=None if remap is None else int(remap[0]) + int(remap[1]),
            remapped_rows_pending=None if remap is None else bool(remap[2]),
            remapped_rows_failed=None if remap is None else bool(remap[3]),
            pcie_replay=_opt_int(self._get("nvmlDeviceGetPcieReplayCounter", handle)),
            xid=self._last_xid.pop(info.uuid, 0),
            processes=tuple((int(p.pid), int(p.usedGpuMemory or 0) // _MIB) for p in processes),
        )

    def _throttle_reasons(self, handle: Any) -> int | None:
        for name in _THROTTLE_CALLS:
            if hasattr(self._nvml, name):
                reasons: int | None = self._get(name, handle)  # a bit mask; NVML's binding is untyped
                return reasons
        return None

    def _retired_pages(self, handle: Any) -> int | None:
        nvml = self._nvml
        causes = (
            nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
            nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
        )
        lists = [self._get("nvmlDeviceGetRetiredPages", handle, cause) for cause in causes]
        if all(pages is None for pages in lists):
            return None  # Ampere and later remap rows instead of retiring pages
        return sum(len(pages) for pages in lists if pages is not None)

    def _get(self, name: str, *args: Any) -> Any:
        """Call one NVML function; ``None`` when the GPU, driver or binding cannot answer, ``_GpuLost`` when the
        GPU is gone."""
        nvml = self._nvml
        fn = getattr(nvml, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except nvml.NVMLError_GpuIsLost as exc:
            raise _GpuLost from exc
        except nvml.NVMLError as exc:
            if not isinstance(exc, nvml.NVMLError_NotSupported):
                self._warn_once(name, exc)
            return None

    def _uuid_of_event(self, device: Any) -> str | None:
        pos = self._by_handle.get(_handle_key(device))
        if pos is not None:
            return self._inventory[pos].uuid
        try:
            return _text(self._nvml.nvmlDeviceGetUUID(device))
        except self._nvml.NVMLError as exc:
            self._warn_once("nvmlDeviceGetUUID(event)", exc)
            return None

    def _warn_once(self, what: str, exc: Exception) -> None:
        key = (what, type(exc).__name__)
        if key not in self._warned:
            self._warned.add(key)
            log.warning("NVML %s failed: %s (further failures of this kind are not logged)", what, exc)


def _handle_key(handle: Any) -> Any:
    """A hashable identity for a device handle. Real handles are ctypes pointers, whose ``==`` compares the Python
    objects rather than the address, so compare addresses; fakes use plain hashable values."""
    try:
        return ("addr", ctypes.cast(handle, ctypes.c_void_p).value)
    except (TypeError, ctypes.ArgumentError):
        return ("obj", handle)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)
