from __future__ import annotations

import pynvml

from telemetry.throttle import Throttle
from telemetry.xid import APPLICATION_XIDS, FATAL_XIDS, XID_CATALOGUE, XidClass, classify, describe


def test_issue_lists_are_the_defaults() -> None:  # Ref: #4
    assert FATAL_XIDS == {48, 64, 74, 79, 92, 94, 95, 119, 120}
    assert APPLICATION_XIDS == {13, 31, 43, 45, 68}
    assert not FATAL_XIDS & APPLICATION_XIDS


def test_every_listed_xid_has_a_reason() -> None:
    assert all(info.why and info.name for info in XID_CATALOGUE.values())


def test_classify_and_describe() -> None:
    assert classify(79) is XidClass.FATAL and classify(63) is XidClass.PRECURSOR and classify(1) is XidClass.UNKNOWN
    assert describe(79) == "XID 79 (GPU has fallen off the bus)" and describe(1) == "XID 1"


def test_throttle_bits_match_nvml() -> None:
    pairs = {
        Throttle.GPU_IDLE: pynvml.nvmlClocksEventReasonGpuIdle,
        Throttle.APPLICATIONS_CLOCKS_SETTING: pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
        Throttle.SW_POWER_CAP: pynvml.nvmlClocksEventReasonSwPowerCap,
        Throttle.HW_SLOWDOWN: pynvml.nvmlClocksEventReasonHwSlowdown,
        Throttle.SYNC_BOOST: pynvml.nvmlClocksEventReasonSyncBoost,
        Throttle.SW_THERMAL_SLOWDOWN: pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        Throttle.HW_THERMAL_SLOWDOWN: pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        Throttle.HW_POWER_BRAKE_SLOWDOWN: pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        Throttle.DISPLAY_CLOCK_SETTING: pynvml.nvmlClocksEventReasonDisplayClockSetting,
    }
    assert all(int(ours) == theirs for ours, theirs in pairs.items())
