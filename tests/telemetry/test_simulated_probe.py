from __future__ import annotations

from telemetry.health import HealthCause, evaluate
from telemetry.probe import GpuProbe
from telemetry.probe.simulated import EccGrowth, FallOffBus, SimulatedProbe, ThermalRunaway, XidFault
from telemetry.throttle import Throttle

T0 = 1_700_000_000.0


def test_is_a_gpu_probe_with_stable_inventory() -> None:
    probe = SimulatedProbe(3, seed=1)
    assert isinstance(probe, GpuProbe)
    inv = probe.inventory()
    assert [g.index for g in inv] == [0, 1, 2]
    assert len({g.uuid for g in inv}) == 3 and all(g.uuid.startswith("GPU-") for g in inv)
    assert SimulatedProbe(3, seed=1).inventory() == inv
    assert SimulatedProbe(3, seed=2).inventory() != inv


def test_deterministic_for_a_seed_whatever_the_call_pattern() -> None:
    a, b = SimulatedProbe(2, seed=7), SimulatedProbe(2, seed=7)
    for t in range(0, 600, 10):
        a.sample(T0 + t)
    assert a.sample(T0 + 600) == b.sample(T0 + 600)


def test_values_vary_over_time_and_are_plausible() -> None:
    probe = SimulatedProbe(1, seed=0)
    probe.set_busy(0, True, pids=[101])
    samples = [probe.sample(T0 + 10 * i)[0] for i in range(60)]
    utils = {s.gpu_util for s in samples}
    assert len(utils) > 10
    for s in samples:
        assert 0 <= s.gpu_util <= 100
        assert 30 <= s.temperature_c < 85
        assert 50 <= s.power_w <= 700
        assert s.mem_used_mb <= s.mem_total_mb
        assert s.ecc_dbe_volatile == 0 and not s.lost


def test_busy_gpu_shows_load_and_its_processes() -> None:
    probe = SimulatedProbe(2, seed=0)
    probe.set_busy(1, True, pids=[4242, 4243])
    idle, busy = probe.sample(T0)
    assert idle.gpu_util < 5 and idle.throttle_reasons == Throttle.GPU_IDLE and idle.processes == ()
    assert busy.gpu_util > 60 and busy.power_w > idle.power_w + 200
    assert [pid for pid, _ in busy.processes] == [4242, 4243]
    probe.set_busy(1, False)
    assert probe.sample(T0 + 10)[1].processes == ()


def test_ecc_growth_counts_remaps_and_ends_in_an_uncorrectable_error() -> None:
    probe = SimulatedProbe(2, seed=0)
    probe.sample(T0)
    uuid = probe.inventory()[0].uuid
    probe.inject(uuid, EccGrowth(corrected_per_hour=3600, rows_per_remap=100, uncorrectable_after_s=1800))
    before = probe.sample(T0 + 600)[0]
    assert before.ecc_sbe_volatile == 600 and before.remapped_rows == 6 and before.ecc_dbe_volatile == 0
    assert {e.xid for e in probe.xid_events()} == {63}
    assert evaluate(uuid, [before]).healthy

    after = probe.sample(T0 + 1800)[0]
    assert after.ecc_dbe_volatile == 1 and after.ecc_uncorrected_total == 1 and after.remapped_rows_pending
    assert 94 in {e.xid for e in probe.xid_events()}
    assert evaluate(uuid, [before, after]).cause is HealthCause.UNCORRECTABLE_ECC
    # The other GPU is untouched.
    assert probe.sample(T0 + 1810)[1].ecc_dbe_volatile == 0


def test_injected_xid_is_reported_once() -> None:
    probe = SimulatedProbe(2, seed=0)
    probe.sample(T0)
    probe.inject(1, XidFault(74))
    (event,) = probe.xid_events()
    assert (event.xid, event.timestamp, event.gpu_uuid) == (74, T0, probe.inventory()[1].uuid)
    assert probe.sample(T0 + 10)[1].xid == 74
    assert probe.sample(T0 + 20)[1].xid == 0
    assert probe.xid_events() == []


def test_fault_injected_before_first_sample_starts_then() -> None:
    probe = SimulatedProbe(1, seed=0)
    probe.inject(0, XidFault(13))
    assert probe.xid_events() == []
    assert probe.sample(T0)[0].xid == 13
    assert [e.timestamp for e in probe.xid_events()] == [T0]


def test_fall_off_bus_and_reset() -> None:
    probe = SimulatedProbe(2, seed=0)
    probe.sample(T0)
    probe.inject(0, FallOffBus(), at=T0 + 5)
    lost = probe.sample(T0 + 10)[0]
    assert lost.lost and lost.temperature_c is None
    assert [e.xid for e in probe.xid_events()] == [79]
    assert evaluate(lost.gpu_uuid, [lost]).cause is HealthCause.GPU_LOST
    probe.reset(0)
    assert not probe.sample(T0 + 20)[0].lost


def test_thermal_runaway_throttles_then_falls_off_the_bus() -> None:
    probe = SimulatedProbe(1, seed=0)
    probe.set_busy(0, True)
    probe.sample(T0)
    probe.inject(0, ThermalRunaway(degrees_per_minute=2.0, shutdown_c=100.0))
    temps, lost_at = [], None
    for minute in range(1, 60):
        s = probe.sample(T0 + 60 * minute)[0]
        if s.lost:
            lost_at = minute
            break
        temps.append(s)
    assert lost_at is not None
    hot = [s for s in temps if s.temperature_c >= 90]
    assert hot and all(s.throttle_reasons & Throttle.HW_THERMAL_SLOWDOWN for s in hot)
    assert hot[-1].sm_clock_mhz < 1980
    assert evaluate(hot[-1].gpu_uuid, [temps[-1]]).cause is HealthCause.OVERHEAT


def test_reset_keeps_aggregate_counts_and_clears_volatile_ones() -> None:
    probe = SimulatedProbe(1, seed=0)
    probe.sample(T0)
    probe.inject(0, EccGrowth(corrected_per_hour=360, uncorrectable_after_s=60))
    s = probe.sample(T0 + 3600)[0]
    probe.reset(0)
    r = probe.sample(T0 + 3700)[0]
    assert r.ecc_sbe_volatile == 0 and r.ecc_dbe_volatile == 0
    assert r.ecc_corrected_total == s.ecc_corrected_total and r.ecc_uncorrected_total == 1
    assert r.remapped_rows == s.remapped_rows
