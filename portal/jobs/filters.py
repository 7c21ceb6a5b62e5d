"""The one filterset for jobs, shared by the API list and the htmx job table."""

from __future__ import annotations

import django_filters
from django.db.models import QuerySet

from portal.api.filters import StrictBooleanFilter
from portal.jobs.models import JOB_STATE_CHOICES, Job


class JobFilter(django_filters.FilterSet):
    # distinct=False: one row per job already; django-filter's default DISTINCT over every column cost a full scan.
    state = django_filters.MultipleChoiceFilter(choices=JOB_STATE_CHOICES, distinct=False)
    tenant = django_filters.CharFilter(field_name="tenant__slug")
    user = django_filters.CharFilter(field_name="user__username")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    # Strict: django-filter's own boolean reads ``?mine=yes`` as "not given" and lists everyone's jobs; this is a 400.
    mine = StrictBooleanFilter(method="filter_mine", label="Only my jobs")

    class Meta:
        model = Job
        fields = ["state", "tenant", "user", "name"]

    def filter_mine(self, queryset: QuerySet[Job], name: str, value: bool) -> QuerySet[Job]:
        return queryset.filter(user=self.request.user) if value and self.request else queryset
