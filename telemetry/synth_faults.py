"""Per-GPU latent processes of the synthetic fleet: a healthy GPU's noisy baseline, the precursor of each kind of
failure, and the look-alike episodes that resolve by themselves.

None of this is a reading yet: each process adds to a GPU's per-step latent rates (:class:`Channels`), from which
:mod:`telemetry.synth_readings` draws what the GPU reports. Faults that end in a failure and look-alikes that do
not are *different* processes, as in a real fleet (the physics is documented in ``docs/telemetry.md``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from telemetry.synth_nodes import GPUS_PER_SWITCH, Node
from telemetry.synth_types import Episode, FailureKind, GpuModel


@dataclass(slots=True)
class Channels:
    """Per-step latent rates for one GPU, which faults add to before readings are drawn from them."""

    sbe_rate: np.ndarray  # corrected ECC errors per hour while the memory is in use
    row_rate: np.ndarray  # new failing rows per hour (each is remapped or its page retired) while in use
    remaps: np.ndarray  # remaps that happen at a given step whatever the load (weak cells)
    temp_extra: np.ndarray
    power_extra: np.ndarray
    power_sigma: np.ndarray
    brake_p: np.ndarray
    pcie_rate: np.ndarray
    other_xid_rate: np.ndarray


def healthy_channels(rng: np.random.Generator, node: Node, slot: int, sl: slice) -> tuple[Channels, float]:
    """The latent rates of a GPU without a fault, over the steps ``sl`` of its life on ``node``: what the node
    shares with it, plus a healthy GPU's own noise. Returns them with the GPU's background soft-error rate.

    Healthy is noisy: cosmic-ray soft errors (a sparse trickle of corrected errors on some GPUs), a few chronically
    hot GPUs, a few chronically replaying links, a trickle of other XIDs."""
    length = sl.stop - sl.start
    background = rng.lognormal(math.log(0.01), 1.0) if rng.random() < 0.15 else 0.0
    ch = Channels(
        sbe_rate=np.full(length, background),
        row_rate=np.zeros(length),
        remaps=np.zeros(length),
        temp_extra=node.thermal[sl] + (rng.uniform(6, 10) if rng.random() < 0.02 else 0.0),
        power_extra=np.zeros(length),
        power_sigma=np.full(length, 8.0),
        brake_p=node.brake[sl].copy(),
        pcie_rate=node.switch_replays[slot // GPUS_PER_SWITCH, sl]
        + (rng.lognormal(math.log(1.0), 0.7) if rng.random() < 0.05 else 0.001),
        other_xid_rate=np.full(length, 0.0005),
    )
    return ch, background


def failure_kind(rng: np.random.Generator, sudden_fraction: float) -> FailureKind:
    """What a failing GPU dies of: no precursor at all for ``sudden_fraction`` of them, else mostly memory."""
    if rng.random() < sudden_fraction:
        return FailureKind.SUDDEN
    kinds = (FailureKind.MEMORY, FailureKind.THERMAL, FailureKind.LINK)
    return kinds[rng.choice(3, p=[0.6, 0.15, 0.25])]


def fatal_xid(rng: np.random.Generator, kind: FailureKind, model: GpuModel) -> int:
    """The XID a failure of ``kind`` ends with on ``model``."""
    # Contained/uncontained errors (94/95) exist from Ampere on; an older GPU reports a DBE as XID 48.
    memory = (
        ([48, 64, 92], [0.6, 0.15, 0.25])
        if model.page_retirement
        else ([94, 95, 48, 64, 92], [0.35, 0.15, 0.1, 0.15, 0.25])
    )
    options = {
        FailureKind.MEMORY: memory,
        FailureKind.THERMAL: ([79, 119, 120], [0.7, 0.15, 0.15]),
        FailureKind.LINK: ([79, 74, 119], [0.6, 0.2, 0.2]),
        FailureKind.SUDDEN: ([79, 74, 119, 120, 48, 95], [0.4, 0.15, 0.15, 0.1, 0.1, 0.1]),
    }
    codes, weights = options[kind]
    if kind is FailureKind.SUDDEN and model.page_retirement:
        codes = [48 if code == 95 else code for code in codes]
    return int(rng.choice(codes, p=weights))


def precursor(
    rng: np.random.Generator, kind: FailureKind, length: int, dt: float, ch: Channels, *, end_temp: float
) -> None:
    """Add a failing GPU's precursor, which ends at its last step. ``p`` runs from 0 at onset to 1 at the failure;
    ``end_temp`` is about where the GPU's temperature would end without the fault.

    Each precursor's lead and strength are drawn per GPU, so some are too short or too faint to see."""
    lead_h = {FailureKind.MEMORY: 72.0, FailureKind.THERMAL: 36.0, FailureKind.LINK: 48.0}[kind]
    lead = int(round(np.clip(rng.lognormal(math.log(lead_h), 0.7), 4, 240) / dt))
    onset = max(0, length - lead)
    p = np.zeros(length)
    p[onset:] = np.linspace(0, 1, length - onset, endpoint=False)
    active = np.arange(length) >= onset
    if kind is FailureKind.MEMORY:
        # Wear-out of a bank or stack: the corrected-error rate grows exponentially, and errors land on ever more
        # distinct rows (each is remapped, with XID 63), so the remap count keeps climbing too.
        r0, growth = rng.lognormal(math.log(0.6), 1.0), rng.uniform(2.0, 5.0)
        rate = np.where(active, r0 * np.exp(growth * p), 0.0)
        ch.sbe_rate += rate
        ch.row_rate += rate / rng.uniform(6, 30)  # corrected errors per newly failing row
        if rng.random() < 0.4:  # the damage is in the die or its supply too: leakage rises a little
            drift = p**2 * np.where(active, 1.0, 0.0)
            ch.temp_extra += rng.uniform(1, 4) * drift
            ch.power_extra += rng.uniform(5, 20) * drift
    elif kind is FailureKind.THERMAL:
        # The cooling path degrades: thermal resistance rises, leakage power rises with heat and feeds it back,
        # until the GPU reaches its shutdown temperature (88-98 C) and drops off the bus.
        amp, shape = float(np.clip(rng.uniform(88, 98) - end_temp, 8, 45)), rng.uniform(1.5, 3.0)
        heat = amp * p**shape
        ch.temp_extra += heat
        ch.power_extra += rng.uniform(0.5, 1.5) * heat
    elif kind is FailureKind.LINK:
        # A marginal PCIe link or power stage: replays accelerate, power turns unsteady, the GPU brakes itself.
        q0, growth = rng.lognormal(math.log(0.5), 1.0), rng.uniform(2.0, 4.5)
        ch.pcie_rate += np.where(active, q0 * np.exp(growth * p), 0.0)
        ch.power_sigma += rng.uniform(10, 60) * p
        ch.brake_p += rng.uniform(0.1, 0.5) * p
        ch.other_xid_rate += 0.04 * p


def look_alike(rng: np.random.Generator, hours: np.ndarray, marginal_share: float, ch: Channels) -> Episode:
    """A precursor-like episode that resolves by itself; ``hours`` is time since its start at each step."""
    roll = rng.random()
    if roll < 0.5:
        n_rows, span = 1, 0.0
        kind = Episode.WEAK_CELL
        if rng.random() < marginal_share:
            # A marginal bank: a handful of weak rows surface at random times over a few days (after a change in
            # temperature or access pattern), each is remapped, and then the bank is quiet. No acceleration.
            n_rows, span = int(rng.integers(3, 9)), rng.uniform(24, 96)
            kind = Episode.MARGINAL_BANK
        starts = np.sort(rng.uniform(0, span, n_rows)) if n_rows > 1 else np.zeros(1)
        for at in starts:
            # One weak cell: it errs whenever its row is read until the row is remapped (recorded within the first
            # hour or two, XID 63) and the job holding the page moves on; then it is fenced off for good.
            duration = rng.uniform(1, 10)
            rate = rng.lognormal(math.log(6), 1.0)
            ch.sbe_rate += np.where((hours >= at) & (hours < at + duration), rate, 0.0)
            recorded = np.flatnonzero(hours >= at + min(rng.uniform(0, 2), duration))
            if recorded.size:
                ch.remaps[recorded[0]] += 1 if rng.random() < 0.85 else 2
        return kind
    if roll < 0.75:
        # A blocked air path (a cable, a clogged filter): the GPU settles at a new, higher temperature within hours,
        # stays there for days, and recovers when it is fixed. It heats to a plateau; a runaway keeps accelerating.
        amp, tau, hold = rng.uniform(3, 14), rng.uniform(1, 12), rng.uniform(12, 144)
        rise = 1 - np.exp(-np.clip(hours, 0, None) / tau)
        fall = np.exp(-np.clip(hours - hold, 0, None) / tau)
        ch.temp_extra += np.where(hours >= 0, amp * rise * fall, 0.0)
        return Episode.HOT_SPELL
    # A marginal link that replays for a while, then retrains (perhaps at a lower width) and is clean again.
    duration = rng.uniform(1, 36)
    in_burst = (hours >= 0) & (hours < duration)
    ch.pcie_rate += np.where(in_burst, rng.lognormal(math.log(0.5), 1.0) * rng.uniform(5, 40), 0.0)
    return Episode.LINK_RETRAIN
