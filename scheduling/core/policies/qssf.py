"""Helios quasi-shortest-service-first (Hu et al., SC 2021).

Priority = predicted duration x GPUs, i.e. predicted service, smallest first. The duration comes from
:class:`~scheduling.core.predict.DurationPredictor` (same user / job name / GPU count, with fallbacks), learned
only from jobs that finished before the job was submitted. Non-preemptive by default, as in Helios: a prediction
can be badly wrong, and preempting on a wrong guess costs more than waiting.
"""

from __future__ import annotations

from scheduling.core.model import FinishedJob, JobView
from scheduling.core.policies.base import Key, Policy
from scheduling.core.predict import DurationPredictor


class Qssf(Policy):
    name = "qssf"

    def __init__(self, *, preemptive: bool = False, min_quantum: float = 0.0) -> None:
        self.preemptive = preemptive
        self.min_quantum = min_quantum
        self.predictor = DurationPredictor()

    def observe_finished(self, record: FinishedJob) -> None:
        self.predictor.observe(record)

    def predicted_service(self, job: JobView) -> float:
        """GPU-seconds the job is expected to need; 0 with no history at all (then the order is FIFO)."""
        duration = self.predictor.predict(job)
        return 0.0 if duration is None else duration * job.gpus

    def key(self, job: JobView, now: float) -> Key:
        return (self.predicted_service(job), job.submit_time)
