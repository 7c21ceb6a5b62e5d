"""The one filterset for jobs, shared by the API list and the htmx job table."""

from __future__ import annotations

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.db.models import QuerySet, Subquery

from portal.api.filters import StrictBooleanFilter
from portal.jobs.models import JOB_STATE_CHOICES, Job
from portal.tenants.models import Tenant


class IdFilter(django_filters.NumberFilter):
    """A row id: a whole number in the column's range (django-filter's NumberFilter takes decimals, and a number
    past the column's range would reach the database)."""

    field_class = forms.IntegerField


class JobFilter(django_filters.FilterSet):
    # distinct=False: one row per job already; django-filter's default DISTINCT over every column cost a full scan.
    state = django_filters.MultipleChoiceFilter(choices=JOB_STATE_CHOICES, distinct=False)
    # By id, from a one-row subquery: a join on the slug let the planner read every job of the reader's tenants
    # and sort them, where an equality on tenant_id walks its (tenant, submitted_at, id) index for one page.
    tenant = django_filters.CharFilter(method="filter_tenant")
    user = django_filters.CharFilter(method="filter_user")
    name = django_filters.CharFilter(field_name="name", lookup_expr="icontains")
    # The tasks of one job array (in the list's order; ``GET /api/v1/arrays/{id}/`` has the array itself).
    array = IdFilter(
        field_name="array_id", min_value=1, max_value=2**63 - 1, label="Only the tasks of this job array (its id)"
    )
    # Strict: django-filter's own boolean reads ``?mine=yes`` as "not given" and lists everyone's jobs; this is a 400.
    mine = StrictBooleanFilter(method="filter_mine", label="Only my jobs")

    class Meta:
        model = Job
        fields = ["state", "tenant", "user", "name"]

    def filter_tenant(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        return queryset.filter(tenant_id=Subquery(Tenant.objects.filter(slug=value).values("pk")[:1]))

    def filter_user(self, queryset: QuerySet[Job], name: str, value: str) -> QuerySet[Job]:
        users = get_user_model().objects.filter(username=value).values("pk")[:1]
        return queryset.filter(user_id=Subquery(users))

    def filter_mine(self, queryset: QuerySet[Job], name: str, value: bool) -> QuerySet[Job]:
        return queryset.filter(user=self.request.user) if value and self.request else queryset
