"""NvmlProbe against a fake NVML at the module boundary (tests/telemetry/fake_nvml.py)."""

from __future__ import annotations

import pynvml
import pytest

from telemetry.probe import SimulatedProbe, open_probe
from telemetry.probe.nvml import NvmlProbe, NvmlUnavailable
from telemetry.sample import GpuInfo
from telemetry.throttle import Throttle
from tests.telemetry.fake_nvml import MIB, FakeGpu, FakeNvml


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb", util=0, used_mb=0)])


def test_inventory_lists_gpus_in_index_order() -> None:
    probe = NvmlProbe(two_gpus())
    assert probe.inventory() == [
        GpuInfo(index=0, uuid="GPU-aaaa", model="NVIDIA H100 80GB HBM3", memory_mb=81_559),
        GpuInfo(index=1, uuid="GPU-bbbb", model="NVIDIA H100 80GB HBM3", memory_mb=81_559),
    ]


def test_sample_reads_every_field_with_units_converted() -> None:
    fake = two_gpus()
    gpu = fake.gpus[0]
    gpu.throttle = int(Throttle.SW_POWER_CAP | Throttle.HW_SLOWDOWN)
    gpu.sbe_volatile, gpu.dbe_volatile, gpu.sbe_aggregate, gpu.dbe_aggregate = 5, 1, 40, 2
    gpu.retired_sbe, gpu.retired_dbe = [0x1000, 0x2000], [0x3000]
    gpu.remapped = (3, 1, True, False)
    gpu.pcie_replay = 7
    gpu.processes = [(4242, 2048 * MIB), (4343, None)]
    probe = NvmlProbe(fake)

    s = probe.sample(1_700_000_000.0)[0]

    assert (s.gpu_uuid, s.index, s.timestamp) == ("GPU-aaaa", 0, 1_700_000_000.0)
    assert (s.gpu_util, s.mem_used_mb, s.mem_total_mb) == (50.0, 1024, 81_559)
    assert (s.temperature_c, s.power_w, s.sm_clock_mhz) == (55.0, 300.0, 1980)
    assert s.throttle_reasons == Throttle.SW_POWER_CAP | Throttle.HW_SLOWDOWN
    assert (s.ecc_sbe_volatile, s.ecc_dbe_volatile, s.ecc_corrected_total, s.ecc_uncorrected_total) == (5, 1, 40, 2)
    assert s.retired_pages == 3
    assert (s.remapped_rows, s.remapped_rows_pending, s.remapped_rows_failed) == (4, True, False)
    assert s.pcie_replay == 7
    assert s.processes == ((4242, 2048), (4343, 0))
    assert (s.xid, s.lost) == (0, False)


def test_unsupported_fields_become_none_without_losing_the_sample() -> None:
    fake = two_gpus()
    fake.gpus[1].unsupported = {
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRetiredPages",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetPcieReplayCounter",
        "nvmlDeviceGetPowerUsage",
    }
    s = NvmlProbe(fake).sample(10.0)[1]
    assert s.ecc_sbe_volatile is s.ecc_dbe_volatile is s.ecc_corrected_total is s.ecc_uncorrected_total is None
    assert s.retired_pages is s.remapped_rows is s.remapped_rows_failed is s.pcie_replay is s.power_w is None
    assert s.temperature_c == 55.0 and not s.lost


def test_ampere_reports_remapped_rows_and_no_retired_pages() -> None:
    fake = two_gpus()
    fake.gpus[0].unsupported = {"nvmlDeviceGetRetiredPages"}
    fake.gpus[0].remapped = (0, 0, False, True)
    s = NvmlProbe(fake).sample(10.0)[0]
    assert s.retired_pages is None
    assert s.remapped_rows_failed is True


def test_lost_gpu_yields_a_lost_sample_and_others_still_sample() -> None:
    fake = two_gpus()
    probe = NvmlProbe(fake)
    fake.gpus[1].lost = True
    good, lost = probe.sample(20.0)
    assert not good.lost and good.gpu_util == 50.0
    assert lost.lost and lost.xid == 79 and lost.gpu_uuid == "GPU-bbbb"
    assert lost.temperature_c is None and lost.ecc_corrected_total is None


def test_gpu_lost_at_start_is_left_out_of_inventory() -> None:
    fake = two_gpus()
    fake.gpus[0].lost = True
    probe = NvmlProbe(fake)
    assert [g.uuid for g in probe.inventory()] == ["GPU-bbbb"]
    assert [s.index for s in probe.sample(1.0)] == [1]


def test_xid_events_are_drained_and_tagged_with_the_gpu_and_clock() -> None:
    fake = two_gpus()
    probe = NvmlProbe(fake, clock=lambda: 123.0)
    fake.queue_xid(1, 48)
    fake.queue_xid(0, 13)
    fake.queued.append((0, pynvml.nvmlEventTypeDoubleBitEccError, 0))  # not an XID event: ignored
    events = probe.xid_events(timeout_ms=100)
    assert [(e.gpu_uuid, e.xid, e.timestamp) for e in events] == [("GPU-bbbb", 48, 123.0), ("GPU-aaaa", 13, 123.0)]
    assert probe.xid_events() == []
    # The next sample carries the last XID per GPU once.
    first = probe.sample(124.0)
    assert [s.xid for s in first] == [13, 48]
    assert [s.xid for s in probe.sample(125.0)] == [0, 0]


def test_gpus_without_xid_event_support_are_not_registered() -> None:
    fake = two_gpus()
    fake.gpus[0].supported_events = 0
    probe = NvmlProbe(fake)
    (registered,) = fake.event_sets.values()
    assert registered == [1]
    fake.queue_xid(1, 79)
    assert [e.xid for e in probe.xid_events()] == [79]


def test_no_event_support_anywhere_means_no_event_set() -> None:
    fake = two_gpus()
    for gpu in fake.gpus:
        gpu.supported_events = 0
    probe = NvmlProbe(fake)
    assert probe.xid_events(timeout_ms=5) == []
    assert fake.freed  # the unused set was given back


def test_old_binding_uses_the_throttle_reasons_name() -> None:
    fake = FakeNvml(
        [FakeGpu(uuid="GPU-old", throttle=int(Throttle.GPU_IDLE))], missing=("nvmlDeviceGetCurrentClocksEventReasons",)
    )
    probe = NvmlProbe(fake)
    assert probe.sample(1.0)[0].throttle_reasons == Throttle.GPU_IDLE
    assert "nvmlDeviceGetCurrentClocksThrottleReasons" in fake.calls


def test_missing_function_in_binding_is_none() -> None:
    fake = FakeNvml([FakeGpu(uuid="GPU-x")], missing=("nvmlDeviceGetRemappedRows",))
    assert NvmlProbe(fake).sample(1.0)[0].remapped_rows is None


def test_init_failure_raises_unavailable() -> None:
    with pytest.raises(NvmlUnavailable, match="nvmlInit"):
        NvmlProbe(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))


def test_close_frees_the_event_set_and_shuts_down_once() -> None:
    fake = two_gpus()
    probe = NvmlProbe(fake)
    probe.close()
    probe.close()
    assert fake.shutdowns == 1
    assert len(fake.freed) == 1


def test_open_probe_prefers_nvml_when_it_finds_gpus() -> None:
    probe = open_probe(nvml=two_gpus())
    assert isinstance(probe, NvmlProbe)


def test_open_probe_falls_back_to_simulation() -> None:
    no_driver = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert isinstance(open_probe(nvml=no_driver), SimulatedProbe)
    no_gpus = FakeNvml([])
    probe = open_probe(nvml=no_gpus, seed=3)
    assert isinstance(probe, SimulatedProbe) and len(probe.inventory()) == 4
    assert no_gpus.shutdowns == 1


def test_open_probe_with_fake_gpus_never_touches_nvml() -> None:
    fake = two_gpus()
    probe = open_probe(2, nvml=fake)
    assert isinstance(probe, SimulatedProbe) and len(probe.inventory()) == 2
    assert not fake.initialised
