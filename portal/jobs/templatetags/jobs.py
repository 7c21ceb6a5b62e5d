"""Template filters of the job pages."""

from __future__ import annotations

from django import template
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.outcome import job_finish_reason
from portal.jobs.selectors import job_start_estimate

register = template.Library()


@register.filter
def start_brief(job: Job) -> str:
    """A pending job's expected start in a few words for the job list ("Starts in about 2h 10m."); empty when the
    job is not pending or its forecast gives no time (the job page says why)."""
    estimate = job_start_estimate(job=job, now=timezone.now())
    return estimate.brief if estimate is not None else ""


@register.filter
def finish_reason(job: Job) -> str:
    """Why a finished job ended ("time limit of 20s exceeded", "cancelled by alice"): ``portal.jobs.outcome``."""
    return job_finish_reason(job)
