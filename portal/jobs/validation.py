"""What a submission must satisfy before a job exists: its spec (command, name, GPUs, environment, time limit),
the tenant it goes to, and whether it could ever fit. Each check raises ``ValidationFailed`` naming the field, so
the API, the form and the CLI show the same words. Called by ``job_submit`` and ``job_array_submit`` inside
their transaction."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from portal.errors import ClusterTooSmall, OverQuota, QuotaExceeded, ValidationFailed
from portal.jobs.models import ACTIVE_STATES, MAX_TIME_LIMIT, Job
from portal.nodes.selectors import cluster_has_gpus, present_gpu_split
from portal.tenants.models import Membership, Quota, Role, Tenant
from scheduling.core.durations import format_duration

if TYPE_CHECKING:
    from django.contrib.auth.models import User

MAX_COMMAND_CHARS = 16_000
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Variables the portal sets for each task; a user's env may not override them.
RESERVED_ENV = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CORRAL_JOB_ID",
        "CORRAL_ATTEMPT",
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "NODE_RANK",
        "CORRAL_NNODES",
        "CORRAL_NODE_RANK",
        "CORRAL_GPUS",
        "CORRAL_NODE_GPUS",
        # A job array's task (portal.jobs.array_selectors.array_task_env).
        "CORRAL_ARRAY_JOB_ID",
        "CORRAL_ARRAY_TASK_ID",
        "CORRAL_ARRAY_TASK_COUNT",
        "CORRAL_ARRAY_TASK_MIN",
        "CORRAL_ARRAY_TASK_MAX",
    }
)


def membership(user: User, tenant: Tenant) -> Membership | None:
    return Membership.objects.filter(user=user, tenant=tenant).first()


def may_manage(user: User, *, owner_id: int, tenant: Tenant) -> bool:
    """Who may cancel a job or a job array: its owner, an admin of its tenant, or staff. The one rule for both."""
    if user.is_staff or owner_id == user.pk:
        return True
    member = membership(user, tenant)
    return member is not None and member.role == Role.ADMIN


def resolve_tenant(user: User, tenant: Tenant | str | None) -> Tenant:
    resolved: Tenant | None
    if isinstance(tenant, Tenant):
        resolved = tenant
    elif tenant:
        resolved = Tenant.objects.filter(slug=tenant).first()
        if resolved is None:
            raise ValidationFailed(f"unknown tenant '{tenant}'", field="tenant")
    else:
        tenants = list(Tenant.objects.filter(memberships__user=user)[:2])  # one query on every submission
        if len(tenants) != 1:
            problem = "you belong to no tenant" if not tenants else "you belong to several tenants; name one"
            raise ValidationFailed(problem, field="tenant")
        return tenants[0]
    if not user.is_staff and membership(user, resolved) is None:
        # Same words as for an unknown tenant: do not confirm that another tenant exists.
        raise ValidationFailed(f"unknown tenant '{resolved.slug}'", field="tenant")
    return resolved


def validate_spec(*, name: str, command: str, gpus: int, env: Mapping[str, str], time_limit: int | None) -> None:
    if not command.strip():
        raise ValidationFailed("the command is empty", field="command")
    if len(command) > MAX_COMMAND_CHARS:
        raise ValidationFailed(f"the command is longer than {MAX_COMMAND_CHARS} characters", field="command")
    if "\x00" in command:
        raise ValidationFailed("the command contains a NUL character", field="command")
    if not name.strip():
        raise ValidationFailed("the name is empty", field="name")
    if gpus < 1:
        raise ValidationFailed("a job needs at least 1 GPU", field="gpus")
    for key, value in env.items():
        if not ENV_NAME.match(key):
            raise ValidationFailed(f"'{key}' is not a valid environment variable name", field="env")
        if key in RESERVED_ENV:
            raise ValidationFailed(f"'{key}' is set by Corral and cannot be overridden", field="env")
        if not isinstance(value, str) or "\x00" in value:
            raise ValidationFailed(f"the value of '{key}' must be a string without NUL characters", field="env")
    if time_limit is not None:
        if isinstance(time_limit, bool) or not isinstance(time_limit, int) or time_limit < 1:
            raise ValidationFailed("the time limit must be a whole number of seconds, at least 1", field="time_limit")
        if time_limit > MAX_TIME_LIMIT:
            raise ValidationFailed(
                f"the time limit may be at most {format_duration(MAX_TIME_LIMIT)} ({MAX_TIME_LIMIT} seconds); "
                f"this job asks for {format_duration(time_limit)}",
                field="time_limit",
            )


def check_fits(*, tenant: Tenant, gpus: int, quota: Quota | None, whole_gpus: bool = True) -> None:
    """Refuse at submit a job that could never start, so it does not wait forever with no hope. The cluster's size
    comes first: a 64-GPU job on an 8-GPU cluster is told "the cluster has 8 GPUs", which no quota change would
    fix, before it is told about its tenant's cap. The one rule for the form, the API and the CLI (all submit
    through ``job_submit``); the submit form shows the same numbers beforehand (``submit_outlook``)."""
    # A share (``whole_gpus`` False) is checked against the shared GPUs by ``check_share``; whole-GPU jobs count
    # only the GPUs that take them, so a cluster whose GPUs are all shared does not keep a whole job waiting forever.
    if whole_gpus and not cluster_has_gpus(gpus):  # cheap whatever the cluster's size; the count for the words
        cluster_gpus, shared = present_gpu_split()
        if gpus > cluster_gpus:
            words = f" for whole-GPU jobs ({shared} more take only shares)" if shared else ""
            raise ClusterTooSmall(f"the cluster has {cluster_gpus} GPUs{words}; this job asks for {gpus}", field="gpus")
    if quota is not None and quota.gpu_limit is not None and gpus > quota.gpu_limit:
        raise OverQuota(
            f"tenant '{tenant.slug}' may use at most {quota.gpu_limit} GPUs at once; this job asks for {gpus}",
            field="gpus",
        )
    if quota is not None and quota.user_gpu_limit is not None and gpus > quota.user_gpu_limit:
        raise OverQuota(
            f"each member of '{tenant.slug}' may use at most {quota.user_gpu_limit} GPUs; this job asks for {gpus}",
            field="gpus",
        )


def default_job_name(name: str, command: str) -> str:
    """The name a job (or an array) gets: the one given, else the command's first line, cut to the column."""
    return (name or command.strip().split("\n", 1)[0])[:200]


def admit_submission(
    *, user: User, tenant: Tenant | str | None, gpus: int, adding: int, whole_gpus: bool = True
) -> Tenant:
    """The checks every submission passes before its jobs exist, shared by :func:`job_submit` (``adding`` 1) and
    ``job_array_submit`` (``adding``: its task count): the tenant ``user`` may submit to, jobs of ``gpus`` GPUs
    that could ever fit (``whole_gpus`` False: a share, whose GPU ``check_share`` checks), and the tenant's
    ``max_active_jobs`` with ``adding`` more jobs.

    The active jobs are counted under the quota row's lock, so concurrent submits cannot overshoot the limit.
    Precondition: inside the caller's transaction. Raises ``ValidationFailed`` (field-scoped) or ``QuotaExceeded``.
    """
    resolved = resolve_tenant(user, tenant)
    quota = Quota.objects.select_for_update().filter(tenant=resolved).first()
    check_fits(tenant=resolved, gpus=gpus, quota=quota, whole_gpus=whole_gpus)
    if quota is not None and quota.max_active_jobs is not None:
        active = Job.objects.filter(tenant=resolved, state__in=ACTIVE_STATES).count()
        if adding == 1 and active >= quota.max_active_jobs:
            raise QuotaExceeded(f"tenant '{resolved.slug}' already has {active} jobs pending or running (its limit)")
        if active + adding > quota.max_active_jobs:
            raise QuotaExceeded(
                f"tenant '{resolved.slug}' may have {quota.max_active_jobs} jobs pending or running and has "
                f"{active}; this array would add {adding}"
            )
    return resolved
