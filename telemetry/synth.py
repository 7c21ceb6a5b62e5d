"""A synthetic GPU fleet with failures, for developing and evaluating the failure predictor.

No public GPU telemetry set comes with failure labels, so ``corral telemetry synth`` writes one in the same schema
``corral telemetry export`` writes from real history. The fault model (documented in ``docs/telemetry.md``) aims to
be hard in the ways real fleets are hard, not to flatter the predictor:

- Most GPUs are healthy, but healthy is noisy: a trickle of corrected ECC errors on some GPUs, large lifetime
  counts on old ones, application XIDs from buggy jobs (sometimes a storm across a node), chronically hot GPUs,
  whole-node cooling incidents, chronically replaying PCIe links.
- Failing GPUs with precursors: memory that degrades (accelerating corrected errors, row remaps, XID 63, then an
  uncorrectable error), thermal decline (a GPU drifting hotter than its neighbours, throttling, then falling off
  the bus), or a failing link/power stage (PCIe replays, power instability, power-brake throttling). Precursor
  length and strength vary; some are too faint to see.
- Precursors that never fail: ECC bursts that fade, PCIe replay bursts, a GPU that runs hot for days and recovers.
- Sudden failures with no precursor at all (they cap the achievable recall).
- Failure risk follows a bathtub: new replacement GPUs fail more often in their first weeks.

A failed GPU leaves the fleet; its slot gets a new GPU (new UUID) after a repair delay. Everything is drawn from
``numpy.random`` seeded by ``seed``, so a (config, seed) pair always produces the same files.
"""

from __future__ import annotations

import math
import uuid as uuidlib
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from telemetry.schema import NUMERIC_COLUMNS, FailureLabel
from telemetry.table import TelemetryTable, table_from_codes
from telemetry.throttle import Throttle

HOUR = 3600.0
DEFAULT_START = 1_735_689_600.0  # 2025-01-01T00:00:00Z


@dataclass(frozen=True, slots=True)
class GpuModel:
    name: str
    memory_mb: int
    max_clock: int
    idle_clock: int
    watts_per_util: float  # board power above idle per percent of utilisation
    page_retirement: bool  # pre-Ampere: retired pages; Ampere and later: remapped rows


MODELS: tuple[tuple[GpuModel, float], ...] = (
    (GpuModel("V100-SXM2-32GB", 32_768, 1530, 135, 2.5, True), 0.2),
    (GpuModel("A100-SXM4-80GB", 81_920, 1410, 210, 3.3, False), 0.4),
    (GpuModel("H100-SXM5-80GB", 81_559, 1980, 345, 5.9, False), 0.4),
)


class FailureKind(StrEnum):
    MEMORY = "memory"
    THERMAL = "thermal"
    LINK = "link"  # PCIe/NVLink or power delivery
    SUDDEN = "sudden"


@dataclass(frozen=True, slots=True)
class FleetConfig:
    """Knobs of the generator. Rates are per GPU-year unless stated."""

    gpus: int = 256
    days: float = 30.0
    seed: int = 0
    interval_s: int = 3600
    start: float = DEFAULT_START
    gpus_per_node: int = 8
    failure_rate: float = 0.15  # fatal failures; large training fleets report roughly 0.1-0.2 per GPU-year
    sudden_fraction: float = 0.3  # failures with no precursor
    false_precursor_rate: float = 0.4  # precursor episodes on GPUs that do not fail
    infant_factor: float = 4.0  # extra hazard multiplier for a brand-new GPU, decaying over ~2 weeks
    repair_hours: tuple[float, float] = (12.0, 96.0)

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.days <= 0 or self.interval_s < 60 or self.gpus_per_node < 1:
            raise ValueError("gpus and gpus_per_node must be >= 1, days > 0 and interval_s >= 60")
        if not 0 <= self.sudden_fraction <= 1 or self.failure_rate < 0 or self.false_precursor_rate < 0:
            raise ValueError("rates must be >= 0 and sudden_fraction within [0, 1]")


@dataclass(frozen=True, eq=False)
class Fleet:
    table: TelemetryTable
    labels: list[FailureLabel]
    #: GPU UUID -> failure kind, for GPUs that failed (ground truth beyond labels.csv, for tests and docs).
    kinds: dict[str, FailureKind] = field(default_factory=dict)
    #: GPU UUID -> kinds of the precursor-like episodes it had without failing (``weak_cell``, ``pcie``, ``hot``).
    false_alarm_gpus: dict[str, tuple[str, ...]] = field(default_factory=dict)


def generate(config: FleetConfig) -> Fleet:
    """Simulate the fleet; returns the table and the failure labels."""
    return _Generator(config).run()


# ---------------------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Node:
    name: str
    model: GpuModel
    ambient: float
    busy: np.ndarray  # bool per step
    util: np.ndarray  # float per step (0 when idle)
    mem_frac: np.ndarray
    thermal: np.ndarray  # extra degrees from cooling incidents
    storm: np.ndarray  # bool per step: a buggy job is raising application XIDs


@dataclass(slots=True)
class _Channels:
    """Per-step latent rates for one GPU, which faults add to before readings are drawn from them."""

    sbe_rate: np.ndarray  # corrected ECC errors per hour from degrading memory
    burst_rate: np.ndarray  # corrected ECC errors per hour from weak cells that a single remap will fix
    burst_remaps: np.ndarray  # rows remapped at the end of each weak-cell burst
    pcie_rate: np.ndarray
    temp_extra: np.ndarray
    power_sigma: np.ndarray
    brake_p: np.ndarray
    other_xid_rate: np.ndarray


@dataclass(slots=True)
class _Columns:
    parts: dict[str, list[np.ndarray]] = field(default_factory=lambda: {c: [] for c in NUMERIC_COLUMNS})
    ts: list[np.ndarray] = field(default_factory=list)
    node_codes: list[np.ndarray] = field(default_factory=list)
    gpu_codes: list[np.ndarray] = field(default_factory=list)
    node_names: list[str] = field(default_factory=list)
    gpu_names: list[str] = field(default_factory=list)


class _Generator:
    def __init__(self, config: FleetConfig) -> None:
        self.c = config
        self.steps = int(round(config.days * 86_400 / config.interval_s))
        self.dt_h = config.interval_s / HOUR
        self.t = config.start + config.interval_s * np.arange(1, self.steps + 1, dtype=np.float64)
        self.labels: list[FailureLabel] = []
        self.kinds: dict[str, FailureKind] = {}
        self.false_alarm: dict[str, tuple[str, ...]] = {}
        self.out = _Columns()

    def run(self) -> Fleet:
        n_nodes = math.ceil(self.c.gpus / self.c.gpus_per_node)
        node_seeds = np.random.SeedSequence(self.c.seed).spawn(n_nodes)
        remaining = self.c.gpus
        for i, ss in enumerate(node_seeds):
            slots = min(self.c.gpus_per_node, remaining)
            remaining -= slots
            node_rng, *slot_seeds = ss.spawn(slots + 1)
            node = self._node(f"node{i:04d}", np.random.default_rng(node_rng))
            for seed in slot_seeds:
                self._slot(node, np.random.default_rng(seed))
        return self._finish()

    # -- nodes --------------------------------------------------------------------------------------------------

    def _node(self, name: str, rng: np.random.Generator) -> _Node:
        models = [m for m, _ in MODELS]
        model = models[rng.choice(len(models), p=[p for _, p in MODELS])]
        busy = np.zeros(self.steps, dtype=bool)
        util = np.zeros(self.steps)
        mem = np.full(self.steps, 0.01)
        k = 0
        is_busy = rng.random() < 0.8
        while k < self.steps:
            hours = rng.lognormal(math.log(18), 1.0) if is_busy else rng.exponential(4.0)
            n = max(1, int(round(hours / self.dt_h)))
            if is_busy:
                busy[k : k + n] = True
                util[k : k + n] = rng.uniform(55, 98)
                mem[k : k + n] = rng.uniform(0.35, 0.95)
            k += n
            is_busy = not is_busy
        util = np.where(busy, np.clip(util + rng.normal(0, 4, self.steps), 0, 100), rng.uniform(0, 2, self.steps))
        thermal = np.zeros(self.steps)
        for start, length in self._episodes(rng, rate_per_year=2.0, hours=(3, 36)):
            thermal[start : start + length] += rng.uniform(5, 14)  # a CRAC unit or fan wall failing
        storm = np.zeros(self.steps, dtype=bool)
        for start, length in self._episodes(rng, rate_per_year=6.0, hours=(1, 12)):
            storm[start : start + length] = True
        return _Node(name, model, rng.normal(0, 2.5), busy, util, mem, thermal, storm)

    def _starts(self, rng: np.random.Generator, *, rate_per_year: float, span: int) -> list[int]:
        """Start steps of a Poisson process with ``rate_per_year`` over ``span`` steps."""
        expected = rate_per_year * span * self.dt_h / 8760.0
        return [int(rng.integers(0, max(1, span))) for _ in range(rng.poisson(expected))]

    def _episodes(
        self, rng: np.random.Generator, *, rate_per_year: float, hours: tuple[float, float]
    ) -> list[tuple[int, int]]:
        """(start, length) of episodes over the whole simulation, lengths uniform in ``hours``."""
        out = []
        for _ in range(rng.poisson(rate_per_year * self.steps * self.dt_h / 8760.0)):
            start = int(rng.integers(0, self.steps))  # start, then length: reordering draws changes every fleet
            out.append((start, max(1, int(round(rng.uniform(*hours) / self.dt_h)))))
        return out

    # -- GPU slots ------------------------------------------------------------------------------------------------

    def _slot(self, node: _Node, rng: np.random.Generator) -> None:
        birth = 0
        age_days = rng.uniform(30, 900)
        while birth < self.steps:
            death = self._gpu(node, rng, birth, age_days)
            if death is None:
                return
            birth = death + 1 + int(round(rng.uniform(*self.c.repair_hours) / self.dt_h))
            age_days = 0.0

    def _gpu(self, node: _Node, rng: np.random.Generator, birth: int, age_days: float) -> int | None:
        """Simulate one GPU from ``birth``; returns the step of its fatal failure, or None if it survives."""
        c, dt = self.c, self.dt_h
        span = self.steps - birth
        uuid = f"GPU-{uuidlib.UUID(bytes=rng.bytes(16))}"
        age_h = age_days * 24 + dt * np.arange(span)
        hazard = c.failure_rate / 8760.0 * (1 + c.infant_factor * np.exp(-age_h / (24 * 15))) * dt
        death = int(np.searchsorted(np.cumsum(hazard), rng.exponential(1.0)))
        fails = death < span
        length = death + 1 if fails else span
        sl = slice(birth, birth + length)
        model = node.model
        util, busy = node.util[sl].copy(), node.busy[sl]
        util[busy] = np.clip(util[busy] + rng.normal(0, 3, busy.sum()), 0, 100)

        # Baselines shared by every GPU.
        background = rng.lognormal(math.log(0.01), 1.0) if rng.random() < 0.15 else 0.0
        ch = _Channels(
            sbe_rate=np.full(length, background),
            burst_rate=np.zeros(length),
            burst_remaps=np.zeros(length),
            pcie_rate=np.full(length, rng.lognormal(math.log(1.0), 0.7) if rng.random() < 0.05 else 0.001),
            temp_extra=node.thermal[sl] + (rng.uniform(6, 10) if rng.random() < 0.02 else 0.0),
            power_sigma=np.full(length, 8.0),
            brake_p=np.zeros(length),
            other_xid_rate=np.full(length, 0.0005),
        )

        kind: FailureKind | None = None
        if fails:
            kind = self._failure_kind(rng)
            if kind is not FailureKind.SUDDEN:
                lead = int(round(np.clip(rng.lognormal(math.log(40), 0.7), 4, 240) / dt))
                onset = max(0, length - lead)
                p = np.zeros(length)
                p[onset:] = np.linspace(0, 1, length - onset, endpoint=False)
                _precursor(rng, kind, p, ch)
        for start in self._starts(rng, rate_per_year=c.false_precursor_rate, span=length):
            episode = _false_precursor(rng, (np.arange(length) - start) * dt, ch)
            if not fails:
                self.false_alarm[uuid] = (*self.false_alarm.get(uuid, ()), episode)

        # Readings.
        temp = 27 + node.ambient + rng.normal(0, 1.5) + 0.38 * util + ch.temp_extra + rng.normal(0, 1.2, length)
        thermal_p = np.clip((temp - 83) / 6, 0, 1)
        sw_thermal = rng.random(length) < thermal_p
        hw_thermal = temp > 89
        clock = model.idle_clock + (model.max_clock - model.idle_clock) * np.minimum(1, util / 40)
        brake = rng.random(length) < ch.brake_p
        clock = clock * (1 - 0.25 * np.clip((temp - 85) / 10, 0, 1)) * (1 - 0.15 * brake)
        power = 65 + model.watts_per_util * util * (clock / model.max_clock) + rng.normal(0, 1, length) * ch.power_sigma
        power = np.maximum(power, 40)
        cap = busy & (util > 90) & (rng.random(length) < 0.3)
        throttle = (
            np.where(~busy, int(Throttle.GPU_IDLE), 0)
            | np.where(sw_thermal, int(Throttle.SW_THERMAL_SLOWDOWN), 0)
            | np.where(hw_thermal, int(Throttle.HW_THERMAL_SLOWDOWN | Throttle.HW_SLOWDOWN), 0)
            | np.where(cap, int(Throttle.SW_POWER_CAP), 0)
            | np.where(brake, int(Throttle.HW_POWER_BRAKE_SLOWDOWN | Throttle.HW_SLOWDOWN), 0)
        )
        mem_used = np.where(busy, node.mem_frac[sl] * model.memory_mb, rng.uniform(300, 900, length))

        # Degrading memory spreads over many rows, so its remaps keep coming; a weak cell costs one remap.
        degrading = rng.poisson(ch.sbe_rate * dt)
        sbe_new = degrading + rng.poisson(ch.burst_rate * dt)
        sbe0 = rng.poisson(background * age_days * 24 * 0.5) + (rng.integers(100, 5000) if rng.random() < 0.05 else 0)
        sbe_total = sbe0 + np.cumsum(sbe_new)
        repairs_new = rng.poisson(degrading / rng.uniform(20, 80)) + ch.burst_remaps
        repairs_total = int(rng.poisson(sbe0 / 200)) + np.cumsum(repairs_new)
        dbe_total = np.full(length, 1 if rng.random() < 0.02 else 0)
        pcie_total = np.cumsum(rng.poisson(ch.pcie_rate * dt))

        # XIDs: one code per row, the most serious one of the interval.
        xid = np.zeros(length, dtype=np.int64)
        app_rate = np.where(busy, 0.002, 0.0) + np.where(node.storm[sl] & busy, 0.3, 0.0)
        app_hits = rng.random(length) < 1 - np.exp(-app_rate * dt)
        xid[app_hits] = rng.choice([13, 31, 43, 45, 68], size=int(app_hits.sum()), p=[0.3, 0.35, 0.2, 0.1, 0.05])
        other_hits = rng.random(length) < 1 - np.exp(-ch.other_xid_rate * dt)
        xid[other_hits] = rng.choice([61, 62, 8], size=int(other_hits.sum()))
        xid[repairs_new > 0] = 63

        if fails:
            assert kind is not None
            code = self._fatal_xid(rng, kind)
            xid[-1] = code
            if code in (48, 94, 95):
                dbe_total[-1] += 1
            failed_at = self.t[birth + length - 1] - rng.uniform(0, c.interval_s)
            self.labels.append(FailureLabel(gpu_uuid=uuid, failed_at=float(failed_at), cause=f"xid_{code}"))
            self.kinds[uuid] = kind

        retired = repairs_total if model.page_retirement else np.full(length, np.nan)
        remapped = np.full(length, np.nan) if model.page_retirement else repairs_total
        self._emit(
            node.name,
            uuid,
            sl,
            {
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
            },
        )
        return birth + length - 1 if fails else None

    def _failure_kind(self, rng: np.random.Generator) -> FailureKind:
        if rng.random() < self.c.sudden_fraction:
            return FailureKind.SUDDEN
        kinds = (FailureKind.MEMORY, FailureKind.THERMAL, FailureKind.LINK)
        return kinds[rng.choice(3, p=[0.6, 0.15, 0.25])]

    @staticmethod
    def _fatal_xid(rng: np.random.Generator, kind: FailureKind) -> int:
        options = {
            FailureKind.MEMORY: ([48, 94, 95, 64, 92], [0.4, 0.3, 0.15, 0.05, 0.1]),
            FailureKind.THERMAL: ([79, 119, 120], [0.7, 0.15, 0.15]),
            FailureKind.LINK: ([79, 74, 119], [0.6, 0.2, 0.2]),
            FailureKind.SUDDEN: ([79, 74, 119, 120, 48, 95], [0.4, 0.15, 0.15, 0.1, 0.1, 0.1]),
        }
        codes, weights = options[kind]
        return int(rng.choice(codes, p=weights))

    def _emit(self, node: str, uuid: str, sl: slice, cols: dict[str, np.ndarray]) -> None:
        out = self.out
        n = sl.stop - sl.start
        if not out.node_names or out.node_names[-1] != node:
            out.node_names.append(node)
        out.ts.append(self.t[sl])
        out.node_codes.append(np.full(n, len(out.node_names) - 1, dtype=np.int32))
        out.gpu_codes.append(np.full(n, len(out.gpu_names), dtype=np.int32))
        out.gpu_names.append(uuid)
        for c in NUMERIC_COLUMNS:
            out.parts[c].append(np.asarray(cols[c], dtype=np.float64))

    def _finish(self) -> Fleet:
        out = self.out
        table = table_from_codes(
            np.concatenate(out.ts),
            np.concatenate(out.node_codes),
            out.node_names,
            np.concatenate(out.gpu_codes),
            out.gpu_names,
            {c: np.concatenate(parts) for c, parts in out.parts.items()},
        )
        return Fleet(
            table=table,
            labels=sorted(self.labels, key=lambda lb: lb.failed_at),
            kinds=dict(self.kinds),
            false_alarm_gpus=dict(self.false_alarm),
        )


def _precursor(rng: np.random.Generator, kind: FailureKind, p: np.ndarray, ch: _Channels) -> None:
    """Add a failing GPU's precursor; ``p`` runs from 0 at onset towards 1 at the failure (0 before onset)."""
    active = p > 0
    if kind is FailureKind.MEMORY:
        r0, growth = rng.lognormal(math.log(0.8), 1.0), rng.uniform(2.0, 4.5)
        ch.sbe_rate += np.where(active, r0 * np.exp(growth * p), 0.0)
    elif kind is FailureKind.THERMAL:
        ch.temp_extra += rng.uniform(10, 25) * p**1.5
    elif kind is FailureKind.LINK:
        q0, growth = rng.lognormal(math.log(0.5), 1.0), rng.uniform(2.0, 4.5)
        ch.pcie_rate += np.where(active, q0 * np.exp(growth * p), 0.0)
        ch.power_sigma += rng.uniform(20, 80) * p
        ch.brake_p += 0.4 * p
        ch.other_xid_rate += 0.05 * p


def _false_precursor(rng: np.random.Generator, hours: np.ndarray, ch: _Channels) -> str:
    """A precursor-like episode that resolves by itself; ``hours`` is time since its start at each step. Returns
    the episode's kind."""
    roll = rng.random()
    if roll < 0.5:
        # A weak memory cell: corrected errors pour in until the driver remaps its row, then stop. One in four
        # episodes has a few such cells in succession over a day or three, which looks more like decline.
        bursts = 1 if rng.random() < 0.75 else int(rng.integers(2, 5))
        at = 0.0
        for _ in range(bursts):
            duration = rng.uniform(1, 12)
            rate = rng.lognormal(math.log(0.8), 1.0) * rng.uniform(5, 60)
            ch.burst_rate += np.where((hours >= at) & (hours < at + duration), rate, 0.0)
            end = np.flatnonzero(hours >= at + duration)
            if end.size:
                ch.burst_remaps[end[0]] += 1
            at += duration + rng.uniform(2, 30)
        return "weak_cell"
    if roll < 0.75:  # PCIe replay burst, e.g. a reseated cable or a noisy neighbour on the switch
        duration = rng.uniform(2, 48)
        in_burst = (hours >= 0) & (hours < duration)
        ch.pcie_rate += np.where(in_burst, rng.lognormal(math.log(0.5), 1.0) * rng.uniform(5, 40), 0.0)
        ch.power_sigma += np.where(in_burst, rng.uniform(5, 25), 0.0)
        return "pcie"
    # runs hot for days, then recovers (dust, a fan curve, a neighbour's exhaust)
    ramp, hold, amp = rng.uniform(6, 48), rng.uniform(12, 120), rng.uniform(4, 12)
    shape = np.clip(hours / ramp, 0, 1) * (hours < ramp + hold)
    ch.temp_extra += amp * shape
    return "hot"
