"""What a synthetic GPU reports: its latent rates (:class:`~telemetry.synth_faults.Channels`) turned into the
readings of the telemetry schema, one row per step.

Temperature follows load and the extra heat of faults; clocks, power and throttle reasons follow temperature, load
and the power brake; memory errors are found only when memory is read; XIDs are one code per row, the most serious
of the interval. Faults never write a reading directly: they change the rates, and the readings are drawn here.
"""

from __future__ import annotations

import numpy as np

from telemetry.synth_faults import Channels
from telemetry.synth_nodes import Node
from telemetry.synth_types import GpuModel
from telemetry.throttle import Throttle

#: Extra board power per degree of extra heat: leakage current grows with die temperature.
LEAKAGE_W_PER_C = 0.6


def read_out(
    rng: np.random.Generator,
    node: Node,
    sl: slice,
    util: np.ndarray,
    ch: Channels,
    *,
    background: float,
    age_days: float,
    dt: float,
) -> dict[str, np.ndarray]:
    """Every column of the GPU's rows over the steps ``sl`` of its life on ``node``, keyed by the schema's names.

    ``util`` is the GPU's own utilisation, ``background`` its soft-error rate and ``age_days`` its age at the
    first step (the lifetime counters start from what it gathered before). The phases draw from ``rng`` in this
    order; reordering them would change every fleet.
    """
    model, busy = node.model, node.busy[sl]
    length = sl.stop - sl.start
    temp, power, clock, throttle = _thermal_and_power(rng, node.ambient, model, util, busy, ch)
    mem_used = np.where(busy, node.mem_frac[sl] * model.memory_mb, rng.uniform(300, 900, length))
    sbe_total, repairs_new, repairs_total, dbe_total, pcie_total = _error_counters(
        rng, busy, ch, background=background, age_days=age_days, dt=dt
    )
    xid = _xids(rng, busy, node.storm[sl], ch, repairs_new, dt)
    retired = repairs_total if model.page_retirement else np.full(length, np.nan)
    remapped = np.full(length, np.nan) if model.page_retirement else repairs_total
    return {
        "gpu_util": np.round(util, 1),
        "mem_used_mb": np.round(mem_used),
        "mem_total_mb": np.full(length, model.memory_mb),
        "temperature_c": np.round(temp, 1),
        "power_w": np.round(power, 1),
        "sm_clock_mhz": np.round(clock),
        "ecc_corrected_total": sbe_total,
        "ecc_uncorrected_total": dbe_total,
        "retired_pages": retired,
        "xid": xid,
        "throttle_reasons": throttle,
        "remapped_rows": remapped,
        "pcie_replay": pcie_total,
    }


def _thermal_and_power(
    rng: np.random.Generator, ambient: float, model: GpuModel, util: np.ndarray, busy: np.ndarray, ch: Channels
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Temperature, board power, SM clock and throttle reasons per step.

    The GPU heats with load and with the faults' extra heat; past about 83 C the driver starts to slow it (more
    often the hotter it is), past 89 C the hardware does. The power brake and the power cap slow it too, and power
    follows utilisation at the clock it runs, plus leakage from extra heat and a fault's unsteadiness.
    """
    length = util.shape[0]
    temp = 27 + ambient + rng.normal(0, 1.5) + 0.38 * util + ch.temp_extra + rng.normal(0, 1.2, length)
    thermal_p = np.clip((temp - 83) / 6, 0, 1)
    sw_thermal = rng.random(length) < thermal_p
    hw_thermal = temp > 89
    clock = model.idle_clock + (model.max_clock - model.idle_clock) * np.minimum(1, util / 40)
    brake = rng.random(length) < ch.brake_p
    clock = clock * (1 - 0.25 * np.clip((temp - 85) / 10, 0, 1)) * (1 - 0.15 * brake)
    power = (
        65
        + model.watts_per_util * util * (clock / model.max_clock)
        + LEAKAGE_W_PER_C * ch.temp_extra
        + ch.power_extra
        + rng.normal(0, 1, length) * ch.power_sigma
    )
    power = np.maximum(power, 40)
    cap = busy & (util > 90) & (rng.random(length) < 0.3)
    throttle = (
        np.where(~busy, int(Throttle.GPU_IDLE), 0)
        | np.where(sw_thermal, int(Throttle.SW_THERMAL_SLOWDOWN), 0)
        | np.where(hw_thermal, int(Throttle.HW_THERMAL_SLOWDOWN | Throttle.HW_SLOWDOWN), 0)
        | np.where(cap, int(Throttle.SW_POWER_CAP), 0)
        | np.where(brake, int(Throttle.HW_POWER_BRAKE_SLOWDOWN | Throttle.HW_SLOWDOWN), 0)
    )
    return temp, power, clock, throttle


def _error_counters(
    rng: np.random.Generator, busy: np.ndarray, ch: Channels, *, background: float, age_days: float, dt: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The lifetime counters: corrected ECC errors, repaired rows (remapped, or pages retired), uncorrectable
    errors and PCIe replays, each starting from what a GPU of this age has gathered. Also returns the rows
    repaired at each step (each repair raises XID 63).

    Memory errors are found when the memory is read: mostly by jobs, a little by idle traffic.
    """
    length = busy.shape[0]
    access = 0.15 + 0.85 * busy
    sbe_new = rng.poisson(ch.sbe_rate * access * dt)
    sbe0 = rng.poisson(background * age_days * 24 * 0.5) + (rng.integers(100, 5000) if rng.random() < 0.05 else 0)
    sbe_total = sbe0 + np.cumsum(sbe_new)
    repairs_new = rng.poisson(ch.row_rate * access * dt) + ch.remaps
    repairs0 = int(rng.poisson(sbe0 / 200 + age_days / 365 * 0.5))  # rows fenced off earlier in its life
    repairs_total = repairs0 + np.cumsum(repairs_new)
    dbe_total = np.full(length, 1 if rng.random() < 0.02 else 0)
    pcie_total = np.cumsum(rng.poisson(ch.pcie_rate * dt))
    return sbe_total, repairs_new, repairs_total, dbe_total, pcie_total


def _xids(
    rng: np.random.Generator, busy: np.ndarray, storm: np.ndarray, ch: Channels, repairs_new: np.ndarray, dt: float
) -> np.ndarray:
    """One XID per row, the most serious of the interval (0: none): application errors while a job runs (many
    during a node's XID storm), a trickle of others, and 63 wherever a row was repaired."""
    length = busy.shape[0]
    xid = np.zeros(length, dtype=np.int64)
    app_rate = np.where(busy, 0.002, 0.0) + np.where(storm & busy, 0.3, 0.0)
    app_hits = rng.random(length) < 1 - np.exp(-app_rate * dt)
    xid[app_hits] = rng.choice([13, 31, 43, 45, 68], size=int(app_hits.sum()), p=[0.3, 0.35, 0.2, 0.1, 0.05])
    other_hits = rng.random(length) < 1 - np.exp(-ch.other_xid_rate * dt)
    xid[other_hits] = rng.choice([61, 62, 8], size=int(other_hits.sum()))
    xid[repairs_new > 0] = 63
    return xid
