from __future__ import annotations

from telemetry.health import Finding, HealthCause, Verdict
from telemetry.retry import FailureOrigin, failure_origin, retry_decision

HEALTHY = Verdict("GPU-1")
SICK = Verdict("GPU-2", (Finding(HealthCause.FATAL_XID, "fatal XID 79", 1.0),))


def test_hardware_failure_is_retried_up_to_the_bound() -> None:
    origin = failure_origin(gpu_verdicts=[HEALTHY, SICK])
    assert origin is FailureOrigin.HARDWARE
    assert retry_decision(origin, hardware_retries_so_far=0).retry
    assert retry_decision(origin, hardware_retries_so_far=2, max_hardware_retries=3).retry
    last = retry_decision(origin, hardware_retries_so_far=3, max_hardware_retries=3)
    assert not last.retry and "already retried 3" in last.reason


def test_fatal_xid_during_the_job_or_a_lost_node_is_hardware() -> None:
    assert failure_origin(xids=[43, 79]) is FailureOrigin.HARDWARE
    assert failure_origin(node_lost=True) is FailureOrigin.HARDWARE


def test_job_failures_are_never_retried() -> None:
    origin = failure_origin(gpu_verdicts=[HEALTHY], xids=[13, 31, 43])
    assert origin is FailureOrigin.JOB
    decision = retry_decision(origin, hardware_retries_so_far=0)
    assert not decision.retry and "by itself" in decision.reason
