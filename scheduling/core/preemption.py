"""What a preemption costs: checkpoint/restore overhead by job size.

Pure data so the simulator (which charges it) and the live loop (which may show it) agree. The overhead is paid
when a preempted job starts again: its remaining run grows by the overhead for its GPU count.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PreemptionCost:
    """Seconds of checkpoint/restore overhead per resumption, by job size: ``single`` for 1 GPU, ``node`` for up
    to ``node_gpus`` GPUs, ``multi_node`` above that. All zero (the default) is the Tiresias reference setting."""

    single: float = 0.0
    node: float = 0.0
    multi_node: float = 0.0
    node_gpus: int = 8

    def overhead(self, gpus: int) -> float:
        if gpus <= 1:
            return self.single
        if gpus <= self.node_gpus:
            return self.node
        return self.multi_node

    @classmethod
    def helios(cls) -> PreemptionCost:
        """Helios (SC'21) charges 7 s, 30 s and 60 s for 1, up to 8, and more than 8 GPUs."""
        return cls(single=7.0, node=30.0, multi_node=60.0, node_gpus=8)

    @classmethod
    def flat(cls, seconds: float) -> PreemptionCost:
        return cls(single=seconds, node=seconds, multi_node=seconds)

    @classmethod
    def parse(cls, text: str) -> PreemptionCost:
        """``"helios"`` or a number of seconds (the CLI's ``--preemption-overhead``)."""
        if text.strip().lower() == "helios":
            return cls.helios()
        seconds = float(text)
        if seconds < 0:
            raise ValueError("preemption overhead must be >= 0")
        return cls.flat(seconds)
