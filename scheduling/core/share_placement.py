"""Where waiting shares go: greedy first-fit, fragmentation-aware best-fit, and maximum-weight matching (#17).

Every placer takes the shared GPUs as they are and the waiting shares in queue order, and returns where each share
it could place starts, with the thread limit it gets. All three ask :func:`scheduling.core.sharing.fits` before
every placement and apply each placement before the next one, so none can break the rule, whatever it prefers.

- ``first-fit``: each share, in queue order, on the first GPU it fits (GPUs in the order given).
- ``best-fit``: each share on the GPU it leaves with the least stranded compute: a GPU that keeps a sliver of
  room too small for the smallest waiting share is worse than one that is filled exactly or keeps usable room
  (the fragmentation idea of Weng et al., ATC '23); ties go to the GPU left with the least room.
- ``matching`` (MuxFlow): waiting shares and GPUs with room are the two sides of a bipartite graph whose edge
  weights are the predicted co-location benefit (:func:`benefit`); ``scipy.optimize.linear_sum_assignment`` picks
  the pairs of largest total weight, each GPU taking at most one new client per round. Rounds repeat while some
  share still fits somewhere, so more shares than GPUs is fine. Infeasible pairs never carry a placement. A share
  may wait a round for a GPU in use, and empty GPUs are offered only as a burst needs them, so shares that arrive
  together still pack (:func:`matching`).

Online shares are placed before offline ones by every placer (they are latency-critical and at most one fits a
GPU); the matching treats them in its first rounds like any other share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduling.core.model import JobId
from scheduling.core.sharing import (
    DEFAULT_POLICY,
    Shape,
    ShareDemand,
    SharedGpuState,
    SharingPolicy,
    WorkloadClass,
    fits,
    neighbour_load,
    offline_capacity,
    offline_in_use,
    share_shape,
    tenant_for,
)

#: Weights of :func:`benefit`'s terms (docs/sharing.md explains each).
W_MEMORY = 0.25
W_RISK = 0.25
W_FILL = 1.0
W_QUEUE = 0.25
W_ONLINE = 1.0
#: The most waiting shares one matching round considers (the oldest first): bounds the cost matrix.
MATCH_WINDOW = 256
_INFEASIBLE = -1e9


@dataclass(frozen=True, slots=True)
class SharePlacement:
    """Start ``job_id`` on shared GPU ``index`` (its position in the list the placer was given) with this thread
    limit (a fraction of the GPU) and memory limit."""

    job_id: JobId
    index: int
    grant: float
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class PlaceResult:
    """What a placer decided, and the GPUs as they are with those placements made."""

    placements: tuple[SharePlacement, ...]
    gpus: tuple[SharedGpuState, ...]


Placer = Callable[[Sequence[SharedGpuState], Sequence[ShareDemand], float, SharingPolicy], PlaceResult]


def _online_first(waiting: Sequence[ShareDemand]) -> list[ShareDemand]:
    return sorted(waiting, key=lambda d: d.workload_class != WorkloadClass.ONLINE)  # stable: queue order kept


def _apply(
    gpus: list[SharedGpuState], index: int, demand: ShareDemand, now: float, policy: SharingPolicy
) -> SharePlacement:
    tenant = tenant_for(gpus[index], demand, started=now, policy=policy)
    gpus[index] = gpus[index].with_tenant(tenant)
    return SharePlacement(demand.job_id, index, tenant.grant, tenant.memory_bytes)


def first_fit(
    gpus: Sequence[SharedGpuState],
    waiting: Sequence[ShareDemand],
    now: float = 0.0,
    policy: SharingPolicy = DEFAULT_POLICY,
) -> PlaceResult:
    """Each share, in queue order (online first), on the first GPU it fits."""
    state = list(gpus)
    out = []
    # Shape -> the first GPU it may still fit: those before refused it and have only filled up since (past the
    # last GPU: it fits none, and its later shares are not asked again).
    first_possible: dict[Shape, int] = {}
    for demand in _online_first(waiting):
        shape = share_shape(demand)
        start = first_possible.get(shape, 0)
        index = next((i for i in range(start, len(state)) if fits(state[i], demand, policy)), len(state))
        first_possible[shape] = index
        if index < len(state):
            out.append(_apply(state, index, demand, now, policy))
    return PlaceResult(tuple(out), tuple(state))


def room_after(state: SharedGpuState, policy: SharingPolicy = DEFAULT_POLICY) -> float:
    """Compute left for more offline work on this GPU."""
    return max(0.0, offline_capacity(state, policy) - offline_in_use(state))


def best_fit(
    gpus: Sequence[SharedGpuState],
    waiting: Sequence[ShareDemand],
    now: float = 0.0,
    policy: SharingPolicy = DEFAULT_POLICY,
) -> PlaceResult:
    """Each share, in queue order (online first), where it strands the least compute, then leaves the least room.

    Stranded: room left that is above zero but below the smallest share still waiting, so no waiting share could
    use it. A GPU nobody uses yet is taken only when no used GPU fits (it keeps whole GPUs whole)."""
    state = list(gpus)
    order = _online_first(waiting)
    # smallest_after[n]: the smallest ask behind share n (0 for the last), for the stranded-room test.
    smallest_after = [0.0] * len(order)
    for n in range(len(order) - 2, -1, -1):
        smallest_after[n] = min(order[n + 1].gpu_fraction, smallest_after[n + 1] or 1.0)  # 0 behind the last
    out = []
    hopeless: set[Shape] = set()
    # Shape -> per GPU, the room placing that shape there leaves (None: it does not fit); a GPU's entries are dropped
    # when a placement changes it, so each shape asks each GPU again only after that GPU changed.
    room: dict[Shape, dict[int, float | None]] = {}
    for n, demand in enumerate(order):
        shape = share_shape(demand)
        if shape in hopeless:
            continue
        known = room.setdefault(shape, {})
        smallest = smallest_after[n]
        best: tuple[tuple[bool, float, float], int] | None = None
        for i, g in enumerate(state):
            if i not in known:
                fit = fits(g, demand, policy)
                known[i] = room_after(g.with_tenant(tenant_for(g, demand, policy=policy)), policy) if fit else None
            left = known[i]
            if left is None:
                continue
            stranded = left if 0 < left < smallest else 0.0
            key = (not g.tenants, stranded, left)
            if best is None or key < best[0]:
                best = (key, i)
        if best is None:
            hopeless.add(shape)
        else:
            out.append(_apply(state, best[1], demand, now, policy))
            for entries in room.values():
                entries.pop(best[1], None)
    return PlaceResult(tuple(out), tuple(state))


def benefit(
    state: SharedGpuState, demand: ShareDemand, position: float = 0.0, policy: SharingPolicy = DEFAULT_POLICY
) -> float:
    """Predicted benefit of starting ``demand`` on this GPU (call only when it fits); larger is better.

    ``speed + W_FILL * fill - W_MEMORY * memory - W_RISK * (1 + evictions) * risk + W_QUEUE * (1 - position)
    (+ W_ONLINE for online work)``:

    - speed: the share's predicted speed relative to running alone with its ask: its grant's alone speed over its
      ask's, times what the neighbours (the online client at its measured load, offline clients at their grant)
      leave it by the interference model;
    - fill: compute committed on the GPU afterwards (packing keeps other GPUs empty: less fragmentation);
    - memory: memory pressure afterwards (limits plus reserve over the GPU's memory);
    - risk: for offline work next to an online client, how close that client runs to its full share (its measured
      load over its share): the closer, the likelier its next rise evicts the newcomer. A job with past evictions
      (its history) weighs this risk more;
    - position: the share's place in the queue, 0 (oldest) to 1, so older shares win ties and do not starve;
    - and ``W_ONLINE`` for an online share, which is latency-critical: it wins a GPU both could take.
    """
    placed, risk = _benefit_terms(state, demand, policy)
    return (
        placed
        - W_RISK * (1 + demand.evictions) * risk
        + W_QUEUE * (1.0 - position)
        + (W_ONLINE if demand.workload_class == WorkloadClass.ONLINE else 0.0)
    )


def _benefit_terms(state: SharedGpuState, demand: ShareDemand, policy: SharingPolicy) -> tuple[float, float]:
    """The part of :func:`benefit` that depends only on the share's shape and the GPU (``speed + W_FILL * fill -
    W_MEMORY * memory``), and the risk, which the share's own history weighs. The matching asks this once per shape
    and GPU, and adds each share's history and queue position (in :func:`benefit`'s order, so the sums are equal)."""
    tenant = tenant_for(state, demand, policy=policy)
    after = state.with_tenant(tenant)
    model = policy.model
    speed = min(1.0, model.alone(tenant.grant) / model.alone(demand.gpu_fraction))
    speed *= model.factor(neighbour_load(after, demand.job_id))
    online = after.online
    online_part = 0.0 if online is None else (online.fraction if after.online_load is None else after.online_load)
    fill = min(1.0, online_part + offline_in_use(after))
    memory = (after.memory_used + after.gpu.reserve_bytes) / after.gpu.memory_bytes
    risk = 0.0
    if demand.workload_class == WorkloadClass.OFFLINE and state.online is not None:
        load = state.online.fraction if state.online_load is None else state.online_load
        risk = min(1.0, load / state.online.fraction)
    return speed + W_FILL * fill - W_MEMORY * memory, risk


def matching(
    gpus: Sequence[SharedGpuState],
    waiting: Sequence[ShareDemand],
    now: float = 0.0,
    policy: SharingPolicy = DEFAULT_POLICY,
) -> PlaceResult:
    """Rounds of maximum-weight bipartite matching of waiting shares to GPUs (see the module docstring).

    In each round every feasible (share, GPU) pair gets its :func:`benefit`; infeasible pairs get a weight so low
    that the assignment uses as many feasible pairs as it can before it looks at weights, and any infeasible pair
    it still returns is dropped. A round that places nothing ends the placer.

    Each GPU takes one new client per round, so two shares that would both do best on the same GPU in use cannot
    both go there in one round. Left alone, the assignment would put the second on an empty GPU, and a burst of
    shares would spread over empty GPUs one by one. Two things keep it packing:

    - *Waiting a round*: a share that fits a GPU in use may instead wait for the next round, with a weight just
      below its best benefit on a GPU in use. It takes an empty GPU now only where the benefit says that is better
      than where it could join.
    - *Opening empty GPUs in proportion*: empty GPUs alike (same memory, reserve and client limit) are
      interchangeable, so a round offers only as many of each kind as the shares that fit no GPU in use could
      fill (their fractions summed, rounded up; at least one).
    """
    # Imported here, not at the top: scipy.optimize takes about half a second to import, which every process that
    # imports the live round would otherwise pay at start (web servers included), and the first round in a worker.
    from scipy.optimize import linear_sum_assignment

    state = list(gpus)
    left = _online_first(waiting)
    n_all = max(1, len(left) - 1)
    position = {d.job_id: i / n_all for i, d in enumerate(left)}
    out: list[SharePlacement] = []
    hopeless: set[Shape] = set()
    while left:
        window = left[:MATCH_WINDOW]
        columns, weights = _round_weights(state, window, position, policy)
        feasible_rows = np.flatnonzero((weights > _INFEASIBLE).any(axis=1))  # a "wait" column is beside a real one
        placeable = set(feasible_rows.tolist())
        hopeless.update(share_shape(d) for r, d in enumerate(window) if r not in placeable)
        if feasible_rows.size == 0:
            left = [d for d in left if share_shape(d) not in hopeless]  # look further down the queue
            continue
        rows, cols = linear_sum_assignment(weights[feasible_rows], maximize=True)
        placed: set[JobId] = set()
        for r, c in zip(rows, cols, strict=True):
            if c >= len(columns):
                continue  # the share waits for the next round (its "wait" column)
            demand = window[int(feasible_rows[r])]
            index = columns[c]
            # A pair may have been feasible only before another placement of this round on the same GPU: never,
            # since each GPU takes one client per round; the check stays because the rule is the contract.
            if weights[feasible_rows[r], c] > _INFEASIBLE and fits(state[index], demand, policy):
                out.append(_apply(state, index, demand, now, policy))
                placed.add(demand.job_id)
        if not placed:
            break
        left = [d for d in left if d.job_id not in placed and share_shape(d) not in hopeless]
    return PlaceResult(tuple(out), tuple(state))


#: How far below its best benefit on a GPU in use a share's "wait a round" weight is: any real placement on that
#: GPU beats waiting, so a round in which some share fits somewhere always places one.
_WAIT_MARGIN = 1e-6


def _round_weights(
    state: Sequence[SharedGpuState],
    window: Sequence[ShareDemand],
    position: dict[JobId, float],
    policy: SharingPolicy,
) -> tuple[list[int], np.ndarray]:
    """One matching round's columns (GPU indices: those in use, then the empty ones offered) and its weight matrix:
    a row per share, a column per offered GPU, then one "wait a round" column per share (see :func:`matching`)."""
    used = [i for i, g in enumerate(state) if g.tenants or g.whole_holder is not None]
    kinds: dict[tuple[int, int, int, bool], list[int]] = {}
    for i, g in enumerate(state):
        if not g.tenants and g.whole_holder is None:
            kinds.setdefault((g.gpu.memory_bytes, g.gpu.reserve_bytes, g.gpu.max_clients, g.gpu.sharing), []).append(i)

    # Whether each shape fits each candidate GPU, asked once per shape (a waiting queue has few shapes); then the
    # benefit only of the pairs that fit.
    candidates = used + [members[0] for members in kinds.values()]
    shape_row: dict[Shape, int] = {}
    rows_of = np.array([shape_row.setdefault(share_shape(d), len(shape_row)) for d in window], dtype=int)
    representative = {row: d for d, row in zip(window, rows_of.tolist(), strict=True)}
    by_shape = np.array(
        [[fits(state[i], representative[row], policy) for i in candidates] for row in range(len(shape_row))], dtype=bool
    ).reshape(len(shape_row), len(candidates))
    placed = np.full(by_shape.shape, _INFEASIBLE)
    risk = np.zeros(by_shape.shape)
    for r, c in zip(*np.nonzero(by_shape), strict=True):
        placed[r, c], risk[r, c] = _benefit_terms(state[candidates[c]], representative[int(r)], policy)
    history = np.array([1 + d.evictions for d in window], dtype=float)[:, None]
    queue = np.array([1.0 - position[d.job_id] for d in window])[:, None]
    online = np.array([W_ONLINE if d.workload_class == WorkloadClass.ONLINE else 0.0 for d in window])[:, None]
    scores = placed[rows_of] - W_RISK * history * risk[rows_of] + W_QUEUE * queue + online
    scores[~by_shape[rows_of]] = _INFEASIBLE
    on_used = scores[:, : len(used)]
    best_used = on_used.max(axis=1, initial=_INFEASIBLE)
    blocks, columns = [on_used], list(used)
    for k, members in enumerate(kinds.values()):
        on_kind = scores[:, len(used) + k]
        homeless = (on_kind > _INFEASIBLE) & (best_used <= _INFEASIBLE)
        wanted = math.ceil(sum(d.gpu_fraction for d, h in zip(window, homeless, strict=True) if h) - 1e-9)
        offered = members[: max(1, min(len(members), wanted))]
        blocks.append(np.repeat(on_kind[:, None], len(offered), axis=1))
        columns.extend(offered)
    wait = np.full((len(window), len(window)), _INFEASIBLE)
    can_join = best_used > _INFEASIBLE
    wait[np.flatnonzero(can_join), np.flatnonzero(can_join)] = best_used[can_join] - _WAIT_MARGIN
    return columns, np.hstack([*blocks, wait])


PLACERS: dict[str, Placer] = {"first-fit": first_fit, "best-fit": best_fit, "matching": matching}


def resolve_placer(name: str) -> Placer:
    try:
        return PLACERS[name]
    except KeyError:
        raise ValueError(f"unknown share placer {name!r}; choose from {', '.join(PLACERS)}") from None
