"""Who killed the job: the hardware (retry it elsewhere) or the job itself (don't)? The one rule, used by the jobs
services (``portal.jobs.services``: a requeue for lost hardware, a reopening after a late XID) and the health actions
(``portal.telemetry``: which drains requeue the jobs on a GPU).

A job that dies because its GPU failed did nothing wrong, so the control plane requeues it automatically, up to a
bound so a job that somehow kills every GPU it lands on does not cycle forever. A job that exits non-zero, runs
out of GPU memory or trips an application XID failed by itself; retrying it would only burn GPU hours.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from telemetry.health import Verdict
from telemetry.xid import FATAL_XIDS

#: How many times a job its hardware killed is retried by default (``CORRAL_MAX_HARDWARE_RETRIES``).
DEFAULT_MAX_HARDWARE_RETRIES = 3


class FailureOrigin(StrEnum):
    HARDWARE = "hardware"  # a GPU or node under the job failed
    JOB = "job"  # the job's own code, inputs or memory use


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    origin: FailureOrigin
    reason: str


def failure_origin(
    *,
    gpu_verdicts: Iterable[Verdict] = (),
    xids: Iterable[int] = (),
    node_lost: bool = False,
) -> FailureOrigin:
    """HARDWARE when the node vanished, any of the job's GPUs is unhealthy, or a fatal XID hit them during the job;
    otherwise JOB (non-zero exit, OOM, application XIDs, signals). Hardware evidence wins when both appear: a GPU
    that corrupts memory can make a healthy program crash in ways that look like its own fault."""
    if node_lost or any(not v.healthy for v in gpu_verdicts) or any(x in FATAL_XIDS for x in xids):
        return FailureOrigin.HARDWARE
    return FailureOrigin.JOB


def retry_decision(
    origin: FailureOrigin, *, hardware_retries_so_far: int, max_hardware_retries: int = DEFAULT_MAX_HARDWARE_RETRIES
) -> RetryDecision:
    """Retry hardware failures up to ``max_hardware_retries`` times; never retry the job's own failures."""
    if origin is FailureOrigin.JOB:
        return RetryDecision(False, origin, "the job failed by itself; it is not retried automatically")
    if hardware_retries_so_far >= max_hardware_retries:
        return RetryDecision(
            False, origin, f"hardware failure, but the job was already retried {hardware_retries_so_far} time(s)"
        )
    attempt = hardware_retries_so_far + 1
    return RetryDecision(True, origin, f"hardware failure; retry {attempt} of {max_hardware_retries} on other GPUs")
