"""What an elastic job asks for (issue #19), checked in one place for the API, the form and the CLI's requests:
``max_gpus`` (its largest size; ``gpus`` is its minimum) and an optional measured ``scaling`` curve."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from portal.errors import ValidationFailed
from portal.jobs.models import Job, JobTask
from scheduling.core.elastic import DEFAULT_CURVE, ScalingCurve
from scheduling.core.states import JobState

#: The most GPUs one elastic job may grow to (the knapsack's work grows with it).
MAX_ELASTIC_GPUS = 1024


def elastic_columns(*, gpus: int, max_gpus: int | None, scaling: object, fraction: float | None) -> dict[str, Any]:
    """The job's elastic columns, or ``ValidationFailed`` naming the field. A ``max_gpus`` equal to ``gpus`` is
    an inelastic job; a ``scaling`` curve needs an elastic one."""
    points = parse_scaling(scaling)
    if max_gpus is None or max_gpus == gpus:
        if points is not None and max_gpus is None:
            raise ValidationFailed("only an elastic job (with max_gpus) takes a scaling curve", field="scaling")
        return {"max_gpus": None, "scaling": None}
    if fraction is not None:
        raise ValidationFailed("a share of one GPU cannot be elastic: ask for whole GPUs", field="max_gpus")
    if max_gpus < gpus:
        raise ValidationFailed(f"must be at least gpus ({gpus}): gpus is the size it always gets", field="max_gpus")
    if max_gpus > MAX_ELASTIC_GPUS:
        raise ValidationFailed(f"at most {MAX_ELASTIC_GPUS}", field="max_gpus")
    return {"max_gpus": max_gpus, "scaling": points}


def parse_scaling(raw: object) -> dict[str, float] | None:
    """A measured curve as ``{"<gpus>": speedup over one GPU, ...}``, e.g. ``{"1": 1, "4": 3.6, "8": 6.5}``;
    None for none. Raises ``ValidationFailed`` naming ``scaling``."""
    if raw is None or raw == {}:
        return None
    if not isinstance(raw, Mapping):
        raise ValidationFailed('an object of GPU counts to speedups, e.g. {"1": 1, "4": 3.6}', field="scaling")
    points: dict[str, float] = {}
    for key, value in raw.items():
        try:
            n = int(str(key))
            speedup = float(value)
        except (TypeError, ValueError):
            raise ValidationFailed(f"{key!r}: {value!r} is not a GPU count and a speedup", field="scaling") from None
        if not 1 <= n <= MAX_ELASTIC_GPUS or not math.isfinite(speedup) or speedup <= 0:
            raise ValidationFailed(f"{key!r}: GPU counts 1 to {MAX_ELASTIC_GPUS}, speedups > 0", field="scaling")
        points[str(n)] = speedup
    if len(points) > 64:
        raise ValidationFailed("at most 64 points", field="scaling")
    return points


def elastic_size(job: Job, tasks: Sequence[JobTask]) -> int:
    """GPUs ``job`` holds now (``tasks``: its current attempt's, when running) or starts with next."""
    if job.max_gpus is None:
        return job.gpus
    if job.state == JobState.RUNNING.value and tasks:
        return sum(len(task.gpu_indices) for task in tasks)
    return job.resize_to or job.gpus


def scaling_curve(points: Mapping[str, float] | None) -> ScalingCurve:
    """The core's curve for stored points (the default Amdahl curve when there are none)."""
    if not points:
        return DEFAULT_CURVE
    return ScalingCurve(points=tuple(sorted((int(n), float(s)) for n, s in points.items())))
