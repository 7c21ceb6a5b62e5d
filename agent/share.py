"""A share of one GPU, as a start order carries it (issue #17), and the environment an MPS client gets for it.

Pure: no processes, no files. The start order's ``share`` object is parsed here, at the edge, so a bad one becomes
a sentence the task is refused with (``failed_to_start``), never an exception in the loop. An order without a share
is a whole-GPU order and never reaches this module.

Both MPS limits are fixed when a client creates its CUDA context (NVIDIA's MPS docs), so they travel as environment
variables set before the job starts: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (the share of SMs the client may use) and
``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (device memory the client may allocate, ``"<device>=<n>M"``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

MIB = 2**20
#: The most device memory a share may name (1 PiB): beyond any GPU, but small enough to rule out nonsense.
MAX_MEMORY_BYTES = 2**50
#: The file an online job writes its recent p99 latency into, in milliseconds (relative to its task directory).
LATENCY_FILE_NAME = "latency_p99_ms"


class WorkloadClass(StrEnum):
    """Online work is latency-critical and protected; offline work is best-effort and may be evicted (requeued)."""

    ONLINE = "online"
    OFFLINE = "offline"


class ShareRefused(Exception):
    """A share cannot be started here (bad share, MPS daemon unavailable): a sentence the task is refused with."""


@dataclass(frozen=True, slots=True)
class Share:
    """What part of its one GPU a task may use.

    ``memory_limit_bytes`` None: no memory limit (the portal always sends one; an order without it still runs, with
    the compute limit only). ``latency_slo_ms``: an online job's p99 target; above it, offline neighbours are
    evicted (None: the agent's ``--share-p99-ms``, if any).
    """

    compute_percent: int
    memory_limit_bytes: int | None = None
    workload_class: WorkloadClass = WorkloadClass.OFFLINE
    latency_slo_ms: float | None = None

    @property
    def online(self) -> bool:
        return self.workload_class is WorkloadClass.ONLINE

    @property
    def memory_limit_mib(self) -> int | None:
        """The memory limit in whole MiB, rounded down (at least 1): MPS takes ``M``, and a share must not grow."""
        if self.memory_limit_bytes is None:
            return None
        return max(1, self.memory_limit_bytes // MIB)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"compute_percent": self.compute_percent, "workload_class": str(self.workload_class)}
        if self.memory_limit_bytes is not None:
            body["memory_limit_bytes"] = self.memory_limit_bytes
        if self.latency_slo_ms is not None:
            body["latency_slo_ms"] = self.latency_slo_ms
        return body


def parse_share(raw: object, gpus: tuple[int, ...]) -> Share:
    """The share of a start order, checked. ``ValueError`` with one sentence naming the field for anything else.

    Unknown keys are ignored (a newer portal may send more); a share names exactly one GPU.
    """
    if not isinstance(raw, Mapping):
        raise ValueError("share must be an object")
    if len(gpus) != 1:
        raise ValueError(f"a share is of exactly one GPU, the order names {len(gpus)}")
    percent = raw.get("compute_percent")
    if isinstance(percent, bool) or not isinstance(percent, int) or not 1 <= percent <= 100:
        raise ValueError(f"share.compute_percent must be an integer from 1 to 100, got {percent!r}")
    memory = raw.get("memory_limit_bytes")
    if memory is not None and (
        isinstance(memory, bool) or not isinstance(memory, int) or not MIB <= memory <= MAX_MEMORY_BYTES
    ):
        raise ValueError(f"share.memory_limit_bytes must be an integer of at least {MIB} (1 MiB), got {memory!r}")
    klass = raw.get("workload_class", WorkloadClass.OFFLINE.value)
    try:
        workload_class = WorkloadClass(klass)
    except ValueError:
        raise ValueError(f"share.workload_class must be 'online' or 'offline', got {klass!r}") from None
    slo = raw.get("latency_slo_ms")
    if slo is not None:
        if isinstance(slo, bool) or not isinstance(slo, int | float) or not math.isfinite(slo) or slo <= 0:
            raise ValueError(f"share.latency_slo_ms must be a positive number, got {slo!r}")
        slo = float(slo)
    return Share(percent, memory, workload_class, slo)


def share_env(share: Share, *, pipe_dir: Path, task_dir: Path) -> dict[str, str]:
    """The variables an MPS client needs, on top of the task's usual environment.

    The GPU's control daemon runs with ``CUDA_VISIBLE_DEVICES`` naming that GPU alone, and the MPS server remaps
    what the daemon sees: its clients see that GPU as device 0, and a client that kept the node-wide index would
    fail (NVIDIA's MPS docs, ``CUDA_VISIBLE_DEVICES``). So a share's task gets ``CUDA_VISIBLE_DEVICES=0`` and its
    memory limit is set for device 0.
    """
    env = {
        "CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir),
        "CUDA_VISIBLE_DEVICES": "0",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share.compute_percent),
        "CORRAL_WORKLOAD_CLASS": str(share.workload_class),
    }
    limit = share.memory_limit_mib
    if limit is not None:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={limit}M"
    if share.online:
        env["CORRAL_LATENCY_FILE"] = str(task_dir / LATENCY_FILE_NAME)
    return env
