"""What a share asks for (issue #17), and the submit checks it must pass: one rule for the API, the form and the CLI.

A *share* is a job that asks for part of one GPU: ``"gpus": 0.25``. It is stored as ``Job.gpus = 1`` (one GPU,
so every count of GPUs per job keeps its meaning and its constraint) with ``Job.gpu_fraction = 0.25``; caps and
fair share count it as its fraction (``portal.scheduler.shares``, ``portal.tenants.selectors.tenant_usage``).
Whole numbers keep today's meaning; ``gpus`` in (0, 1) is a share.

A share is refused at submit (400, on the field named) when it could never run: a fraction outside (0, 1), a
``gpu_memory`` larger than every shared GPU can give, a class other than online or offline, ``gpu_memory`` or
``workload_class`` without a share, or a share on a cluster where no GPU accepts shares at all (no GPU marked
shared: an admin's decision, not a wait). A share that fits some shared GPU but finds no room now waits, with a
reason that says why (``portal.scheduler.shares``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from portal.errors import ValidationFailed
from portal.jobs.models import WorkloadClass
from portal.nodes.selectors import largest_shared_gpu_bytes
from scheduling.core.sharing import DEFAULT_RESERVE_BYTES, GRANT_STEP, MIB

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
#: The largest memory limit anyone may write (a 1 TiB GPU is far off); keeps the column and the agent's MiB sane.
MAX_GPU_MEMORY = 1 << 40
#: An online share's p99 latency target, in whole milliseconds: the bounds the API, the form and the model take.
#: An hour is far past any latency target; the bound keeps a typo (seconds meant as ms) from reading as "never".
MIN_LATENCY_SLO_MS = 1
MAX_LATENCY_SLO_MS = 3_600_000
#: The smallest share: MPS thread limits go in whole percent (the core's grant step), so a smaller ask could never
#: be given any compute and would wait for ever.
MIN_SHARE = GRANT_STEP
_NOT_A_NUMBER = "give a whole number of GPUs, or a fraction of one GPU like 0.25"


@dataclass(frozen=True, slots=True)
class ShareSpec:
    """A submission's share: the fraction of one GPU, an optional memory limit in bytes, its class, and for online
    work an optional p99 latency target the agent protects (docs/agent-protocol.md)."""

    fraction: float
    memory_bytes: int | None = None
    workload_class: str = WorkloadClass.OFFLINE.value
    latency_slo_ms: int | None = None


def parse_gpu_memory(value: object) -> int:
    """``"16G"``, ``"512M"``, ``"16GiB"``, ``"1.5g"`` or a whole number of bytes, as bytes (binary units, as
    ``nvidia-smi`` and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` count). Raises ``ValueError`` with a readable message."""
    if isinstance(value, bool):
        raise ValueError("give the GPU memory as a size like 16G or 512M")
    if isinstance(value, int):
        number = value
    else:
        match = _SIZE.match(str(value))
        if match is None:
            raise ValueError("give the GPU memory as a size like 16G or 512M")
        number = math.floor(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if number < MIB:
        raise ValueError("the GPU memory limit must be at least 1M")
    if number > MAX_GPU_MEMORY:
        raise ValueError("the GPU memory limit may be at most 1T")
    return number


def parse_latency_slo_ms(value: object) -> int:
    """``latency_slo_ms`` as submitted: a whole number of milliseconds from :data:`MIN_LATENCY_SLO_MS` to
    :data:`MAX_LATENCY_SLO_MS`. Raises ``ValueError`` with a readable message (the words the API's field says).
    Whether the job may have one at all (an online share) is :func:`check_share`'s."""
    if isinstance(value, bool):
        raise ValueError("a valid integer is required")
    try:
        number = int(value.strip()) if isinstance(value, str) else value
    except ValueError:
        raise ValueError("a valid integer is required") from None
    if not isinstance(number, int):
        raise ValueError("a valid integer is required")
    if number < MIN_LATENCY_SLO_MS:
        raise ValueError(f"ensure this value is greater than or equal to {MIN_LATENCY_SLO_MS}")
    if number > MAX_LATENCY_SLO_MS:
        raise ValueError(f"ensure this value is less than or equal to {MAX_LATENCY_SLO_MS}")
    return number


def parse_gpus(value: object) -> tuple[int, float | None]:
    """``gpus`` as submitted: a whole number of GPUs (``(n, None)``), or a fraction in (0, 1) of one GPU
    (``(1, fraction)``, at least :data:`MIN_SHARE`). Raises ``ValueError`` with a readable message for anything else (0,
    negative, 0.001, 1.5, nan)."""
    if isinstance(value, bool):
        raise ValueError(_NOT_A_NUMBER)
    try:
        number = float(value) if isinstance(value, (int, float, str)) else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(_NOT_A_NUMBER)
    if number <= 0:
        raise ValueError("a job needs more than 0 GPUs: a whole number, or a fraction of one GPU like 0.25")
    if number < MIN_SHARE:
        raise ValueError(f"a share is at least {MIN_SHARE:g} of a GPU: MPS gives out compute in whole percent")
    if number < 1:
        return 1, number
    if not number.is_integer():
        raise ValueError("more than one GPU must be a whole number; a share is a fraction below 1 (like 0.5)")
    return int(number), None


def check_share(share: ShareSpec) -> None:
    """Refuse a share that could never run (see the module docstring). One query: the largest shared GPU."""
    if not MIN_SHARE <= share.fraction < 1:
        raise ValidationFailed(f"a share is a fraction of one GPU from {MIN_SHARE:g} to below 1", field="gpus")
    if share.workload_class not in WorkloadClass.values:
        raise ValidationFailed("the workload class must be online or offline", field="workload_class")
    if share.latency_slo_ms is not None and share.workload_class != WorkloadClass.ONLINE:
        raise ValidationFailed("only an online share has a latency target", field="latency_slo_ms")
    largest = largest_shared_gpu_bytes()
    if largest is None:
        raise ValidationFailed(
            "no GPU of this cluster accepts shares; ask for whole GPUs, or ask an admin to mark GPUs shared",
            field="gpus",
        )
    usable = largest - DEFAULT_RESERVE_BYTES
    if share.memory_bytes is not None and share.memory_bytes > usable:
        raise ValidationFailed(
            f"no shared GPU can give {_gib(share.memory_bytes)}; the largest gives at most {_gib(usable)}",
            field="gpu_memory",
        )


def share_columns(share: ShareSpec | None) -> dict[str, object]:
    """The ``Job`` columns a share sets (none for a whole-GPU job, which keeps the columns' defaults)."""
    if share is None:
        return {}
    return {
        "gpu_fraction": share.fraction,
        "gpu_memory_bytes": share.memory_bytes,
        "workload_class": share.workload_class,
        "latency_slo_ms": share.latency_slo_ms,
    }


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"
