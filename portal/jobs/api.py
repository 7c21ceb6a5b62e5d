"""The jobs API (``/api/v1/jobs/``). Its views parse input, call one service or selector, and render."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpResponse, HttpResponseBase, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.renderers import PlainTextRenderer
from portal.api.serializers import ErrorSerializer, ValidationErrorSerializer
from portal.jobs.array_selectors import array_list, array_state_counts
from portal.jobs.array_services import job_array_cancel, job_array_submit
from portal.jobs.filters import JobFilter
from portal.jobs.logs import job_log_pieces, job_log_window, job_output_progress
from portal.jobs.models import Job, JobArray
from portal.jobs.outcome import with_finish_events
from portal.jobs.selectors import job_list, job_log_read, jobs_with_placement
from portal.jobs.serializers import (
    JobArraySerializer,
    JobDetailSerializer,
    JobEventSerializer,
    JobSerializer,
    JobSubmitSerializer,
)
from portal.jobs.services import job_cancel, job_submit

#: The most characters ``GET /api/v1/jobs/{id}/log/?tail=`` returns: a download is the way to more.
LOG_TAIL_MAX = 16 * 1024 * 1024


class LogQuery(serializers.Serializer[dict[str, Any]]):
    """What ``GET /api/v1/jobs/{id}/log/`` reads from its query: where to start, or the tail, or all of it."""

    offset = serializers.IntegerField(min_value=0, required=False)
    tail = serializers.IntegerField(min_value=1, max_value=LOG_TAIL_MAX, required=False)
    download = serializers.BooleanField(required=False, default=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs.get("offset") is not None and attrs.get("tail") is not None:
            raise serializers.ValidationError({"tail": "Give offset or tail, not both."})
        return attrs


class JobViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet[Job]
):
    """Jobs visible to the caller: their tenants' jobs (all jobs for staff)."""

    # request.user is a User: IsAuthenticated (the default permission) lets no anonymous caller in, and only user
    # token and session authentication apply here; the casts below say so to the type checker.

    serializer_class = JobSerializer
    filterset_class = JobFilter

    def get_queryset(self) -> QuerySet[Job]:
        return with_finish_events(jobs_with_placement(job_list(user=self.request.user)))

    @extend_schema(responses={200: JobDetailSerializer})
    def retrieve(self, request: Request, *args: object, **kwargs: object) -> Response:
        """One job, with its timeline (left out of lists: it reads the job's events)."""
        return Response(JobDetailSerializer(self.get_object()).data)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={
            201: OpenApiResponse(
                PolymorphicProxySerializer(
                    component_name="JobOrArray",
                    serializers=[JobSerializer, JobArraySerializer],
                    resource_type_field_name=None,
                ),
                description="The job; with `array`, the job array (its tasks are jobs: `GET /api/v1/jobs/?array=ID`).",
            ),
            400: OpenApiResponse(
                ValidationErrorSerializer,
                description="Field errors. A job that could never run is refused on `gpus`, with `code` "
                "`cluster_too_small` (more GPUs than the cluster has; said first) or `quota_exceeded` (more than its "
                "tenant's cap or the per-member cap allows).",
            ),
            409: OpenApiResponse(
                ErrorSerializer,
                description="The tenant has as many jobs pending or running as its limit, or an array's tasks would "
                "pass it (`code`: `quota_exceeded`).",
            ),
        },
    )
    def create(self, request: Request, *args: object, **kwargs: object) -> Response:
        spec = JobSubmitSerializer(data=request.data)
        spec.is_valid(raise_exception=True)
        data = dict(spec.validated_data)
        array = data.pop("array", None)
        if array is not None:  # a job array: its tasks in one request, the array as the answer
            job_array = job_array_submit(user=cast(User, request.user), array=array, **data)
            return Response(_array_data(job_array), status=status.HTTP_201_CREATED)
        # The job as created: its tenant and user are loaded, and a job never started has no tasks to prefetch, so
        # the answer costs no query beyond the submission's own (issue #16: submissions per second).
        job = job_submit(user=cast(User, request.user), **data)
        return Response(JobSerializer(job).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        request=None,
        responses={
            200: JobSerializer,
            403: OpenApiResponse(
                ErrorSerializer,
                description=(
                    "Neither the job's owner nor an admin of its tenant (`code`: `permission_denied`); or a session "
                    "(cookie) call without its CSRF token."
                ),
            ),
            409: OpenApiResponse(ErrorSerializer, description="The job has already finished (`code`: `conflict`)."),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        job = job_cancel(job=self.get_object(), by=cast(User, request.user))
        return Response(JobSerializer(self.get_queryset().get(pk=job.pk)).data)

    # A plain list, not a page: without pagination_class=None the schema documented a paginated object. No filters:
    # the job list's would filter the job looked up (a 404), not its events.
    @extend_schema(filters=False, responses={200: JobEventSerializer(many=True)})
    @action(detail=True, methods=["get"], pagination_class=None)
    def events(self, request: Request, pk: str | None = None) -> Response:
        return Response(JobEventSerializer(self.get_object().events.all(), many=True).data)

    @extend_schema(
        filters=False,
        parameters=[
            OpenApiParameter("offset", int, description="Character offset to read from (default 0)."),
            OpenApiParameter(
                "tail",
                int,
                description=f"Read the last `tail` characters (1 to {LOG_TAIL_MAX}) instead, starting at a line's "
                "beginning where one is near; `X-Log-Start` says where the text starts. Not with `offset`.",
            ),
            OpenApiParameter(
                "download",
                bool,
                description="The whole log as a file (`Content-Disposition: attachment; filename=job-<id>.log`), "
                "streamed; `offset` and `tail` do not apply. It ends where the log ended when the download began.",
            ),
        ],
        responses={
            (200, "text/plain"): OpenApiResponse(
                OpenApiTypes.STR,
                description="The text. Headers: `X-Log-Offset` (where to read next), `X-Log-Start` (where the text "
                "starts), `X-Job-State`, `X-Log-State`.",
            )
        },
    )
    @action(detail=True, methods=["get"], renderer_classes=[JSONRenderer, PlainTextRenderer])
    def log(self, request: Request, pk: str | None = None) -> HttpResponseBase:
        """Output so far from character ``offset``, its last ``tail`` characters, or all of it (``download``).
        Follow a job by passing back the ``X-Log-Offset`` header while ``X-Log-State`` (the job's ``log_state``)
        is ``live`` or ``arriving``: output printed before the job ended may still be on its way from a node."""
        query = LogQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        params = query.validated_data
        job = self.get_object()
        progress = job_output_progress(job=job)  # before the read, so "complete" covers everything read below
        job.refresh_from_db(fields=["log_size"])
        response: HttpResponseBase
        if params["download"]:
            response = StreamingHttpResponse(job_log_pieces(job=job), content_type="text/plain; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="job-{job.pk}.log"'
            start, next_offset = 0, job.log_size
        elif params.get("tail") is not None:
            text, start = job_log_window(job=job, end=job.log_size, chars=params["tail"])
            response, next_offset = HttpResponse(text, content_type="text/plain; charset=utf-8"), job.log_size
        else:
            start = params.get("offset") or 0
            text, next_offset = job_log_read(job=job, offset=start)
            response = HttpResponse(text, content_type="text/plain; charset=utf-8")
        response["X-Log-Start"] = str(start)
        response["X-Log-Offset"] = str(next_offset)
        response["X-Job-State"] = job.state
        response["X-Log-State"] = progress.state.value
        return response


def _array_data(job_array: JobArray) -> dict[str, object]:
    """One array as the API shows it, with its counts (one query)."""
    counts = array_state_counts(array_ids=[job_array.pk])
    return dict(JobArraySerializer(job_array, context={"counts": counts}).data)


class JobArrayViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet[JobArray]):
    """Job arrays visible to the caller (their tenants'; all for staff), newest first. Submit one with
    ``POST /api/v1/jobs/`` and ``array``; page through its tasks with ``GET /api/v1/jobs/?array=ID``."""

    serializer_class = JobArraySerializer
    filter_backends: list[type] = []  # no filters: the job list's (?array=) is where tasks are filtered

    def get_queryset(self) -> QuerySet[JobArray]:
        return array_list(user=self.request.user)

    def list(self, request: Request, *args: object, **kwargs: object) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        arrays = list(page) if page is not None else list(self.get_queryset())
        # One aggregate query for the page's counts, never one per array.
        counts = array_state_counts(array_ids=[a.pk for a in arrays])
        data = JobArraySerializer(arrays, many=True, context={"counts": counts}).data
        return self.get_paginated_response(data) if page is not None else Response(data)

    def retrieve(self, request: Request, *args: object, **kwargs: object) -> Response:
        return Response(_array_data(self.get_object()))

    @extend_schema(
        request=None,
        responses={
            200: JobArraySerializer,
            403: OpenApiResponse(
                ErrorSerializer,
                description=(
                    "Neither the array's owner nor an admin of its tenant (`code`: `permission_denied`); or a session "
                    "(cookie) call without its CSRF token."
                ),
            ),
            409: OpenApiResponse(
                ErrorSerializer, description="No task of the array is pending or running (`code`: `conflict`)."
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel every task still pending (at once) or running (its processes are stopped first, as a job's)."""
        job_array = self.get_object()
        job_array_cancel(job_array=job_array, by=cast(User, request.user))
        return Response(_array_data(job_array))
