"""How fast a job runs when it shares a GPU under MPS: a two-parameter model fitted to measurements (issue #17).

Placement (:mod:`scheduling.core.share_placement`), the GPU-level protection rule (:mod:`scheduling.core.sharing`)
and the sharing simulator all predict co-located speeds through this one model, so a change of calibration moves
all of them together.

The model, for a client whose MPS thread limit is ``s`` (a fraction of the GPU's SMs) and whose neighbours on the
same GPU keep ``L`` of the GPU busy (the sum of their active shares, at most 1)::

    speed(s, L) = s ** a  *  (1 - k * L)

``s ** a`` is the speed alone with that limit, relative to the whole GPU: ``a`` < 1 because a client with a
fraction of the SMs still gets more than that fraction of the throughput (the H100 ran a 20 % client at 26 % of its
full speed). ``1 - k * L`` is what neighbours cost: memory bandwidth, L2 and the power budget are shared even when
the SMs are not. Both parameters come from :func:`fit` over the measurements below; docs/sharing.md shows the fit
and its residuals.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class InterferenceModel:
    """``speed(s, L) = s ** alone_exponent * (1 - contention * L)``; see the module docstring."""

    alone_exponent: float
    contention: float

    def __post_init__(self) -> None:
        if not 0 < self.alone_exponent <= 1:
            raise ValueError(f"the alone exponent must be in (0, 1], not {self.alone_exponent}")
        if not 0 <= self.contention < 1:
            raise ValueError(f"the contention factor must be in [0, 1), not {self.contention}")

    def alone(self, share: float) -> float:
        """Speed alone on the GPU with an MPS thread limit of ``share``, relative to the whole GPU."""
        return float(min(1.0, max(0.0, share)) ** self.alone_exponent)

    def factor(self, neighbour_load: float) -> float:
        """What the neighbours leave of a client's own speed (1: no slowdown)."""
        return 1.0 - self.contention * min(1.0, max(0.0, neighbour_load))

    def speed(self, share: float, neighbour_load: float) -> float:
        """Speed relative to the whole GPU alone."""
        return self.alone(share) * self.factor(neighbour_load)

    def slowdown(self, neighbour_load: float) -> float:
        """The fraction of its own speed a client loses to neighbours keeping ``neighbour_load`` of the GPU busy."""
        return 1.0 - self.factor(neighbour_load)

    def max_neighbour_load(self, slowdown_budget: float) -> float:
        """The most neighbour load a client tolerates within ``slowdown_budget`` (0.05: 5 % slower at most)."""
        if self.contention == 0:
            return 1.0
        return min(1.0, max(0.0, slowdown_budget) / self.contention)


@dataclass(frozen=True, slots=True)
class Measurement:
    """One client's measured throughput: its thread limit, its neighbours' shares (all busy; none: alone) and
    what it achieved, in the same unit as the whole-GPU figure it is fitted against."""

    share: float
    throughput: float
    neighbour_shares: tuple[float, ...] = ()

    @property
    def neighbour_load(self) -> float:
        return min(1.0, sum(self.neighbour_shares))


def fit(full_gpu: float, measurements: Sequence[Measurement]) -> InterferenceModel:
    """Fit ``a`` on the clients measured alone (mean of ``log(t / full) / log(s)``), then ``k`` by least squares
    through the origin on the co-located clients' lost fraction ``1 - t / (full * s ** a)`` against ``L``.

    Refuses (``ValueError``) a set with no client alone below a whole GPU or none co-located.
    """
    alone = [m for m in measurements if not m.neighbour_shares and 0 < m.share < 1]
    shared = [m for m in measurements if m.neighbour_shares]
    if not alone or not shared:
        raise ValueError("need at least one client alone with a partial share and one co-located client")
    a = sum(math.log(m.throughput / full_gpu) / math.log(m.share) for m in alone) / len(alone)
    a = min(1.0, a)
    xs = [m.neighbour_load for m in shared]
    ys = [1.0 - m.throughput / (full_gpu * m.share**a) for m in shared]
    k = sum(x * y for x, y in zip(xs, ys, strict=True)) / sum(x * x for x in xs)
    return InterferenceModel(alone_exponent=a, contention=max(0.0, k))


#: bf16 4096² matmul on one NVIDIA H100 (driver 580, MPS), TFLOP/s; issue #17. The whole GPU alone: 656.
H100_FULL_TFLOPS = 656.0
H100_MEASUREMENTS: tuple[Measurement, ...] = (
    Measurement(share=0.2, throughput=171.0),
    Measurement(share=0.8, throughput=509.0, neighbour_shares=(0.2,)),
    Measurement(share=0.2, throughput=133.0, neighbour_shares=(0.8,)),
    Measurement(share=0.5, throughput=315.0, neighbour_shares=(0.5,)),
    Measurement(share=0.5, throughput=313.0, neighbour_shares=(0.5,)),
)

#: The model every sharing caller uses unless told otherwise: ``a`` ≈ 0.835, ``k`` ≈ 0.286.
H100 = fit(H100_FULL_TFLOPS, H100_MEASUREMENTS)
