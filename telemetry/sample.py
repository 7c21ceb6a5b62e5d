"""The values a GPU probe produces, and their JSON form for the agent -> control plane hop.

Everything here is a frozen dataclass of plain values so that a probe, the health rules, the buffer and the API
serializer can share one definition. ``None`` always means "this GPU or driver cannot report the field" (for
example ECC on a consumer card, retired pages on Ampere which remaps rows instead); it never means zero, because
the health rules and the predictor treat "no data" and "no errors" differently.

``to_dict``/``from_dict`` are the wire format. ``from_dict`` validates types strictly and raises ``ValueError``
with a short message: the API layer turns that into a 400 rather than storing a half-parsed sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from telemetry.fields import METRICS, Column


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """A GPU as inventoried once at agent start: its position on the node, stable identity, model and memory."""

    index: int
    uuid: str
    model: str
    memory_mb: int

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "model": self.model, "memory_mb": self.memory_mb}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuInfo:
        _require_mapping(data, "gpu info")
        return cls(
            index=_int(data, "index"),
            uuid=_str(data, "uuid"),
            model=_str(data, "model"),
            memory_mb=_int(data, "memory_mb"),
        )


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID reported by the driver. ``timestamp`` is seconds since the epoch (UTC) when the probe saw it."""

    gpu_uuid: str
    xid: int
    timestamp: float

    def to_dict(self) -> dict[str, Any]:
        return {"gpu_uuid": self.gpu_uuid, "xid": self.xid, "timestamp": self.timestamp}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> XidEvent:
        _require_mapping(data, "xid event")
        return cls(gpu_uuid=_str(data, "gpu_uuid"), xid=_int(data, "xid"), timestamp=_float(data, "timestamp"))


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant.

    Counters (``ecc_*``, ``retired_pages``, ``remapped_rows``, ``pcie_replay``) are the driver's running totals,
    not deltas, so a lost batch never corrupts a rate computed later. ``ecc_*_volatile`` reset when the driver
    reloads or the GPU is reset; ``ecc_*_total`` are the aggregate (lifetime, InfoROM) counts. ``xid`` is the last
    XID seen since the previous sample (0 if none). ``lost`` means the GPU fell off the bus: every other reading
    is then ``None``. ``processes`` pairs each compute process id with the GPU memory it holds (MiB), which is how
    a sample is tied to the job that owns the pid.

    The readings (every field but the first three and ``processes``) are :data:`telemetry.fields.METRICS`, in its
    order and with its types; they are written out here for the type checker, and a test keeps the two in step.
    """

    gpu_uuid: str
    index: int
    timestamp: float
    gpu_util: float | None = None  # percent, 0..100
    mem_used_mb: int | None = None
    mem_total_mb: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    throttle_reasons: int | None = None  # NVML clocks-event-reason bitmask, see telemetry.throttle
    ecc_sbe_volatile: int | None = None
    ecc_dbe_volatile: int | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    retired_pages: int | None = None  # pre-Ampere page retirement (both causes summed)
    remapped_rows: int | None = None  # Ampere+ row remapping (correctable + uncorrectable rows)
    remapped_rows_pending: bool | None = None  # a remap waits for a GPU reset
    remapped_rows_failed: bool | None = None  # the remapper ran out of spare rows
    pcie_replay: int | None = None
    xid: int = 0
    lost: bool = False
    processes: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out["processes"] = [[pid, mb] for pid, mb in self.processes]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GpuSample:
        """Parse the wire form. Unknown keys are ignored so a newer agent can talk to an older control plane."""
        _require_mapping(data, "sample")
        kwargs: dict[str, Any] = {
            "gpu_uuid": _str(data, "gpu_uuid"),
            "index": _int(data, "index"),
            "timestamp": _float(data, "timestamp"),
        }
        for name in _OPTIONAL_FLOATS:
            kwargs[name] = _float(data, name, optional=True)
        for name in _OPTIONAL_INTS:
            kwargs[name] = _int(data, name, optional=True)
        for name in _OPTIONAL_BOOLS:
            kwargs[name] = _bool(data, name, optional=True)
        kwargs["xid"] = _int(data, "xid", optional=True) or 0
        kwargs["lost"] = bool(_bool(data, "lost", optional=True))
        kwargs["processes"] = _processes(data.get("processes", ()))
        return cls(**kwargs)


# The readings that may be null, by how ``from_dict`` parses them (``xid`` and ``lost`` are never null).
_OPTIONAL_FLOATS = tuple(f.name for f in METRICS if f.nullable and f.column is Column.FLOAT)
_OPTIONAL_INTS = tuple(f.name for f in METRICS if f.nullable and f.column in (Column.INT32, Column.INT64))
_OPTIONAL_BOOLS = tuple(f.name for f in METRICS if f.nullable and f.column is Column.BOOL)


def _require_mapping(data: object, what: str) -> None:
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}")


def _missing(data: Mapping[str, Any], key: str, optional: bool) -> bool:
    if data.get(key) is None:
        if optional:
            return True
        raise ValueError(f"{key!r} is required")
    return False


def _str(data: Mapping[str, Any], key: str) -> str:
    _missing(data, key, optional=False)
    value = data[key]
    if not isinstance(value, str) or not value:
        raise ValueError(f"{key!r} must be a non-empty string")
    return value


def _int(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    if _missing(data, key, optional):
        return None
    value = data[key]
    # bool is an int subclass; a JSON true where a count belongs is a client bug, not 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key!r} must be an integer")
    return value


def _float(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    if _missing(data, key, optional):
        return None
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{key!r} must be a finite number")
    return float(value)


def _bool(data: Mapping[str, Any], key: str, *, optional: bool = False) -> Any:
    if _missing(data, key, optional):
        return None
    value = data[key]
    if not isinstance(value, bool):
        raise ValueError(f"{key!r} must be true or false")
    return value


def _processes(value: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list | tuple):
        raise ValueError("'processes' must be a list of [pid, used_mb] pairs")
    out: list[tuple[int, int]] = []
    for item in value:
        if (
            not isinstance(item, list | tuple)
            or len(item) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in item)
        ):
            raise ValueError("'processes' must be a list of [pid, used_mb] pairs")
        out.append((item[0], item[1]))
    return tuple(out)
