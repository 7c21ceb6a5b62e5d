"""A probe with no hardware behind it, for the demo, CI and development laptops.

Readings are a deterministic function of ``(seed, gpu index, now)`` plus whatever the caller changed (busy flags,
injected faults), so two runs with the same seed and the same calls produce the same samples regardless of how
often ``sample`` is called. Values follow the shape of an 80 GB H100: utilisation and power rise when the caller
marks a GPU busy, temperature follows power, the SM clock drops when hot, and memory health is reported as row
remapping (Hopper has no page retirement, so ``retired_pages`` is ``None`` as NVML would report).

Faults (:data:`Fault`) are injected with :meth:`SimulatedProbe.inject` and take effect from a start time:

- :class:`EccGrowth`: corrected ECC errors accumulate; every ``rows_per_remap`` of them a row is remapped (XID 63);
  optionally an uncorrectable error (XID 94, DBE count, pending remap) after ``uncorrectable_after_s``.
- :class:`XidFault`: the driver reports one XID (48/94/95 also count an uncorrectable error; 79 loses the GPU).
- :class:`ThermalRunaway`: temperature climbs until the GPU throttles and, at ``shutdown_c``, drops off the bus.
- :class:`FallOffBus`: the GPU stops answering (``lost=True``, XID 79).

:meth:`SimulatedProbe.reset` plays the part of a GPU reset or node reboot: faults and volatile counters clear.
"""

from __future__ import annotations

import hashlib
import math
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from telemetry.sample import GpuInfo, GpuSample, XidEvent
from telemetry.throttle import Throttle
from telemetry.xid import XID_FELL_OFF_BUS

MODEL = "Corral Simulated H100 80GB HBM3"
MEMORY_MB = 81_559
_UNCORRECTABLE_XIDS = frozenset({48, 94, 95})
_REMAP_XID = 63
_CONTAINED_ECC_XID = 94


@dataclass(frozen=True, slots=True)
class EccGrowth:
    corrected_per_hour: float = 600.0
    rows_per_remap: int = 50
    uncorrectable_after_s: float | None = None


@dataclass(frozen=True, slots=True)
class XidFault:
    code: int


@dataclass(frozen=True, slots=True)
class ThermalRunaway:
    degrees_per_minute: float = 1.5
    shutdown_c: float = 100.0


@dataclass(frozen=True, slots=True)
class FallOffBus:
    pass


Fault = EccGrowth | XidFault | ThermalRunaway | FallOffBus


@dataclass(slots=True)
class _Active:
    fault: Fault
    start: float | None  # None: starts at the next sample
    fired: bool = False  # for one-shot effects (an XID, the uncorrectable error of EccGrowth)
    rows_done: int = 0  # EccGrowth: rows already remapped, so each remap emits its XID 63 once


@dataclass(slots=True)
class _Gpu:
    info: GpuInfo
    base_corrected: int
    busy: bool = False
    pids: tuple[int, ...] = ()
    memory_limits_mb: dict[int, int] = field(default_factory=dict)  # pid -> an MPS client's memory limit
    faults: list[_Active] = field(default_factory=list)
    lost: bool = False
    dbe_volatile: int = 0
    dbe_total: int = 0
    sbe_total_offset: int = 0  # corrected errors from faults cleared by a reset: the aggregate count keeps them
    remapped_rows: int = 0
    remap_pending: bool = False
    last_xid: int = 0


class SimulatedProbe:
    """Simulated GPUs on one node. Not thread-safe: the agent calls it from one loop."""

    def __init__(self, gpus: int = 4, *, seed: int = 0, node: str = "sim") -> None:
        if gpus < 1:
            raise ValueError("a simulated node needs at least one GPU")
        self._seed = seed
        self._now: float | None = None
        self._events: list[XidEvent] = []
        self._gpus = [
            _Gpu(
                info=GpuInfo(index=i, uuid=_uuid(seed, node, i), model=MODEL, memory_mb=MEMORY_MB),
                base_corrected=int(_unit(seed, i, "base-ecc", 0) * 20),
            )
            for i in range(gpus)
        ]

    # -- GpuProbe -------------------------------------------------------------------------------------------------

    def inventory(self) -> list[GpuInfo]:
        return [gpu.info for gpu in self._gpus]

    def sample(self, now: float) -> list[GpuSample]:
        self._now = now
        return [self._sample_one(gpu, now) for gpu in self._gpus]

    def xid_events(self, timeout_ms: int = 0) -> list[XidEvent]:
        """Events queued so far. Never sleeps: simulated time only moves when ``sample`` is called."""
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        pass

    # -- controls for the demo and tests --------------------------------------------------------------------------

    def set_busy(
        self, gpu: int | str, busy: bool, pids: Sequence[int] = (), memory_limits_mb: Mapping[int, int] | None = None
    ) -> None:
        """Mark a GPU as running a job (utilisation, power and memory rise); ``pids`` appear as its processes.
        ``memory_limits_mb``: MPS clients' memory limits by pid; such a process holds 80 % of its limit, never more
        (MPS refuses an allocation past it), so the demo's shared GPUs read as the limits say."""
        target = self._find(gpu)
        target.busy = busy
        target.pids = tuple(pids) if busy else ()
        target.memory_limits_mb = {pid: mb for pid, mb in (memory_limits_mb or {}).items() if pid in target.pids}

    def inject(self, gpu: int | str, fault: Fault, *, at: float | None = None) -> None:
        """Start ``fault`` on a GPU (by index or UUID) at ``at``, or at the latest sampled instant when omitted."""
        target = self._find(gpu)
        active = _Active(fault=fault, start=at if at is not None else self._now)
        target.faults.append(active)
        if self._now is not None:
            self._advance(target, self._now)

    def reset(self, gpu: int | str) -> None:
        """A GPU reset: faults stop, the GPU is back on the bus, volatile ECC counts and pending remaps clear."""
        target = self._find(gpu)
        if self._now is not None:
            growth = self._ecc_growth(target, self._now)
            target.sbe_total_offset += growth
        target.faults.clear()
        target.lost = False
        target.dbe_volatile = 0
        target.remap_pending = False

    # -- internals ------------------------------------------------------------------------------------------------

    def _find(self, gpu: int | str) -> _Gpu:
        for candidate in self._gpus:
            if gpu == candidate.info.index or gpu == candidate.info.uuid:
                return candidate
        raise KeyError(f"no simulated GPU {gpu!r}")

    def _advance(self, gpu: _Gpu, now: float) -> None:
        """Apply fault effects up to ``now``: one-shot events fire once, in start order."""
        for active in gpu.faults:
            if active.start is None:
                active.start = now
            if active.start > now or (active.fired and not isinstance(active.fault, EccGrowth)):
                continue
            fault = active.fault
            if isinstance(fault, XidFault):
                active.fired = True
                self._emit(gpu, fault.code, active.start)
                if fault.code in _UNCORRECTABLE_XIDS:
                    gpu.dbe_volatile += 1
                    gpu.dbe_total += 1
                    gpu.remap_pending = True
                if fault.code == XID_FELL_OFF_BUS:
                    gpu.lost = True
            elif isinstance(fault, FallOffBus):
                active.fired = True
                self._lose(gpu, active.start)
            elif isinstance(fault, EccGrowth):
                rows = self._fault_corrected(active, now) // max(1, fault.rows_per_remap)
                if rows > active.rows_done:
                    gpu.remapped_rows += rows - active.rows_done
                    active.rows_done = rows
                    self._emit(gpu, _REMAP_XID, now)
                if (
                    not active.fired
                    and fault.uncorrectable_after_s is not None
                    and now - active.start >= fault.uncorrectable_after_s
                ):
                    active.fired = True
                    gpu.dbe_volatile += 1
                    gpu.dbe_total += 1
                    gpu.remap_pending = True
                    self._emit(gpu, _CONTAINED_ECC_XID, active.start + fault.uncorrectable_after_s)
            elif isinstance(fault, ThermalRunaway):
                if self._runaway_degrees(gpu, now) + self._base_temperature(gpu, now) >= fault.shutdown_c:
                    active.fired = True
                    self._lose(gpu, now)

    def _lose(self, gpu: _Gpu, when: float) -> None:
        if not gpu.lost:
            gpu.lost = True
            self._emit(gpu, XID_FELL_OFF_BUS, when)

    def _emit(self, gpu: _Gpu, code: int, when: float) -> None:
        self._events.append(XidEvent(gpu_uuid=gpu.info.uuid, xid=code, timestamp=when))
        gpu.last_xid = code

    def _fault_corrected(self, active: _Active, now: float) -> int:
        assert isinstance(active.fault, EccGrowth)
        if active.start is None or now <= active.start:
            return 0
        return int(active.fault.corrected_per_hour * (now - active.start) / 3600.0)

    def _ecc_growth(self, gpu: _Gpu, now: float) -> int:
        return sum(self._fault_corrected(a, now) for a in gpu.faults if isinstance(a.fault, EccGrowth))

    def _runaway_degrees(self, gpu: _Gpu, now: float) -> float:
        degrees = 0.0
        for active in gpu.faults:
            if isinstance(active.fault, ThermalRunaway) and active.start is not None and now > active.start:
                degrees += active.fault.degrees_per_minute * (now - active.start) / 60.0
        return degrees

    def _utilisation(self, gpu: _Gpu, now: float) -> float:
        i = gpu.info.index
        if not gpu.busy:
            return round(3.0 * _unit(self._seed, i, "idle", now // 60), 1)
        # A slow wave (a training step pattern at the scale of minutes) plus per-sample jitter.
        wave = math.sin(now / 300.0 + i)
        return round(min(100.0, max(0.0, 82.0 + 10.0 * wave + 6.0 * (_unit(self._seed, i, "util", now) - 0.5))), 1)

    def _base_temperature(self, gpu: _Gpu, now: float) -> float:
        util = self._utilisation(gpu, now)
        return 31.0 + 0.38 * util + 2.0 * _unit(self._seed, gpu.info.index, "temp", now // 30)

    def _sample_one(self, gpu: _Gpu, now: float) -> GpuSample:
        self._advance(gpu, now)
        info = gpu.info
        if gpu.lost:
            gpu.last_xid = 0
            return GpuSample(gpu_uuid=info.uuid, index=info.index, timestamp=now, xid=XID_FELL_OFF_BUS, lost=True)
        util = self._utilisation(gpu, now)
        temperature = round(self._base_temperature(gpu, now) + self._runaway_degrees(gpu, now), 1)
        power = round(72.0 + 5.6 * util + 15.0 * _unit(self._seed, info.index, "power", now), 1)
        throttle = Throttle.NONE if gpu.busy else Throttle.GPU_IDLE
        clock = 1980 if gpu.busy else 345
        if temperature >= 85.0:
            throttle |= Throttle.SW_THERMAL_SLOWDOWN
            clock = int(clock * max(0.4, 1.0 - (temperature - 85.0) / 30.0))
        if temperature >= 90.0:
            throttle |= Throttle.HW_THERMAL_SLOWDOWN | Throttle.HW_SLOWDOWN
        # A whole-GPU job's process holds 18 GB. Several clients of a shared GPU (MPS, #17) split 90 % of its
        # memory instead, each under its limit, so the demo's shares never read as memory pressure that would
        # make the agent's guard evict them.
        per_process = min(18_000, int((MEMORY_MB - 512) * 0.9) // max(1, len(gpu.pids)))
        limits = gpu.memory_limits_mb
        processes = tuple(
            (pid, min(per_process, limits[pid] * 4 // 5) if pid in limits else per_process) for pid in gpu.pids
        )
        mem_used = 512 + sum(mb for _, mb in processes) if gpu.busy else 512
        growth = self._ecc_growth(gpu, now)
        xid, gpu.last_xid = gpu.last_xid, 0
        return GpuSample(
            gpu_uuid=info.uuid,
            index=info.index,
            timestamp=now,
            gpu_util=util,
            mem_used_mb=min(mem_used, MEMORY_MB),
            mem_total_mb=MEMORY_MB,
            temperature_c=temperature,
            power_w=power,
            sm_clock_mhz=clock,
            throttle_reasons=int(throttle),
            ecc_sbe_volatile=growth,
            ecc_dbe_volatile=gpu.dbe_volatile,
            ecc_corrected_total=gpu.base_corrected + gpu.sbe_total_offset + growth,
            ecc_uncorrected_total=gpu.dbe_total,
            retired_pages=None,
            remapped_rows=gpu.remapped_rows,
            remapped_rows_pending=gpu.remap_pending,
            remapped_rows_failed=False,
            pcie_replay=int(now // 86_400) % 3,
            xid=xid,
            processes=processes,
        )


def _unit(seed: int, index: int, channel: str, bucket: float) -> float:
    """A reproducible pseudo-random number in [0, 1) for one GPU, channel and time bucket."""
    digest = hashlib.blake2b(f"{seed}/{index}/{channel}/{bucket!r}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def _uuid(seed: int, node: str, index: int) -> str:
    digest = hashlib.blake2b(f"corral-sim/{seed}/{node}/{index}".encode(), digest_size=16).digest()
    return f"GPU-{uuidlib.UUID(bytes=digest)}"
