"""Per-row features over sliding windows of each GPU's own history (and of its node, for temperature).

Every feature at row ``i`` uses only rows of the same GPU with ``timestamp <= timestamp[i]``: the predictor runs on
what is known at decision time. Windows are defined in *time*, not in row counts, so gaps in the data (an agent
that was down) shorten a window's evidence instead of stretching it, and a file sampled every 10 minutes gets the
same windows as an hourly one. The few features that count rows (hours in which the SBE counter grew, hours of
data in the last day) turn the count into hours with the file's own sampling period (:func:`sampling_period`), so
they mean the same at any period; at our hourly period the factor is one. Counter growth is clipped at zero, so a
counter that went backwards (an InfoROM reset) does not look like a negative error rate.

Counts are ``log1p``-transformed: the linear members of the ensemble need it, and tree models do not care.
NaN means "the GPU does not report this" and is kept as NaN; models impute as they need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from telemetry.table import TelemetryTable
from telemetry.throttle import HARDWARE_THROTTLE, THERMAL_THROTTLE, Throttle
from telemetry.xid import APPLICATION_XIDS, FATAL_XIDS, MEMORY_XIDS

HOUR = 3600.0
WINDOWS_H: dict[str, float] = {"1h": 1, "6h": 6, "24h": 24, "72h": 72, "7d": 168}
#: Age and "time since" features saturate here: beyond it the exact value carries no signal and would only tell
#: the model how long ago the data set started.
CAP_H = 168.0
AGE_CAP_H = 60 * 24.0
_KEY_SPAN = 10**10


@dataclass(frozen=True, eq=False)
class FeatureMatrix:
    """``values[i]`` are the features of table row ``i`` (float32, NaN where unknown), in ``names`` order."""

    values: np.ndarray
    names: tuple[str, ...]


def feature_names() -> tuple[str, ...]:
    """The feature order, fixed so a stored model can check it is scoring what it was trained on."""
    return _NAMES


def sampling_period(table: TelemetryTable) -> float:
    """The table's sampling period in seconds: the median gap between consecutive rows of one GPU (an hour when
    no GPU has two rows). The median, so an agent's outage or a few late samples do not move it."""
    same_gpu = table.gpu[1:] == table.gpu[:-1]
    gaps = np.diff(table.timestamp)[same_gpu]
    return float(np.median(gaps)) if gaps.size else HOUR


def build_features(table: TelemetryTable, *, first_seen: Mapping[str, float] | None = None) -> FeatureMatrix:
    """Features for every row of ``table``. ``first_seen`` (GPU UUID -> epoch seconds) gives GPU age when the
    table holds only recent history; without it age counts from the GPU's first row in the table."""
    w = _Windows(table)
    cols: dict[str, np.ndarray] = {}

    sbe = table.column("ecc_corrected_total")
    for label in ("1h", "6h", "24h", "72h", "7d"):
        cols[f"sbe_growth_{label}"] = np.log1p(w.growth(sbe, label))
    g6, g24, g72, g7d = (w.growth(sbe, label) for label in ("6h", "24h", "72h", "7d"))
    # Acceleration: is the last 6 h faster than the day, the day faster than the previous days? Failing memory
    # accelerates; a weak cell bursts once and goes quiet, so its recent rate falls below its older one.
    cols["sbe_accel_6h_vs_24h"] = np.log1p(4 * g6) - np.log1p(g24)
    cols["sbe_accel_24h_vs_72h"] = np.log1p(g24) - np.log1p(np.maximum(g72 - g24, 0.0) / 2)
    cols["sbe_accel_24h_vs_7d"] = np.log1p(g24) - np.log1p(g7d / 7)
    cols["sbe_total"] = np.log1p(sbe)
    dbe = table.column("ecc_uncorrected_total")
    cols["dbe_growth_7d"] = np.log1p(w.growth(dbe, "7d"))
    cols["dbe_total"] = np.log1p(dbe)

    # Pre-Ampere GPUs retire pages, later ones remap rows: one "memory repairs" counter (distinct bad rows or
    # pages fenced off) covers both. Spreading damage keeps adding rows; a weak cell adds one and stops.
    repairs = table.column("retired_pages")
    repairs = np.where(np.isnan(repairs), table.column("remapped_rows"), repairs)
    r24, r72, r7d = (w.growth(repairs, label) for label in ("24h", "72h", "7d"))
    cols["repairs_growth_6h"] = np.log1p(w.growth(repairs, "6h"))
    cols["repairs_growth_24h"] = np.log1p(r24)
    cols["repairs_growth_72h"] = np.log1p(r72)
    cols["repairs_growth_7d"] = np.log1p(r7d)
    cols["repairs_accel_24h_vs_72h"] = np.log1p(r24) - np.log1p(np.maximum(r72 - r24, 0.0) / 2)
    cols["repairs_total"] = np.log1p(repairs)

    xid = table.column("xid").astype(np.int64)
    app = np.isin(xid, list(APPLICATION_XIDS))
    mem = np.isin(xid, list(MEMORY_XIDS - FATAL_XIDS))
    fatal = np.isin(xid, list(FATAL_XIDS))
    other = (xid > 0) & ~app & ~mem & ~fatal
    for label in ("24h", "7d"):
        cols[f"xid_app_{label}"] = np.log1p(w.count(app, label))
        cols[f"xid_mem_{label}"] = np.log1p(w.count(mem, label))
        cols[f"xid_other_{label}"] = np.log1p(w.count(other, label))
    cols["xid_fatal_7d"] = np.log1p(w.count(fatal, "7d"))

    sbe_up = w.increased(sbe)
    repairs_up = w.increased(repairs)
    # Persistence: a weak cell errs for a few hours until its row is remapped; failing memory errs for days.
    cols["sbe_active_hours_24h"] = w.hours(sbe_up, "24h")
    cols["sbe_active_hours_72h"] = w.hours(sbe_up, "72h")
    cols["repairs_events_24h"] = w.count(repairs_up, "24h")
    cols["repairs_events_72h"] = w.count(repairs_up, "72h")
    cols["hours_since_sbe"] = w.hours_since(sbe_up)
    cols["hours_since_memory_event"] = w.hours_since(sbe_up | repairs_up | mem)
    # Time since the first precursor of the week: with hours_since_sbe it gives the episode's span and whether
    # it is still going.
    cols["hours_since_first_sbe_7d"] = w.hours_since_first(sbe_up, "7d")
    cols["hours_since_first_repair_7d"] = w.hours_since_first(repairs_up, "7d")

    groups = _NodeGroups(table)
    temp = table.column("temperature_c")
    cols["temp_mean_6h"] = w.mean(temp, "6h")
    cols["temp_mean_24h"] = w.mean(temp, "24h")
    cols["temp_std_24h"] = w.std(temp, "24h")
    cols["temp_trend_6h_vs_72h"] = cols["temp_mean_6h"] - w.mean(temp, "72h")
    node_temp = groups.median(temp)
    delta = temp - node_temp  # a GPU hotter than its neighbours, not a hot room
    d6, d24, d72 = (w.mean(delta, label) for label in ("6h", "24h", "72h"))
    cols["temp_vs_node_6h"] = d6
    cols["temp_vs_node_24h"] = d24
    cols["temp_vs_node_trend"] = d6 - d72
    # Shape of the rise: a runaway is still climbing (6 h above the day), a blocked air path has levelled off.
    cols["temp_vs_node_rise_6h_vs_24h"] = d6 - d24
    cols["temp_vs_node_rise_24h_vs_72h"] = d24 - d72
    # The room itself: a hot aisle heats the whole node, which the GPU's own features would mistake for decline.
    cols["node_temp_trend_6h_vs_72h"] = w.mean(node_temp, "6h") - w.mean(node_temp, "72h")

    power = table.column("power_w")
    util = table.column("gpu_util")
    cols["power_mean_24h"] = w.mean(power, "24h")
    cols["power_std_6h"] = w.std(power, "6h")
    cols["power_std_24h"] = w.std(power, "24h")
    power_delta = power - groups.median(power)  # jobs span a node's GPUs: unsteady power stands out
    cols["power_vs_node_std_6h"] = w.std(power_delta, "6h")
    cols["power_vs_node_std_24h"] = w.std(power_delta, "24h")
    with np.errstate(divide="ignore", invalid="ignore"):
        per_util = power / np.maximum(util, 5.0)
    cols["power_per_util_24h"] = w.mean(per_util, "24h")
    # Leakage: a GPU drawing more power than its node-mates for the same work, and more than it used to.
    per_util_delta = per_util - groups.median(per_util)
    cols["power_per_util_vs_node_24h"] = w.mean(per_util_delta, "24h")
    cols["power_per_util_vs_node_trend"] = w.mean(per_util_delta, "6h") - w.mean(per_util_delta, "72h")
    cols["util_mean_24h"] = w.mean(util, "24h")
    clock = table.column("sm_clock_mhz")
    cols["sm_clock_mean_6h"] = w.mean(clock, "6h")
    cols["sm_clock_trend_6h_vs_72h"] = cols["sm_clock_mean_6h"] - w.mean(clock, "72h")
    with np.errstate(divide="ignore", invalid="ignore"):
        mem_frac = table.column("mem_used_mb") / table.column("mem_total_mb")
    cols["mem_used_frac_24h"] = w.mean(mem_frac, "24h")

    throttle = table.column("throttle_reasons")
    known = ~np.isnan(throttle)
    bits = np.where(known, throttle, 0).astype(np.int64)
    for name, mask in (
        ("thermal", int(THERMAL_THROTTLE)),
        ("hw", int(HARDWARE_THROTTLE)),
        ("power_brake", int(Throttle.HW_POWER_BRAKE_SLOWDOWN)),
        ("power_cap", int(Throttle.SW_POWER_CAP)),
    ):
        flag = np.where(known, (bits & mask) != 0, np.nan)
        cols[f"throttle_{name}_24h"] = w.mean(flag, "24h")
        if name in {"thermal", "hw"}:
            cols[f"throttle_{name}_6h"] = w.mean(flag, "6h")
        if name in {"hw", "power_brake"}:
            # A PSU event brakes every GPU of the node; a failing power stage brakes one.
            cols[f"throttle_{name}_vs_node_24h"] = w.mean(flag - groups.mean_of_others(flag), "24h")

    pcie = table.column("pcie_replay")
    p24 = w.growth(pcie, "24h")
    cols["pcie_growth_6h"] = np.log1p(w.growth(pcie, "6h"))
    cols["pcie_growth_24h"] = np.log1p(p24)
    cols["pcie_growth_7d"] = np.log1p(w.growth(pcie, "7d"))
    cols["pcie_accel_6h_vs_24h"] = cols["pcie_growth_6h"] + np.log(4) - cols["pcie_growth_24h"]
    # A PCIe switch or retimer event makes every GPU behind it replay; a failing link replays alone.
    replaying = np.where(np.isnan(p24), np.nan, p24 >= 10)
    cols["pcie_peers_replaying_24h"] = groups.sum_of_others(replaying)

    cols["age_h"] = np.minimum(w.age_hours(table, first_seen), AGE_CAP_H)
    # Hours of data in the last day (24 when nothing was lost), whatever the period; the name predates that.
    cols["samples_24h"] = w.hours(np.ones(len(table), dtype=bool), "24h")

    values = np.empty((len(table), len(_NAMES)), dtype=np.float32)
    for j, name in enumerate(_NAMES):
        values[:, j] = cols[name]
    return FeatureMatrix(values=values, names=_NAMES)


class _Windows:
    """Window arithmetic over a (gpu, time)-sorted table using prefix sums and binary search."""

    def __init__(self, table: TelemetryTable) -> None:
        self.t = table.timestamp
        self.n = len(table)
        base = table.start
        self.key = table.gpu.astype(np.int64) * _KEY_SPAN + np.floor(self.t - base).astype(np.int64)
        idx = np.arange(self.n)
        new_gpu = np.ones(self.n, dtype=bool)
        new_gpu[1:] = table.gpu[1:] != table.gpu[:-1]
        self.first = np.maximum.accumulate(np.where(new_gpu, idx, 0))  # first row of each row's GPU
        self.period_h = sampling_period(table) / HOUR
        self._start: dict[str, np.ndarray] = {}

    def start(self, label: str) -> np.ndarray:
        """Index of the first row inside (t - W, t] for each row."""
        if label not in self._start:
            width = int(WINDOWS_H[label] * HOUR)
            self._start[label] = np.searchsorted(self.key, self.key - width, side="right")
        return self._start[label]

    def growth(self, counter: np.ndarray, label: str) -> np.ndarray:
        """Counter increase over the window: now minus the last value at or before the window start (or the
        GPU's first value when the window reaches back before its history)."""
        before = np.maximum(self.start(label) - 1, self.first)
        with np.errstate(invalid="ignore"):
            grown: np.ndarray = np.maximum(counter - counter[before], 0.0)
        return grown

    def _sums(self, x: np.ndarray, label: str) -> tuple[np.ndarray, np.ndarray]:
        valid = ~np.isnan(x)
        cs = np.concatenate(([0.0], np.cumsum(np.where(valid, x, 0.0))))
        cn = np.concatenate(([0], np.cumsum(valid)))
        s = self.start(label)
        idx = np.arange(1, self.n + 1)
        return cs[idx] - cs[s], (cn[idx] - cn[s]).astype(np.float64)

    def count(self, flag: np.ndarray, label: str) -> np.ndarray:
        total, _ = self._sums(flag.astype(np.float64), label)
        return total

    def hours(self, flag: np.ndarray, label: str) -> np.ndarray:
        """Hours inside the window covered by rows where ``flag`` is true (each row stands for one period)."""
        return self.count(flag, label) * self.period_h

    def mean(self, x: np.ndarray, label: str) -> np.ndarray:
        total, n = self._sums(x.astype(np.float64), label)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, total / np.maximum(n, 1), np.nan)

    def std(self, x: np.ndarray, label: str) -> np.ndarray:
        x = x.astype(np.float64)
        m = self.mean(x, label)
        m2 = self.mean(x * x, label)
        spread: np.ndarray = np.sqrt(np.maximum(m2 - m * m, 0.0))
        return spread

    def increased(self, counter: np.ndarray) -> np.ndarray:
        prev = np.concatenate(([np.nan], counter[:-1]))
        with np.errstate(invalid="ignore"):
            up = counter > prev
        up[self.first == np.arange(self.n)] = False
        return up

    def hours_since(self, event: np.ndarray) -> np.ndarray:
        """Hours since the latest row (this one included) where ``event`` was true; CAP_H if none or longer."""
        idx = np.arange(self.n)
        last = np.maximum.accumulate(np.where(event, idx, -1))
        have = last >= self.first
        hours = (self.t - self.t[np.maximum(last, 0)]) / HOUR
        return np.where(have, np.minimum(hours, CAP_H), CAP_H)

    def hours_since_first(self, event: np.ndarray, label: str) -> np.ndarray:
        """Hours since the first row inside the window where ``event`` was true; 0 if there is none."""
        idx = np.arange(self.n)
        # Next event at or after each position (n if none), read at the window's start.
        nxt = np.minimum.accumulate(np.where(event, idx, self.n)[::-1])[::-1]
        first = nxt[self.start(label)]
        have = first <= idx
        hours = (self.t - self.t[np.minimum(first, self.n - 1)]) / HOUR
        return np.where(have, hours, 0.0)

    def age_hours(self, table: TelemetryTable, first_seen: Mapping[str, float] | None) -> np.ndarray:
        start = self.t[self.first]
        if first_seen:
            known = np.array([first_seen.get(name, np.nan) for name in table.gpu_names])
            per_row = known[table.gpu]
            start = np.where(np.isnan(per_row), start, np.minimum(per_row, start))
        age: np.ndarray = (self.t - start) / HOUR
        return age


class _NodeGroups:
    """The GPUs of one node at one timestamp: their median, and sums or means over a GPU's node-mates."""

    def __init__(self, table: TelemetryTable) -> None:
        key = table.node.astype(np.int64) * _KEY_SPAN + np.floor(table.timestamp - table.start).astype(np.int64)
        _, self.group = np.unique(key, return_inverse=True)
        self.counts = np.bincount(self.group)

    def median(self, x: np.ndarray) -> np.ndarray:
        """Median of ``x`` over the node's GPUs at the same timestamp.

        The median, not the mean: with a mean, one GPU heating up before it fails pulls its neighbours' baseline
        up, and when it dies and leaves the node every neighbour suddenly looks hotter than its peers."""
        group = self.group
        order = np.lexsort((x, group))  # NaN sorts last within each group
        valid = np.bincount(group, weights=(~np.isnan(x)).astype(np.float64)).astype(np.int64)
        starts = np.concatenate(([0], np.cumsum(self.counts)[:-1]))
        lo = order[starts + np.maximum(valid - 1, 0) // 2]
        hi = order[starts + np.maximum(valid, 1) // 2 - (valid == 0)]
        median = np.where(valid > 0, (x[lo] + x[hi]) / 2, np.nan)
        return median[group]

    def sum_of_others(self, x: np.ndarray) -> np.ndarray:
        """Sum of ``x`` over the GPU's node-mates (NaN counts as 0)."""
        clean = np.where(np.isnan(x), 0.0, x)
        total = np.bincount(self.group, weights=clean)
        others: np.ndarray = total[self.group] - clean
        return others

    def mean_of_others(self, x: np.ndarray) -> np.ndarray:
        """Mean of ``x`` over the GPU's node-mates that report it; NaN for a GPU alone on its node."""
        known = ~np.isnan(x)
        n = np.bincount(self.group, weights=known.astype(np.float64))[self.group] - known
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, self.sum_of_others(x) / np.maximum(n, 1), np.nan)


_NAMES: tuple[str, ...] = (
    "sbe_growth_1h",
    "sbe_growth_6h",
    "sbe_growth_24h",
    "sbe_growth_72h",
    "sbe_growth_7d",
    "sbe_accel_6h_vs_24h",
    "sbe_accel_24h_vs_72h",
    "sbe_accel_24h_vs_7d",
    "sbe_total",
    "dbe_growth_7d",
    "dbe_total",
    "repairs_growth_6h",
    "repairs_growth_24h",
    "repairs_growth_72h",
    "repairs_growth_7d",
    "repairs_accel_24h_vs_72h",
    "repairs_total",
    "sbe_active_hours_24h",
    "sbe_active_hours_72h",
    "repairs_events_24h",
    "repairs_events_72h",
    "xid_app_24h",
    "xid_mem_24h",
    "xid_other_24h",
    "xid_app_7d",
    "xid_mem_7d",
    "xid_other_7d",
    "xid_fatal_7d",
    "hours_since_sbe",
    "hours_since_memory_event",
    "hours_since_first_sbe_7d",
    "hours_since_first_repair_7d",
    "temp_mean_6h",
    "temp_mean_24h",
    "temp_std_24h",
    "temp_trend_6h_vs_72h",
    "temp_vs_node_6h",
    "temp_vs_node_24h",
    "temp_vs_node_trend",
    "temp_vs_node_rise_6h_vs_24h",
    "temp_vs_node_rise_24h_vs_72h",
    "node_temp_trend_6h_vs_72h",
    "power_mean_24h",
    "power_std_6h",
    "power_std_24h",
    "power_vs_node_std_6h",
    "power_vs_node_std_24h",
    "power_per_util_24h",
    "power_per_util_vs_node_24h",
    "power_per_util_vs_node_trend",
    "util_mean_24h",
    "sm_clock_mean_6h",
    "sm_clock_trend_6h_vs_72h",
    "mem_used_frac_24h",
    "throttle_thermal_24h",
    "throttle_thermal_6h",
    "throttle_hw_24h",
    "throttle_hw_6h",
    "throttle_hw_vs_node_24h",
    "throttle_power_brake_24h",
    "throttle_power_brake_vs_node_24h",
    "throttle_power_cap_24h",
    "pcie_growth_6h",
    "pcie_growth_24h",
    "pcie_growth_7d",
    "pcie_accel_6h_vs_24h",
    "pcie_peers_replaying_24h",
    "age_h",
    "samples_24h",
)
