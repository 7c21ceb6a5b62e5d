"""Helios quasi-shortest-service-first (Hu et al., SC 2021).

Priority = predicted duration x GPUs, i.e. predicted service, smallest first. The duration comes from
:class:`~scheduling.core.duration_predict.DurationPredictor` (same user / job name / GPU count, with fallbacks), learned
only from jobs that finished before the job was submitted. Non-preemptive by default, as in Helios: a prediction
can be badly wrong, and preempting on a wrong guess costs more than waiting.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.model import FinishedJob, JobView
from scheduling.core.policies.base import Key, Policy


class Qssf(Policy):
    name = "qssf"

    def __init__(self, *, preemptive: bool = False, min_quantum: float = 0.0) -> None:
        self.preemptive = preemptive
        self.min_quantum = min_quantum
        self.predictor = DurationPredictor()
        # Predictions are a pure function of the job and the history before its submission, so they are
        # memoized; a finish reported for a time at or before some memoized submission clears the memo.
        self._memo: dict[tuple[str, str, int, float], float] = {}
        self._memo_latest_submit = float("-inf")

    def observe_finished(self, record: FinishedJob) -> None:
        self.predictor.observe(record)
        if record.finish_time <= self._memo_latest_submit:
            self._memo.clear()
            self._memo_latest_submit = float("-inf")

    def predicted_service(self, job: JobView) -> float:
        """GPU-seconds the job is expected to need; 0 with no history at all (then the order is FIFO)."""
        memo_key = (job.user, job.name, job.gpus, job.submit_time)
        service = self._memo.get(memo_key)
        if service is None:
            duration = self.predictor.predict(job)
            service = 0.0 if duration is None else duration * job.gpus
            if len(self._memo) >= 200_000:
                self._memo.clear()
            self._memo[memo_key] = service
            self._memo_latest_submit = max(self._memo_latest_submit, job.submit_time)
        return service

    def key(self, job: JobView, now: float) -> Key:
        return (self.predicted_service(job), job.submit_time)

    def order(self, jobs: Iterable[JobView], now: float) -> list[JobView]:
        predicted = self.predicted_service
        return sorted(jobs, key=lambda job: (predicted(job), job.submit_time))
