"""Domain refusals raised by services, mapped to HTTP statuses in one place (``portal.api.exceptions``).

Shape errors (wrong types, missing fields) come from serializers and forms; these are the refusals only a
service can make, because they depend on the database: quotas, membership, the state a job is in.
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every refusal. ``field`` names the input at fault, so the API can answer with field errors."""

    status_code = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ValidationFailed(ServiceError):
    code = "invalid"


class OverQuota(ValidationFailed):
    """A job asks for more GPUs than its tenant's quota ever allows (the tenant's cap or the per-user cap): it
    could never start, so it is refused at once, on the field at fault (400). Its code says why, as the README
    lists it; a tenant that is merely full now is :class:`QuotaExceeded` (409)."""

    code = "quota_exceeded"


class ClusterTooSmall(ValidationFailed):
    """A job asks for more GPUs than the whole cluster has: refused at once, whatever the quotas say (400)."""

    code = "cluster_too_small"


class NotAllowed(ServiceError):
    status_code = 403
    code = "permission_denied"


class NotFound(ServiceError):
    status_code = 404
    code = "not_found"


class Conflict(ServiceError):
    """The request is valid but the current state forbids it (cancel a finished job, quota full)."""

    status_code = 409
    code = "conflict"


class QuotaExceeded(Conflict):
    code = "quota_exceeded"
