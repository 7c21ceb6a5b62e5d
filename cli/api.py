"""A small typed client for the portal's public REST API (``/api/v1/``), used by the ``corral`` commands.

It exists so the commands never see an ``httpx`` exception or a status code: each method returns plain JSON typed
with a ``TypedDict`` (the same dict ``--json`` prints), and every failure becomes one :class:`~cli.errors.CliError`
with a sentence a user can act on (log in again, check the URL, fix the ``gpus`` field).

Long on purpose: it is the client's whole view of the API (one typed shape per resource, one method per endpoint,
the one place that turns answers into errors), so the commands never touch HTTP and a change to the API is made
here alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, cast

import httpx

from cli.errors import CliError

#: Job states that are final (the wire values of ``scheduling.core.states.TERMINAL``). Repeated here rather than
#: imported so the client depends on the public API contract only, not on the server's code. One exception: within
#: ``CORRAL_XID_EXIT_WINDOW`` seconds a failed job may go back to the queue when a late fatal XID shows that its GPU
#: killed it; ``corral logs -f`` stops at "failed" and does not follow that retry.
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})

#: ``log_state`` values after which no more output will arrive: a follower that has read to the end may stop.
SETTLED_LOG_STATES = frozenset({"complete", "incomplete"})

#: Seconds to wait for the portal; long enough for a busy portal, short enough that a dead one is reported quickly.
TIMEOUT = 15.0


class Job(TypedDict):
    """A job as ``GET /api/v1/jobs/{id}/`` returns it."""

    id: int
    name: str
    command: str
    gpus: int
    tenant: str
    user: str
    state: str
    reason: str
    reason_code: str
    exit_code: int | None
    finish_reason: NotRequired[str]  # why it ended, in words (portals since #18)
    node: str | None
    nodes: list[str]
    gpu_indices: list[Any]
    attempt: int
    gpu_fraction: NotRequired[float | None]  # a share of one GPU (portals since #17)
    workload_class: NotRequired[str]
    latency_slo_ms: NotRequired[int | None]  # an online share's p99 target
    max_gpus: NotRequired[int | None]  # an elastic job's largest size (issue #19)
    size: NotRequired[int]  # GPUs it holds now, or starts with next
    share: NotRequired[dict[str, Any] | None]  # where a running share runs, and with what share
    hardware_retries: NotRequired[int]
    time_limit: NotRequired[int | None]
    array: NotRequired[int | None]
    array_index: NotRequired[int | None]
    submitted_at: str | None
    started_at: str | None
    finished_at: str | None
    cancel_requested: bool
    env: dict[str, str]
    log_complete: NotRequired[bool]
    log_state: NotRequired[str]
    log_note: NotRequired[str]


class JobArray(TypedDict):
    """A job array as ``POST /api/v1/jobs/`` (with ``array``) and ``GET /api/v1/arrays/{id}/`` return it. Its tasks
    are jobs (``list_jobs(array=id)``); ``counts`` holds how many are in each state."""

    id: int
    name: str
    command: str
    gpus: int
    tenant: str
    user: str
    env: dict[str, str]
    time_limit: int | None
    spec: str
    limit: int | None
    task_count: int
    index_min: int
    index_max: int
    counts: dict[str, int]
    submitted_at: str | None


class JobEvent(TypedDict):
    """One line of a job's history, from ``GET /api/v1/jobs/{id}/events/``."""

    at: str
    kind: str
    from_state: str | None
    to_state: str | None
    actor: str | None
    reason: str


class Gpu(TypedDict):
    """One GPU of a node. ``state`` is ``free``, ``allocated`` (then ``job`` says to which job), ``shared`` (shares
    of it run: ``clients`` says how many, issue #17), ``stopping`` or, when the GPU is not healthy, its health
    (``cordoned``, ``unhealthy``) with ``health_detail`` saying why."""

    index: int
    uuid: str
    model: str
    memory_mb: int
    health: str
    health_detail: str
    state: str
    job: int | None
    clients: NotRequired[int]  # shares running on it (portals since #17)


class Node(TypedDict):
    """A node as ``GET /api/v1/nodes/`` returns it."""

    name: str
    hostname: str
    address: str
    rack: str
    state: str
    state_reason: str
    last_heartbeat: str | None
    agent_version: str
    gpus: list[Gpu]
    power: NotRequired[str]  # on, off (powered down by energy saving), waking (issue #19)
    pool: NotRequired[str]  # training, or a serving system's loanable pool
    lent: NotRequired[bool]
    returning: NotRequired[bool]


class Tenant(TypedDict):
    """One tenant as ``GET /api/v1/tenants/`` lists it; the fair-share fields are null when fair share is off."""

    slug: str
    name: str
    guaranteed_gpus: int
    gpu_cap: int | None
    user_cap: int | None
    gpus_held: float  # a share counts as its fraction (portals since #17 send a number)
    borrowed: float
    running_jobs: int
    pending_jobs: int
    usage_gpu_hours: float | None
    ratio: float | None
    borrow_order: int | None
    tenant_count: int | None


class TenantOverview(TypedDict):
    """``GET /api/v1/tenants/``: the live policy, whether its quota layer is on, fair share's half-life."""

    policy: str
    quota_layer: bool
    half_life_hours: float | None
    tenants: list[Tenant]


class Pool(TypedDict):
    """A loanable pool as ``GET /api/v1/pools/`` lists it (issue #19)."""

    name: str
    nodes: list[str]
    lent: list[str]
    returning: list[str]
    open_reclaims: list[int]


class LendReply(TypedDict):
    """``POST /api/v1/pools/{pool}/lend/``: the nodes this call lent, and every node of the pool lent now."""

    pool: str
    newly_lent: list[str]
    lent: list[str]


class Reclaim(TypedDict):
    """A reclaim as ``POST /api/v1/pools/{pool}/reclaim/`` answers it: the nodes Corral gives back, and how."""

    id: int
    pool: str
    count: int
    deadline_seconds: float
    deadline_at: str
    nodes: list[str]
    shrunk: dict[str, int]
    preempted: list[int]
    cost_gpu_seconds: float
    returned: dict[str, str]
    forced: list[str]
    late: bool
    finished: bool


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes of a job's log from some offset, where to ask next, and the job's state and its output's (``log_state``:
    live, arriving, complete, incomplete) when the chunk was read; None from a portal that does not say."""

    data: bytes
    next_offset: int
    job_state: str | None
    log_state: str | None = None


class Client:
    """One portal, one token. Methods map 1:1 to endpoints; ``job_id`` arguments produce "job N not found" on 404."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self._token = token
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Token {token}"
        try:
            self._http = httpx.Client(base_url=self.url, headers=headers, timeout=TIMEOUT)
        except httpx.InvalidURL as exc:
            raise CliError(f"bad portal URL {self.url!r}: {exc}", exit_code=2) from exc

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.close()

    # -- endpoints ---------------------------------------------------------------------------------------------

    def obtain_token(self, username: str, password: str) -> str:
        """Trade a username and password for an API token (the only call that needs no token)."""
        body = self._json("POST", "/api/v1/auth/token/", json={"username": username, "password": password}, auth=False)
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise CliError(f"the portal at {self.url} answered the login without a token; is this a Corral portal?")
        return token

    def submit_job(
        self,
        *,
        name: str,
        command: str,
        gpus: int | float,
        tenant: str | None = None,
        env: Mapping[str, str] | None = None,
        time_limit: int | None = None,
        gpu_memory: str | None = None,
        workload_class: str | None = None,
        latency_slo_ms: int | None = None,
        max_gpus: int | None = None,
    ) -> Job:
        """Submit a job; the portal picks the tenant when the user belongs to exactly one. ``time_limit`` is in
        seconds (None: no limit). ``gpus`` below 1 is a share of one GPU, with an optional ``gpu_memory`` limit
        ("16G"), ``workload_class`` and, for an online share, ``latency_slo_ms`` (issue #17)."""
        payload = _submission(name=name, command=command, gpus=gpus, tenant=tenant, env=env, time_limit=time_limit)
        if gpu_memory is not None:
            payload["gpu_memory"] = gpu_memory
        if workload_class is not None:
            payload["workload_class"] = workload_class
        if latency_slo_ms is not None:
            payload["latency_slo_ms"] = latency_slo_ms
        if max_gpus is not None:
            payload["max_gpus"] = max_gpus  # an elastic job (issue #19)
        return cast(Job, self._json("POST", "/api/v1/jobs/", json=payload))

    def submit_array(
        self,
        *,
        array: str,
        name: str,
        command: str,
        gpus: int | float,
        tenant: str | None = None,
        env: Mapping[str, str] | None = None,
        time_limit: int | None = None,
    ) -> JobArray:
        """Submit a job array: one task per index of ``array`` (``0-999%50``); the portal checks the spec and
        answers with the array (a 400 naming ``array`` when the spec is bad)."""
        payload = _submission(name=name, command=command, gpus=gpus, tenant=tenant, env=env, time_limit=time_limit)
        payload["array"] = array
        return cast(JobArray, self._json("POST", "/api/v1/jobs/", json=payload))

    def get_array(self, array_id: int) -> JobArray:
        return cast(JobArray, self._json("GET", f"/api/v1/arrays/{array_id}/", not_found=f"array {array_id} not found"))

    def cancel_array(self, array_id: int) -> JobArray:
        """Cancel every pending task of the array at once and stop its running ones."""
        return cast(
            JobArray,
            self._json("POST", f"/api/v1/arrays/{array_id}/cancel/", not_found=f"array {array_id} not found"),
        )

    def list_jobs(
        self,
        *,
        states: Sequence[str] = (),
        tenant: str | None = None,
        user: str | None = None,
        mine: bool = False,
        array: int | None = None,
        limit: int | None = None,
    ) -> list[Job]:
        """Jobs visible to the caller, newest first, following pagination until ``limit`` jobs are in hand.

        ``states`` are OR-ed (the portal takes ``state`` repeatedly); ``mine`` leaves "who am I" to the portal;
        ``array`` lists the tasks of that job array.
        """
        params: list[tuple[str, str]] = [("state", s) for s in states]
        params += [(k, v) for k, v in (("tenant", tenant), ("user", user)) if v]
        if mine:
            params.append(("mine", "true"))
        if array is not None:
            params.append(("array", str(array)))
        return cast(list[Job], list(self._paginate("/api/v1/jobs/", params, limit)))

    def get_job(self, job_id: int) -> Job:
        return cast(Job, self._json("GET", f"/api/v1/jobs/{job_id}/", not_found=f"job {job_id} not found"))

    def job_events(self, job_id: int) -> list[JobEvent]:
        body = self._json("GET", f"/api/v1/jobs/{job_id}/events/", not_found=f"job {job_id} not found")
        # Accept a paginated answer too, so a later server-side page size does not break the client.
        return cast(list[JobEvent], body["results"] if isinstance(body, dict) and "results" in body else body)

    def cancel_job(self, job_id: int) -> Job:
        return cast(Job, self._json("POST", f"/api/v1/jobs/{job_id}/cancel/", not_found=f"job {job_id} not found"))

    def job_log(self, job_id: int, offset: int = 0) -> LogChunk:
        """The job's output from ``offset`` on, where to read next, and the job's state at that moment.

        Offsets are opaque to the client: it starts at 0 and passes back ``X-Log-Offset``, so it does not matter
        whether the portal counts bytes or characters (the current portal counts characters).
        """
        response = self._request(
            "GET",
            f"/api/v1/jobs/{job_id}/log/",
            params={"offset": offset},
            # Not plain "text/plain": DRF negotiates before the view runs and has no text renderer, so it would
            # answer 406. JSON stays acceptable, which is also how 404s and 400s arrive.
            headers={"Accept": "text/plain, application/json;q=0.9"},
            not_found=f"job {job_id} not found",
        )
        header = response.headers.get("X-Log-Offset")
        try:
            next_offset = int(header) if header is not None else offset + len(response.content)
        except ValueError as exc:
            raise CliError(f"the portal at {self.url} sent a bad X-Log-Offset header: {header!r}") from exc
        return LogChunk(
            data=response.content,
            next_offset=next_offset,
            job_state=response.headers.get("X-Job-State"),
            log_state=response.headers.get("X-Log-State"),
        )

    def job_log_download(self, job_id: int, write: Callable[[bytes], object]) -> LogChunk:
        """The job's whole log (``?download=1``), handed to ``write`` piece by piece as it streams in, so a log of
        gigabytes never sits in memory; returns what the headers say (the offset is where the log ended)."""
        response = self._request(
            "GET",
            f"/api/v1/jobs/{job_id}/log/",
            params={"download": "1"},
            headers={"Accept": "text/plain, application/json;q=0.9"},
            not_found=f"job {job_id} not found",
            stream=True,
        )
        try:
            for piece in response.iter_bytes():
                write(piece)
        except httpx.HTTPError as exc:
            raise CliError(f"the download from {self.url} broke off: {_reason(exc)}", transient=True) from exc
        finally:
            response.close()
        header = response.headers.get("X-Log-Offset", "")
        return LogChunk(
            data=b"",
            next_offset=int(header) if header.isdigit() else 0,
            job_state=response.headers.get("X-Job-State"),
            log_state=response.headers.get("X-Log-State"),
        )

    def history_trace(self, since: str | None = None, until: str | None = None) -> bytes:
        """The cluster's finished jobs as CSV in the simulator's trace schema (admins only)."""
        params = {k: v for k, v in (("since", since), ("until", until)) if v}
        response = self._request(
            "GET", "/api/v1/history/trace/", params=params, headers={"Accept": "text/csv, application/json;q=0.9"}
        )
        return response.content

    def list_nodes(self) -> list[Node]:
        return cast(list[Node], list(self._paginate("/api/v1/nodes/", [], None)))

    def tenant_overview(self) -> TenantOverview:
        body = self._json("GET", "/api/v1/tenants/")
        if not isinstance(body, dict) or not isinstance(body.get("tenants"), list):
            raise CliError(f"the portal at {self.url} sent an unexpected answer for /api/v1/tenants/")
        return cast(TenantOverview, body)

    def list_pools(self) -> list[Pool]:
        """The loanable pools (admins only)."""
        body = self._json("GET", "/api/v1/pools/")
        if not isinstance(body, list):
            raise CliError(f"the portal at {self.url} sent an unexpected answer for /api/v1/pools/")
        return cast(list[Pool], body)

    def lend_nodes(self, pool: str, nodes: Sequence[str]) -> LendReply:
        """Lend ``nodes`` of ``pool`` to training (admins only)."""
        missing = f"no pool named {pool!r}: no node belongs to it"
        body = self._json("POST", f"/api/v1/pools/{pool}/lend/", json={"nodes": list(nodes)}, not_found=missing)
        return cast(LendReply, body)

    def reclaim_nodes(self, pool: str, count: int, deadline_seconds: float) -> Reclaim:
        """Take ``count`` lent nodes of ``pool`` back within ``deadline_seconds`` (admins only)."""
        missing = f"no pool named {pool!r}: no node belongs to it"
        wanted = {"count": count, "deadline_seconds": deadline_seconds}
        body = self._json("POST", f"/api/v1/pools/{pool}/reclaim/", json=wanted, not_found=missing)
        return cast(Reclaim, body)

    # -- plumbing ----------------------------------------------------------------------------------------------

    def _paginate(self, path: str, params: list[tuple[str, str]], limit: int | None) -> Iterator[dict[str, Any]]:
        """Yield items across DRF pages by following ``next``; also accept a plain list from an unpaginated view."""
        url: str | None = path
        count = 0
        while url:
            body = self._json("GET", url, params=params if url == path else None)
            items = body.get("results", []) if isinstance(body, dict) else body
            if not isinstance(items, list):
                raise CliError(f"the portal at {self.url} sent an unexpected answer for {path}")
            for item in items:
                yield item
                count += 1
                if limit is not None and count >= limit:
                    return
            url = body.get("next") if isinstance(body, dict) else None

    def _json(self, method: str, url: str, **kwargs: Any) -> Any:
        response = self._request(method, url, **kwargs)
        try:
            return response.json()
        except ValueError as exc:
            raise CliError(
                f"the portal at {self.url} did not answer {method} {response.request.url.path} with JSON; "
                "is the URL right?"
            ) from exc

    def _request(
        self,
        method: str,
        url: str,
        *,
        not_found: str | None = None,
        auth: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:
        if auth and not self._token:
            raise CliError(f"not logged in to {self.url}; run `corral login` (or set CORRAL_TOKEN)")
        stream = kwargs.pop("stream", False)
        try:
            # With ``stream``, the body is left unread for the caller, who closes the response (job_log_download).
            response = self._http.send(self._http.build_request(method, url, **kwargs), stream=stream)
            if stream and not response.is_success:
                response.read()  # an error's body says what went wrong
        except httpx.ConnectError as exc:
            message = f"cannot reach the portal at {self.url} ({_reason(exc)}); is it running?"
            raise CliError(message, transient=True) from exc
        except httpx.TimeoutException as exc:
            raise CliError(f"the portal at {self.url} did not answer within {TIMEOUT:g}s", transient=True) from exc
        except (httpx.InvalidURL, httpx.UnsupportedProtocol) as exc:
            raise CliError(f"bad portal URL {self.url!r}: {exc}", exit_code=2) from exc
        except httpx.HTTPError as exc:
            raise CliError(f"talking to the portal at {self.url} failed: {_reason(exc)}", transient=True) from exc
        if response.is_success:
            return response
        raise CliError(self._describe_failure(response, not_found), transient=response.is_server_error)

    def _describe_failure(self, response: httpx.Response, not_found: str | None) -> str:
        """Turn a non-2xx answer into one sentence; DRF's ``{"field": ["msg"]}`` becomes ``field: msg``."""
        status = response.status_code
        body = _json_or_none(response)
        if status == 401:
            detail = _detail(body) or "authentication failed"
            return f"the portal at {self.url} refused your token ({detail.rstrip('.')}); run `corral login`"
        if status == 404:
            return not_found or f"the portal at {self.url} has no {response.request.url.path}; is the URL right?"
        if status >= 500:
            return f"the portal at {self.url} failed with HTTP {status} on {response.request.url.path}; try again later"
        message = field_errors(body) if body is not None else ""
        return message or f"the portal at {self.url} answered HTTP {status} on {response.request.url.path}"


def field_errors(body: Any) -> str:
    """Flatten a DRF error body into one line: ``gpus: Ensure ...; name: This field is required.``.

    ``detail`` and ``non_field_errors`` are shown without a prefix because they are already sentences. Nested
    errors (``env.FOO: ...``) keep their path so the user knows which key to fix.
    """
    parts: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            for key, sub in value.items():
                if key == "code" and isinstance(sub, str):
                    continue  # the portal's machine-readable error code rides next to the messages; not for people
                prefix = "" if key in ("detail", "non_field_errors") else str(key)
                walk(sub, f"{path}.{prefix}" if path and prefix else path or prefix)
        elif isinstance(value, list):
            for item in value:
                walk(item, path)
        elif value not in (None, ""):
            parts.append(f"{path}: {value}" if path else str(value))

    walk(body, "")
    return "; ".join(parts)


def _detail(body: Any) -> str:
    return str(body["detail"]) if isinstance(body, dict) and body.get("detail") else ""


def _json_or_none(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _reason(exc: Exception) -> str:
    """The innermost OS message (``Connection refused``) rather than httpx's wrapper text."""
    cause: BaseException = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
    text = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
    return str(text).removeprefix("[Errno 111] ")


def _submission(
    *,
    name: str,
    command: str,
    gpus: int | float,
    tenant: str | None,
    env: Mapping[str, str] | None,
    time_limit: int | None,
) -> dict[str, Any]:
    """The body of ``POST /api/v1/jobs/`` that a job and a job array share; optional fields only when given."""
    payload: dict[str, Any] = {"name": name, "command": command, "gpus": gpus}
    if tenant:
        payload["tenant"] = tenant
    if env:
        payload["env"] = dict(env)
    if time_limit is not None:
        payload["time_limit"] = time_limit
    return payload
