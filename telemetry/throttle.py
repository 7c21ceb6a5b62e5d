"""Clock-event ("throttle") reason bits, as NVML reports them in ``nvmlDeviceGetCurrentClocksEventReasons``.

The values are NVML's own bit positions, copied here so that pure code (health rules, features, the simulated
probe) can read a bitmask without importing ``pynvml``. ``tests/telemetry/test_throttle.py`` checks them against
the installed binding.
"""

from __future__ import annotations

from enum import IntFlag


class Throttle(IntFlag):
    """Why the SM clock is below its maximum. Several bits can be set at once."""

    NONE = 0
    GPU_IDLE = 0x1
    APPLICATIONS_CLOCKS_SETTING = 0x2
    SW_POWER_CAP = 0x4
    HW_SLOWDOWN = 0x8  # hardware asked for a slowdown: overheating, power brake or a failing power supply
    SYNC_BOOST = 0x10
    SW_THERMAL_SLOWDOWN = 0x20
    HW_THERMAL_SLOWDOWN = 0x40
    HW_POWER_BRAKE_SLOWDOWN = 0x80
    DISPLAY_CLOCK_SETTING = 0x100


#: Bits that point at the hardware or its cooling rather than at a setting or an idle GPU. The predictor counts
#: these; idle, application clocks and sync boost are normal operation and only add noise.
HARDWARE_THROTTLE = Throttle.HW_SLOWDOWN | Throttle.HW_THERMAL_SLOWDOWN | Throttle.HW_POWER_BRAKE_SLOWDOWN
THERMAL_THROTTLE = Throttle.SW_THERMAL_SLOWDOWN | Throttle.HW_THERMAL_SLOWDOWN
