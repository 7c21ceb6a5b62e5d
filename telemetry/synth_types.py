"""The synthetic fleet generator's vocabulary: what it is asked for, the GPU models it draws, the kinds of failure and
look-alike episode it simulates, and the :class:`Fleet` it returns.

Defined here, below the generator's physics modules (``synth_nodes``, ``synth_faults``, ``synth_readings``) that
use them; :mod:`telemetry.synth` re-exports every name, and callers import them from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from telemetry.schema import FailureLabel
from telemetry.table import TelemetryTable

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
    MEMORY = "memory"  # degrading HBM
    THERMAL = "thermal"  # thermal runaway
    LINK = "link"  # PCIe link or power delivery
    SUDDEN = "sudden"  # no precursor


class Episode(StrEnum):
    """Precursor-like episodes on a single GPU that resolve by themselves (each its own process)."""

    WEAK_CELL = "weak_cell"
    MARGINAL_BANK = "marginal_bank"
    HOT_SPELL = "hot_spell"
    LINK_RETRAIN = "link_retrain"


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
    false_precursor_rate: float = 0.4  # single-GPU episodes that look like a precursor and resolve by themselves
    #: Share of the memory look-alikes that are marginal banks (several weak rows over days) rather than one weak
    #: cell. Marginal banks are the hardest look-alike; this is the generator's main difficulty knob (calibrated,
    #: see docs/telemetry.md).
    marginal_bank_share: float = 0.15
    infant_factor: float = 4.0  # extra hazard multiplier for a brand-new GPU, decaying over ~2 weeks
    repair_hours: tuple[float, float] = (12.0, 96.0)

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.days <= 0 or self.interval_s < 60 or self.gpus_per_node < 1:
            raise ValueError("gpus and gpus_per_node must be >= 1, days > 0 and interval_s >= 60")
        if not 0 <= self.sudden_fraction <= 1 or self.failure_rate < 0 or self.false_precursor_rate < 0:
            raise ValueError("rates must be >= 0 and sudden_fraction within [0, 1]")
        if not 0 <= self.marginal_bank_share <= 1:
            raise ValueError("marginal_bank_share must be within [0, 1]")


@dataclass(frozen=True, eq=False)
class Fleet:
    table: TelemetryTable
    labels: list[FailureLabel]
    #: GPU UUID -> failure kind, for GPUs that failed (ground truth beyond labels.csv, for tests and docs).
    kinds: dict[str, FailureKind] = field(default_factory=dict)
    #: GPU UUID -> the :class:`Episode` kinds it had without failing.
    false_alarm_gpus: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: Every look-alike episode on any GPU, failing or not: (GPU UUID, :class:`Episode`, start, epoch seconds).
    episodes: tuple[tuple[str, Episode, float], ...] = ()
    #: Node-wide events: (node, ``hot_aisle`` | ``power_brake``, start, end), epoch seconds.
    node_events: tuple[tuple[str, str, float, float], ...] = ()
