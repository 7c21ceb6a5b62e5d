from __future__ import annotations

import dataclasses

import pytest

from telemetry.health import HealthCause, HealthPolicy, evaluate, evaluate_all
from telemetry.sample import GpuSample, XidEvent
from telemetry.xid import APPLICATION_XIDS, FATAL_XIDS

U = "GPU-1"


def sample(t: float = 0.0, **changes: object) -> GpuSample:
    base = GpuSample(
        gpu_uuid=U,
        index=0,
        timestamp=t,
        gpu_util=80.0,
        temperature_c=60.0,
        ecc_sbe_volatile=3,
        ecc_dbe_volatile=0,
        ecc_corrected_total=10,
        ecc_uncorrected_total=0,
        remapped_rows=2,
        remapped_rows_failed=False,
    )
    return dataclasses.replace(base, **changes)


def test_a_normal_gpu_is_healthy() -> None:
    verdict = evaluate(U, [sample(0), sample(10)])
    assert verdict.healthy and verdict.cause is None and verdict.message == "healthy"


def test_no_data_is_healthy_by_default() -> None:
    # Staleness (an agent that stopped reporting) is the control plane's heartbeat check, not a GPU rule.
    assert evaluate(U, []).healthy


@pytest.mark.parametrize("xid", sorted(FATAL_XIDS))
def test_fatal_xids_make_the_gpu_unhealthy(xid: int) -> None:
    verdict = evaluate(U, [sample()], [XidEvent(U, xid, 5.0)])
    assert verdict.cause is HealthCause.FATAL_XID and f"XID {xid}" in verdict.message


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS | {63, 999}))
def test_application_precursor_and_unknown_xids_do_not_drain(xid: int) -> None:
    assert evaluate(U, [sample(xid=xid)], [XidEvent(U, xid, 5.0)]).healthy


def test_fatal_xid_in_a_sample_counts_like_an_event() -> None:
    assert evaluate(U, [sample(xid=95)]).cause is HealthCause.FATAL_XID


def test_events_for_other_gpus_are_ignored() -> None:
    assert evaluate(U, [sample()], [XidEvent("GPU-2", 79, 1.0)]).healthy


def test_uncorrectable_ecc_from_the_volatile_count() -> None:
    verdict = evaluate(U, [sample(0), sample(10, ecc_dbe_volatile=2)])
    assert verdict.cause is HealthCause.UNCORRECTABLE_ECC and "2 uncorrectable" in verdict.message


def test_uncorrectable_ecc_from_growth_of_the_aggregate_count() -> None:
    # The driver reloaded between samples, so the volatile count is back to 0, but the lifetime count moved.
    verdict = evaluate(U, [sample(0, ecc_uncorrected_total=1), sample(10, ecc_uncorrected_total=2)])
    assert verdict.cause is HealthCause.UNCORRECTABLE_ECC and "from 1 to 2" in verdict.message


def test_an_old_aggregate_uncorrectable_count_alone_is_not_a_reason_to_drain() -> None:
    assert evaluate(U, [sample(0, ecc_uncorrected_total=4), sample(10, ecc_uncorrected_total=4)]).healthy


def test_row_remap_failure() -> None:
    assert evaluate(U, [sample(remapped_rows_failed=True)]).cause is HealthCause.ROW_REMAP_FAILURE


def test_lost_gpu_is_the_primary_cause_and_judged_on_the_latest_sample() -> None:
    lost = GpuSample(gpu_uuid=U, index=0, timestamp=20.0, xid=79, lost=True)
    verdict = evaluate(U, [sample(0), lost], [XidEvent(U, 79, 19.0)])
    assert verdict.cause is HealthCause.GPU_LOST
    assert [f.cause for f in verdict.findings] == [HealthCause.GPU_LOST, HealthCause.FATAL_XID]
    # Back on the bus after a reset: state rules look at the latest sample only.
    assert evaluate(U, [lost, sample(30)]).findings[0].cause is HealthCause.FATAL_XID
    assert evaluate(U, [dataclasses.replace(lost, xid=0), sample(30)]).healthy


def test_overheat_threshold_is_configurable_and_can_be_disabled() -> None:
    hot = sample(temperature_c=96.0)
    assert evaluate(U, [hot]).cause is HealthCause.OVERHEAT
    assert evaluate(U, [hot], policy=HealthPolicy(max_temperature_c=None)).healthy
    assert evaluate(U, [hot], policy=HealthPolicy(max_temperature_c=97.0)).healthy


def test_site_can_change_the_fatal_list() -> None:
    policy = HealthPolicy(fatal_xids=frozenset({13}))
    assert evaluate(U, [sample(xid=13)], policy=policy).cause is HealthCause.FATAL_XID
    assert evaluate(U, [sample(xid=79)], policy=policy).healthy


def test_findings_are_sorted_by_severity() -> None:
    verdict = evaluate(U, [sample(xid=48, ecc_dbe_volatile=1, remapped_rows_failed=True, temperature_c=99.0)])
    assert [f.cause for f in verdict.findings] == [
        HealthCause.UNCORRECTABLE_ECC,
        HealthCause.ROW_REMAP_FAILURE,
        HealthCause.FATAL_XID,
        HealthCause.OVERHEAT,
    ]


def test_evaluate_all_groups_by_gpu() -> None:
    other = dataclasses.replace(sample(), gpu_uuid="GPU-2")
    verdicts = evaluate_all([sample(), other], [XidEvent("GPU-3", 74, 1.0)])
    assert sorted(verdicts) == ["GPU-1", "GPU-2", "GPU-3"]
    assert verdicts["GPU-1"].healthy and verdicts["GPU-3"].cause is HealthCause.FATAL_XID


def test_every_cause_has_a_label() -> None:
    assert all(cause.label for cause in HealthCause)
