"""Node-level processes of the synthetic fleet: what every GPU of one node shares.

A node has one GPU model, one job load (busy spells with their utilisation and memory use), and node-wide events
that look like a failing GPU but hit all of them at once (or both GPUs behind one PCIe switch): a hot aisle, a PSU
asserting the power brake, a PCIe switch event, a buggy job raising application XIDs. Telling these apart from a
single GPU's precursor is part of what the failure predictor must learn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from telemetry.synth_steps import StepGrid
from telemetry.synth_types import MODELS, GpuModel

GPUS_PER_SWITCH = 2  # HGX boards put two GPUs behind each PCIe switch

#: A node-wide event as :class:`~telemetry.synth_types.Fleet` reports it: (node, kind, start, end), epoch seconds.
NodeEvent = tuple[str, str, float, float]


@dataclass(slots=True)
class Node:
    name: str
    model: GpuModel
    ambient: float
    busy: np.ndarray  # bool per step
    util: np.ndarray  # float per step (0 when idle)
    mem_frac: np.ndarray
    thermal: np.ndarray  # extra degrees from cooling incidents, the same for every GPU of the node
    brake: np.ndarray  # probability per step of a PSU-driven power-brake assertion, every GPU of the node
    switch_replays: np.ndarray  # (switches, steps): PCIe replays per hour from a switch event, shared by its GPUs
    storm: np.ndarray  # bool per step: a buggy job is raising application XIDs


def make_node(
    name: str, rng: np.random.Generator, grid: StepGrid, *, gpus_per_node: int, events: list[NodeEvent]
) -> Node:
    """Draw one node; its node-wide events are appended to ``events``. The processes draw from ``rng`` in this
    order, and reordering them would change every fleet."""
    models = [m for m, _ in MODELS]
    model = models[rng.choice(len(models), p=[p for _, p in MODELS])]
    busy, util, mem = _load(rng, grid)
    thermal = _hot_aisles(rng, grid, name, events)
    brake = _power_brakes(rng, grid, name, events)
    switch_replays = _switch_events(rng, grid, gpus_per_node)
    storm = _xid_storms(rng, grid)
    return Node(name, model, rng.normal(0, 2.5), busy, util, mem, thermal, brake, switch_replays, storm)


def _load(rng: np.random.Generator, grid: StepGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Busy and idle spells in turn (busy ones lognormal around 18 h, idle ones exponential around 4 h): whether a
    job runs, its utilisation and the share of memory it uses, per step."""
    steps = grid.steps
    busy = np.zeros(steps, dtype=bool)
    util = np.zeros(steps)
    mem = np.full(steps, 0.01)
    k = 0
    is_busy = rng.random() < 0.8
    while k < steps:
        hours = rng.lognormal(math.log(18), 1.0) if is_busy else rng.exponential(4.0)
        n = max(1, int(round(hours / grid.dt_h)))
        if is_busy:
            busy[k : k + n] = True
            util[k : k + n] = rng.uniform(55, 98)
            mem[k : k + n] = rng.uniform(0.35, 0.95)
        k += n
        is_busy = not is_busy
    util = np.where(busy, np.clip(util + rng.normal(0, 4, steps), 0, 100), rng.uniform(0, 2, steps))
    return busy, util, mem


def _hot_aisles(rng: np.random.Generator, grid: StepGrid, name: str, events: list[NodeEvent]) -> np.ndarray:
    """A hot aisle: a CRAC unit or fan wall failing heats every GPU of the node alike, ramping up and back down."""
    steps, dt = grid.steps, grid.dt_h
    thermal = np.zeros(steps)
    for start, length in grid.episodes(rng, rate_per_year=3.0, hours=(3, 72)):
        amp, ramp = rng.uniform(4, 15), rng.uniform(1, 8)
        local = np.arange(length) * dt
        shape = np.minimum(1.0, local / ramp) * np.minimum(1.0, (length * dt - local) / ramp)
        thermal[start : start + length] += (amp * shape)[: steps - start]
        events.append((name, "hot_aisle", *grid.span(start, length)))
    return thermal


def _power_brakes(rng: np.random.Generator, grid: StepGrid, name: str, events: list[NodeEvent]) -> np.ndarray:
    """A PSU or PDU event asserts the external power brake on every GPU of the node for a while."""
    brake = np.zeros(grid.steps)
    for start, length in grid.episodes(rng, rate_per_year=2.0, hours=(1, 12)):
        brake[start : start + length] = rng.uniform(0.2, 0.8)
        events.append((name, "power_brake", *grid.span(start, length)))
    return brake


def _switch_events(rng: np.random.Generator, grid: StepGrid, gpus_per_node: int) -> np.ndarray:
    """A PCIe switch or retimer event makes both GPUs behind the switch replay."""
    switches = math.ceil(gpus_per_node / GPUS_PER_SWITCH)
    switch_replays = np.zeros((switches, grid.steps))
    for s in range(switches):
        for start, length in grid.episodes(rng, rate_per_year=1.0, hours=(1, 36)):
            switch_replays[s, start : start + length] += rng.lognormal(math.log(4), 1.0)
    return switch_replays


def _xid_storms(rng: np.random.Generator, grid: StepGrid) -> np.ndarray:
    """A buggy job raising application XIDs on every GPU it runs on, for a few hours."""
    storm = np.zeros(grid.steps, dtype=bool)
    for start, length in grid.episodes(rng, rate_per_year=6.0, hours=(1, 12)):
        storm[start : start + length] = True
    return storm
