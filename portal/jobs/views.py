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

from portal.errors import ServiceError, ValidationFailed
from portal.jobs.array_selectors import array_get, array_state_counts, array_tasks, jobs_grouped_by_array
from portal.jobs.array_services import job_array_cancel, job_array_submit, may_manage_array
from portal.jobs.elastic_spec import elastic_size
from portal.jobs.filters import JobFilter
from portal.jobs.forms import JobSubmitForm
from portal.jobs.logs import job_log_window, job_output_progress
from portal.jobs.models import Job, JobArray
from portal.jobs.outcome import exit_words, finish_reason, with_finish_events
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
from portal.jobs.share_selectors import job_share
from portal.jobs.submit_outlook import submit_outlook
from portal.jobs.timeline import job_timeline
from portal.telemetry.job_usage import SPARK_HEIGHT, SPARK_WIDTH, idle_rule, job_gpu_series, job_idle
from portal.tenants.models import Tenant
from portal.web.htmx import is_htmx
from scheduling.core.durations import format_duration

if TYPE_CHECKING:
    from portal.web.auth import AuthenticatedHttpRequest


LOG_PAGE_CHARS = 200_000
#: How much of a log the job page shows at first (its end), and how much more each "Load earlier output" adds.
LOG_TAIL_CHARS = 256 * 1024


@login_required
def job_list_view(request: HttpRequest) -> HttpResponse:
    """The job list. A job array is one row (its first matching task stands for it) with its tasks' counts by
    state, expandable into its tasks; with ``?array=ID`` the list is that array's tasks, one row each."""
    jobs = with_finish_events(jobs_with_placement(job_list(user=request.user)).select_related("array"))
    filters = JobFilter(request.GET or None, queryset=jobs, request=request)
    grouped = not request.GET.get("array")
    page = Paginator(jobs_grouped_by_array(filters.qs) if grouped else filters.qs, 50).get_page(request.GET.get("page"))
    if grouped:
        counts = array_state_counts(array_ids=[job.array_id for job in page if job.array_id is not None])
        for job in page:  # one aggregate query for the page's arrays, read by the template from each row
            job.array_counts = counts.get(job.array_id) if job.array_id is not None else None
    # The list's own state beyond the filter form (its page, an ``?array=``), written into the table partial so
    # that the 3-second refresh asks for the same page it shows (Ref: #18: it used to fall back to page 1).
    others = request.GET.copy()
    others.pop("page", None)
    context = {
        "filter": filters,
        "page": page,
        "query": request.GET.urlencode(),
        "page_query": others.urlencode(),
        "array_id": request.GET.get("array", ""),
        "grouped": grouped,
    }
    if is_htmx(request):
        return render(request, "jobs/partials/_job_table.html", context)
    return render(request, "jobs/job_list.html", context)


@login_required
def job_submit_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenants = list(Tenant.objects.submittable_by(request.user))
    form = JobSubmitForm(request.POST or None, tenants=tenants)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        spec = {
            "user": request.user,
            "name": data["name"],
            "command": data["command"],
            "gpus": data["gpus"],
            "tenant": data["tenant"] or None,
            "time_limit": data["time_limit"],
        }
        if data.get("share") is not None:  # a share of one GPU (issue #17)
            spec["share"] = data["share"]
        try:
            if data["array"] is not None:
                if data.get("max_gpus") is not None:
                    raise ValidationFailed("array tasks cannot be elastic yet: leave this empty", field="max_gpus")
                job_array = job_array_submit(array=data["array"], **spec)
            else:
                job = job_submit(max_gpus=data.get("max_gpus"), **spec)
        except ServiceError as exc:
            form.add_error(exc.field if exc.field in form.fields else None, exc.message)
        else:
            if data["array"] is not None:
                messages.success(request, f"Array {job_array.pk} submitted: {job_array.task_count:,} tasks.")
                return redirect("array-detail", array_id=job_array.pk)
            messages.success(request, f"Job {job.pk} submitted.")
            return redirect("job-detail", job_id=job.pk)
    outlook = submit_outlook(user=request.user, tenants=tenants)
    return render(request, "jobs/job_submit.html", {"form": form, "tenants": tenants, "outlook": outlook})


def _visible_job(request: HttpRequest, job_id: int) -> Job:
    job = job_get(user=request.user, job_id=job_id)
    if job is None:
        raise Http404("No such job.")
    return job


def _job_context(job: Job) -> dict[str, object]:
    now = timezone.now()
    tasks = [t for t in job.tasks.select_related("node").order_by("rank") if t.attempt == job.attempt]
    events = list(job.events.all())
    return {
        "job": job,
        "tasks": tasks if job.state != "pending" else [],
        "events": events,
        "finish_reason": finish_reason(state=job.state, exit_code=job.exit_code, events=events),
        "exit_words": exit_words(job.exit_code),
        "terminal": job.is_terminal,
        "time_limit": job_time_limit(job=job, now=now),
        "start_estimate": job_start_estimate(job=job, now=now),
        "start_estimate_basis": START_ESTIMATE_BASIS,
        "stopping_gpus": job_stopping_gpus(job=job),
        "share": job_share(job=job),  # a running share of one GPU (issue #17); None otherwise, at no query
        "size": elastic_size(job, tasks),  # an elastic job's size now (issue #19)
    }


def _timeline_context(job: Job) -> dict[str, object]:
    return {"job": job, "timeline": job_timeline(job=job, now=timezone.now())}


def _gpus_context(job: Job) -> dict[str, object]:
    """The job's GPUs over its latest attempt (sparklines) and, while it runs, the idle warning (telemetry's
    selectors: the readings are telemetry's, the rule is ``telemetry.idle``)."""
    now = timezone.now()
    return {
        "job": job,
        "gpu_series": job_gpu_series(job=job, now=now),
        "idle": job_idle(job=job, now=now),
        "idle_rule": idle_rule(),
        "spark_width": f"{SPARK_WIDTH:g}",
        "spark_height": f"{SPARK_HEIGHT:g}",
    }


#: The parts of the job page that poll on their own (``?part=``), each with its partial and its context.
JOB_PAGE_PARTS = {
    "timeline": ("jobs/partials/_job_timeline.html", _timeline_context),
    "gpus": ("jobs/partials/_job_gpus.html", _gpus_context),
}


@login_required
def job_detail_view(request: HttpRequest, job_id: int) -> HttpResponse:
    job = _visible_job(request, job_id)
    part = JOB_PAGE_PARTS.get(request.GET.get("part", ""))
    if part is not None and is_htmx(request):
        template, build = part
        return render(request, template, build(job))
    context = _job_context(job)
    if is_htmx(request):
        return render(request, "jobs/partials/_job_status.html", context)
    context.update(_timeline_context(job) | _gpus_context(job))
    output = job_output_progress(job=job)
    job.refresh_from_db(fields=["log_size"])  # read after the progress, as job_log_view does
    # The log's end first (Ref: #18): the last LOG_TAIL_CHARS, then new output as it arrives; earlier output on
    # request ("Load earlier output", ?before=).
    text, start = job_log_window(job=job, end=job.log_size, chars=LOG_TAIL_CHARS)
    context.update({"log_text": text, "log_start": start, "log_offset": job.log_size, "output": output})
    return render(request, "jobs/job_detail.html", context)


def _offset_param(request: HttpRequest, name: str) -> int | None:
    try:
        return max(0, int(request.GET[name]))
    except (KeyError, ValueError):
        return None


@login_required
def job_log_view(request: HttpRequest, job_id: int) -> HttpResponse:
    """New output since ``offset``, appended to the page's log by htmx, with what the log still waits for; polling
    stops once the job is finished, its output has all arrived (or never will: a lost node) and all of it is shown.

    With ``?before=N``: the piece of output that ends at character N (what the page shows begins there), as plain
    text with ``X-Log-Start`` saying where it begins, for the page's "Load earlier output" to put in front."""
    job = _visible_job(request, job_id)
    before = _offset_param(request, "before")
    if before is not None:
        text, start = job_log_window(job=job, end=before, chars=LOG_TAIL_CHARS)
        response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        response["X-Log-Start"] = str(start)
        return response
    offset = _offset_param(request, "offset") or 0
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


# -- job arrays ----------------------------------------------------------------------------------------------------
ARRAY_TASKS_PER_PAGE = 50


def _visible_array(request: HttpRequest, array_id: int) -> JobArray:
    job_array = array_get(user=request.user, array_id=array_id)
    if job_array is None:
        raise Http404("No such array.")
    return job_array


def _array_tasks_page(request: HttpRequest, job_array: JobArray) -> dict[str, object]:
    tasks = with_finish_events(jobs_with_placement(array_tasks(array=job_array)))
    return {"array": job_array, "tasks": Paginator(tasks, ARRAY_TASKS_PER_PAGE).get_page(request.GET.get("page"))}


def _array_status(request: AuthenticatedHttpRequest, job_array: JobArray) -> dict[str, object]:
    counts = array_state_counts(array_ids=[job_array.pk])[job_array.pk]
    may_cancel = counts.active > 0 and may_manage_array(request.user, job_array)
    limit = format_duration(job_array.time_limit) if job_array.time_limit is not None else None
    return {"array": job_array, "counts": counts, "may_cancel": may_cancel, "time_limit": limit}


@login_required
def array_detail_view(request: AuthenticatedHttpRequest, array_id: int) -> HttpResponse:
    """An array's page: its spec, its counts by state (polled while tasks are active), its tasks a page at a time,
    and "Cancel array". htmx polls get just the status partial."""
    job_array = _visible_array(request, array_id)
    context = _array_status(request, job_array)
    if is_htmx(request):
        return render(request, "jobs/partials/_array_status.html", context)
    context.update(_array_tasks_page(request, job_array))
    return render(request, "jobs/array_detail.html", context)


@login_required
def array_tasks_view(request: HttpRequest, array_id: int) -> HttpResponse:
    """One page of an array's tasks, in index order: what the job list's array row loads when expanded, and what
    the array page's pager swaps in."""
    job_array = _visible_array(request, array_id)
    return render(request, "jobs/partials/_array_tasks.html", _array_tasks_page(request, job_array))


@login_required
@require_POST
def array_cancel_view(request: AuthenticatedHttpRequest, array_id: int) -> HttpResponse:
    job_array = _visible_array(request, array_id)
    try:
        result = job_array_cancel(job_array=job_array, by=request.user)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        messages.info(request, f"Array {job_array.pk}: {result.text()}")
    if is_htmx(request):
        return render(request, "jobs/partials/_array_status.html", _array_status(request, job_array))
    return redirect("array-detail", array_id=job_array.pk)
