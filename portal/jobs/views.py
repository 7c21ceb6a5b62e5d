"""The job pages. Like the API views they only parse input and call services/selectors; htmx requests get just
the partial they poll for."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.errors import ServiceError
from portal.jobs.filters import JobFilter
from portal.jobs.forms import JobSubmitForm
from portal.jobs.logs import job_output_progress
from portal.jobs.models import Job
from portal.jobs.selectors import (
    START_ESTIMATE_BASIS,
    job_get,
    job_list,
    job_log_read,
    job_start_estimate,
    job_stopping_gpus,
    job_time_limit,
    jobs_with_placement,
)
from portal.jobs.services import job_cancel, job_submit
from portal.tenants.models import Tenant
from portal.web.htmx import is_htmx

if TYPE_CHECKING:
    from portal.web.auth import AuthenticatedHttpRequest


LOG_PAGE_CHARS = 200_000


@login_required
def job_list_view(request: HttpRequest) -> HttpResponse:
    filters = JobFilter(request.GET or None, queryset=jobs_with_placement(job_list(user=request.user)), request=request)
    page = Paginator(filters.qs, 50).get_page(request.GET.get("page"))
    context = {"filter": filters, "page": page, "query": request.GET.urlencode()}
    if is_htmx(request):
        return render(request, "jobs/partials/_job_table.html", context)
    return render(request, "jobs/job_list.html", context)


@login_required
def job_submit_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenants = list(Tenant.objects.submittable_by(request.user))
    form = JobSubmitForm(request.POST or None, tenants=tenants)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            job = job_submit(
                user=request.user,
                name=data["name"],
                command=data["command"],
                gpus=data["gpus"],
                tenant=data["tenant"] or None,
                time_limit=data["time_limit"],
            )
        except ServiceError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            messages.success(request, f"Job {job.pk} submitted.")
            return redirect("job-detail", job_id=job.pk)
    return render(request, "jobs/job_submit.html", {"form": form, "tenants": tenants})


def _visible_job(request: HttpRequest, job_id: int) -> Job:
    job = job_get(user=request.user, job_id=job_id)
    if job is None:
        raise Http404("No such job.")
    return job


def _job_context(job: Job) -> dict[str, object]:
    now = timezone.now()
    tasks = [t for t in job.tasks.select_related("node").order_by("rank") if t.attempt == job.attempt]
    return {
        "job": job,
        "tasks": tasks if job.state != "pending" else [],
        "events": list(job.events.all()),
        "terminal": job.is_terminal,
        "time_limit": job_time_limit(job=job, now=now),
        "start_estimate": job_start_estimate(job=job, now=now),
        "start_estimate_basis": START_ESTIMATE_BASIS,
        "stopping_gpus": job_stopping_gpus(job=job),
    }


@login_required
def job_detail_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    context = _job_context(job)
    if is_htmx(request):
        return render(request, "jobs/partials/_job_status.html", context)
    output = job_output_progress(job=job)
    text, offset = job_log_read(job=job, offset=0, limit=LOG_PAGE_CHARS)
    context.update({"log_text": text, "log_offset": offset, "output": output})
    return render(request, "jobs/job_detail.html", context)


@login_required
def job_log_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """New output since ``offset``, appended to the page's log by htmx, with what the log still waits for; polling
    stops once the job is finished, its output has all arrived (or never will: a lost node) and all of it is shown."""
    job = _visible_job(request, job_id)
    try:
        offset = max(0, int(request.GET.get("offset", "0")))
    except ValueError:
        offset = 0
    output = job_output_progress(job=job)
    job.refresh_from_db(fields=["log_size"])  # read after the progress: once it is settled, this size is final
    text, next_offset = job_log_read(job=job, offset=offset, limit=LOG_PAGE_CHARS)
    context = {"job": job, "log_text": text, "log_offset": next_offset, "output": output}
    context["done"] = output.settled and next_offset >= job.log_size
    return render(request, "jobs/partials/_log_tail.html", context)


@login_required
@require_POST
def job_cancel_view(request: AuthenticatedHttpRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    try:
        job = job_cancel(job=job, by=request.user)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, "Cancel requested." if job.state == "running" else f"Job {job.pk} cancelled.")
    if is_htmx(request):
        return render(request, "jobs/partials/_job_status.html", _job_context(Job.objects.get(pk=job.pk)))
    return redirect("job-detail", job_id=job.pk)
