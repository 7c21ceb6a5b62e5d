"""The agent's side of the portal protocol (``docs/agent-protocol.md``): typed messages and the HTTP calls.

The agent holds no database credentials; this module is its only way to the control plane. Replies are parsed
into frozen dataclasses here, at the edge, so the loop and the runner never touch raw JSON. A reply that does not
parse is treated like a network failure (the loop backs off and retries) because every call of the protocol is
idempotent: the next heartbeat repairs whatever a lost or garbled one missed.

Long on purpose: it is the whole wire protocol (every message type, every call, every reply parser) in one place,
so the agent's idea of the protocol can be read, and checked against docs/agent-protocol.md, in one file.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx

from agent.share import Share, parse_share

log = logging.getLogger(__name__)

#: Bytes of log sent per task per heartbeat (protocol limit).
LOG_CHUNK_BYTES = 64 * 1024
#: Bytes of log sent per heartbeat over all tasks. JSON can escape a control byte into six, and the portal (Django)
#: refuses request bodies over 2.5 MB by default; a heartbeat refused for its size would get the node marked down.
HEARTBEAT_LOG_BUDGET = 256 * 1024
#: Bytes of log one ``POST /api/v1/agent/logs/`` may carry (protocol limit; the log shipper sends at most this).
LOG_POST_MAX_BYTES = 8 * 2**20


def agent_version() -> str:
    """The installed package version; a source checkout that is not installed reports ``0.0.0+unknown``."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corral")
    except PackageNotFoundError:
        return "0.0.0+unknown"


class PortalUnavailable(Exception):
    """The portal could not be reached, answered 5xx, or sent a reply that does not parse. Retry with backoff."""


class RegisterAgain(Exception):
    """The portal does not (or no longer) know this agent's session: it answered ``{"detail": "register again"}``."""


class PortalRefused(Exception):
    """The portal refused the call for a reason a retry will not fix by itself (bad token, 4xx).

    The agent still retries (an admin may re-issue the token), but logs this as an error rather than a warning.
    ``status`` is the HTTP status when the portal answered, ``code`` the refusal's ``code`` when it gave one (a
    route the portal does not have is a 404 without one).
    """

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class TaskState(StrEnum):
    RUNNING = "running"
    EXITED = "exited"
    FAILED_TO_START = "failed_to_start"


@dataclass(frozen=True, slots=True, order=True)
class TaskKey:
    """One rank of one attempt of a job: the unit the agent starts, reports and forgets."""

    job: int
    attempt: int
    rank: int

    @property
    def wire(self) -> str:
        """The ``"job:attempt:rank"`` form used as a key of ``log_offsets``."""
        return f"{self.job}:{self.attempt}:{self.rank}"

    @classmethod
    def parse(cls, text: str) -> TaskKey:
        job, attempt, rank = (int(part) for part in text.split(":"))
        return cls(job, attempt, rank)


@dataclass(frozen=True, slots=True)
class GpuDescriptor:
    """A GPU as the register call describes it. Kept separate from the probe's type so the wire format is ours."""

    index: int
    uuid: str
    model: str
    memory_mb: int

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "uuid": self.uuid, "model": self.model, "memory_mb": self.memory_mb}


@dataclass(frozen=True, slots=True)
class RegisterRequest:
    """``clean``: the agent has seen every process group of every task from before this registration gone (it
    SIGKILLed them), so the portal may free the GPUs they held. False keeps them fenced until an admin says so."""

    hostname: str
    address: str
    agent_version: str
    gpus: tuple[GpuDescriptor, ...]
    clean: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "hostname": self.hostname,
            "address": self.address,
            "agent_version": self.agent_version,
            "gpus": [gpu.to_json() for gpu in self.gpus],
            "clean": self.clean,
        }


@dataclass(frozen=True, slots=True)
class Registration:
    """``lease_seconds``: how long the agent may go without a successful heartbeat (counted from when the last one
    was sent) before it must kill its tasks and register again; None from a portal that grants no lease."""

    node: str
    heartbeat_interval: float
    sample_interval: float
    lease_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class TaskReport:
    """One task as reported in a heartbeat, with the log written since ``log_offset``."""

    key: TaskKey
    state: TaskState
    pid: int | None
    exit_code: int | None
    log_offset: int
    log: str
    log_size: int
    #: Set when the agent evicted the task to protect online work on its shared GPU (issue #17); else absent.
    eviction: Mapping[str, Any] | None = None
    #: Set when the MPS server of the task's shared GPU faulted while it was a client (issue #17); else absent.
    mps_fault: Mapping[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "job": self.key.job,
            "attempt": self.key.attempt,
            "rank": self.key.rank,
            "state": str(self.state),
            "pid": self.pid,
            "exit_code": self.exit_code,
            "log_offset": self.log_offset,
            "log": self.log,
            "log_end": self.log_end,
            "log_size": self.log_size,
        }
        # Only when set, so a whole-GPU task's report is what it always was.
        if self.eviction is not None:
            body["eviction"] = dict(self.eviction)
        if self.mps_fault is not None:
            body["mps_fault"] = dict(self.mps_fault)
        return body

    @property
    def log_end(self) -> int:
        """Byte offset in the local file where ``log`` ends (``log`` re-encodes to exactly the bytes read)."""
        return self.log_offset + len(self.log.encode())


@dataclass(frozen=True, slots=True)
class StartOrder:
    """A task to start. ``command`` is a shell string run by ``/bin/sh -c`` (or an argv list, run as is).

    ``share``: a share of its one GPU under MPS (issue #17); None is a whole-GPU order, run as it always was.
    ``share_error``: the order carried a share that does not parse; the task is refused with that sentence.
    """

    key: TaskKey
    command: str | tuple[str, ...]
    gpus: tuple[int, ...]
    env: Mapping[str, str]
    share: Share | None = None
    share_error: str | None = None


@dataclass(frozen=True, slots=True)
class KillOrder:
    """Terminate every rank of ``(job, attempt)`` on this node. ``grace_seconds=None`` means the agent default."""

    job: int
    attempt: int
    grace_seconds: float | None


@dataclass(frozen=True, slots=True)
class SignalOrder:
    """Deliver ``signal`` to every rank of ``(job, attempt)`` without stopping it (e.g. SIGUSR1: checkpoint now)."""

    job: int
    attempt: int
    signal: signal.Signals


@dataclass(frozen=True, slots=True)
class ForgetOrder:
    job: int
    attempt: int


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    start: tuple[StartOrder, ...] = ()
    kill: tuple[KillOrder, ...] = ()
    forget: tuple[ForgetOrder, ...] = ()
    signal: tuple[SignalOrder, ...] = ()
    log_offsets: Mapping[TaskKey, int] = field(default_factory=dict)
    heartbeat_interval: float | None = None


class PortalClient:
    """Synchronous httpx calls of the protocol. One instance per thread (the loop and the shipper each own one).

    ``token`` is a callable so a ``--token-file`` is re-read on every call: an admin can rotate a node's token by
    rewriting the file, without restarting the agent and killing its jobs.
    """

    def __init__(
        self,
        server: str,
        token: Callable[[], str],
        *,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._token = token
        self._http = httpx.Client(
            base_url=server.rstrip("/"),
            timeout=timeout,
            transport=transport,
            headers={"User-Agent": f"corral-agent/{agent_version()}"},
        )

    def close(self) -> None:
        self._http.close()

    def register(self, request: RegisterRequest) -> Registration:
        data = self._post("/api/v1/agent/register/", request.to_json())
        try:
            lease = data.get("lease_seconds")
            return Registration(
                node=str(data["node"]),
                heartbeat_interval=_positive(data.get("heartbeat_interval", 2.0)),
                sample_interval=_positive(data.get("sample_interval", 10.0)),
                lease_seconds=None if lease is None else _positive(lease),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PortalUnavailable(f"malformed register reply: {exc!r}") from exc

    def heartbeat(self, reports: Sequence[TaskReport]) -> HeartbeatReply:
        data = self._post("/api/v1/agent/heartbeat/", {"tasks": [report.to_json() for report in reports]})
        return parse_heartbeat_reply(data)

    def post_samples(
        self, samples: Sequence[Mapping[str, Any]], xid_events: Sequence[Mapping[str, Any]], dropped: int
    ) -> int:
        data = self._post(
            "/api/v1/agent/samples/",
            {"samples": list(samples), "xid_events": list(xid_events), "dropped": dropped},
        )
        accepted = data.get("accepted", len(samples))
        return accepted if isinstance(accepted, int) else len(samples)

    def post_log(self, key: TaskKey, offset: int, data: bytes) -> int:
        """POST bytes ``[offset, offset + len(data))`` of a task's log file as they are; returns the bytes of that
        log the portal holds (it stored ``data`` if and only if that is ``offset + len(data)``)."""
        where = {"job": key.job, "attempt": key.attempt, "rank": key.rank, "offset": offset}
        reply = self._post("/api/v1/agent/logs/", content=data, params=where)
        try:
            return max(0, _int(reply["log_offset"]))
        except (KeyError, TypeError) as exc:
            raise PortalUnavailable(f"malformed log reply: {exc!r}") from exc

    def _post(
        self,
        path: str,
        body: Mapping[str, Any] | None = None,
        *,
        content: bytes | None = None,
        params: Mapping[str, int] | None = None,
    ) -> dict[str, Any]:
        """POST ``body`` as JSON, or ``content`` as raw bytes (``application/octet-stream``)."""
        try:
            token = self._token()
        except OSError as exc:
            raise PortalRefused(f"cannot read the node token: {exc}") from exc
        headers = {"Authorization": f"Node {token}"}
        if content is not None:
            headers["Content-Type"] = "application/octet-stream"
        try:
            response = self._http.post(path, json=body, content=content, params=params, headers=headers)
        except httpx.HTTPError as exc:
            raise PortalUnavailable(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code >= 500:
            raise PortalUnavailable(f"{path} answered {response.status_code}")
        if response.is_redirect:
            # Not followed: re-posting the token to wherever a redirect points is not ours to decide.
            where = response.headers.get("Location", "?")
            raise PortalRefused(f"{path} redirects to {where}; give that address as --server")
        data = _json_object(response)
        if response.status_code in (401, 409) and str(data.get("detail", "")).lower() == "register again":
            raise RegisterAgain(path)
        if response.status_code >= 400:
            detail = data.get("detail") or response.text[:200]
            code = data.get("code")
            raise PortalRefused(
                f"{path} answered {response.status_code}: {detail}",
                status=response.status_code,
                code=code if isinstance(code, str) else None,
            )
        return data


def parse_heartbeat_reply(data: Mapping[str, Any]) -> HeartbeatReply:
    """Parse a heartbeat reply. A malformed order is logged and skipped; the rest of the reply still applies."""
    start: list[StartOrder] = []
    for item in _list(data.get("start")):
        try:
            start.append(_start_order(item))
        except (KeyError, TypeError, ValueError) as exc:
            log.error("ignoring malformed start order %r: %s", item, exc)
    kill: list[KillOrder] = []
    for item in _list(data.get("kill")):
        try:
            grace = item.get("grace_seconds")
            kill.append(KillOrder(_int(item["job"]), _int(item["attempt"]), None if grace is None else float(grace)))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.error("ignoring malformed kill order %r: %s", item, exc)
    forget: list[ForgetOrder] = []
    for item in _list(data.get("forget")):
        try:
            forget.append(ForgetOrder(_int(item["job"]), _int(item["attempt"])))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.error("ignoring malformed forget order %r: %s", item, exc)
    signals: list[SignalOrder] = []
    for item in _list(data.get("signal")):
        try:
            signals.append(SignalOrder(_int(item["job"]), _int(item["attempt"]), _signal(item["signal"])))
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            log.error("ignoring malformed signal order %r: %s", item, exc)
    offsets: dict[TaskKey, int] = {}
    raw_offsets = data.get("log_offsets") or {}
    if isinstance(raw_offsets, Mapping):
        for wire, value in raw_offsets.items():
            try:
                offsets[TaskKey.parse(str(wire))] = max(0, _int(value))
            except (TypeError, ValueError) as exc:
                log.error("ignoring malformed log offset %r=%r: %s", wire, value, exc)
    interval = data.get("heartbeat_interval")
    try:
        heartbeat_interval = None if interval is None else _positive(interval)
    except (TypeError, ValueError):
        heartbeat_interval = None
    return HeartbeatReply(tuple(start), tuple(kill), tuple(forget), tuple(signals), offsets, heartbeat_interval)


def _start_order(item: Mapping[str, Any]) -> StartOrder:
    command = item["command"]
    if isinstance(command, list):
        if not command or not all(isinstance(part, str) for part in command):
            raise ValueError("command list must hold strings")
        command = tuple(command)
    elif not isinstance(command, str) or not command.strip():
        raise ValueError("command must be a non-empty string")
    env = item.get("env") or {}
    if not isinstance(env, Mapping):
        raise TypeError("env must be an object")
    gpus = tuple(_int(gpu) for gpu in item.get("gpus") or ())
    share: Share | None = None
    share_error: str | None = None
    if item.get("share") is not None:
        # A bad share refuses this task (reported as failed_to_start), not the order: the portal would repeat a
        # skipped order for ever, while a refusal is reported once and settled.
        try:
            share = parse_share(item["share"], gpus)
        except ValueError as exc:
            share_error = f"bad share: {exc}"
    return StartOrder(
        key=TaskKey(_int(item["job"]), _int(item["attempt"]), _int(item.get("rank", 0))),
        command=command,
        gpus=gpus,
        env={str(name): str(value) for name, value in env.items()},
        share=share,
        share_error=share_error,
    )


def _signal(value: object) -> signal.Signals:
    """A signal by name (``"SIGUSR1"`` or ``"USR1"``) or number."""
    if isinstance(value, str):
        name = value.strip().upper()
        try:
            return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
        except KeyError:
            raise ValueError(f"unknown signal {value!r}") from None
    return signal.Signals(_int(value))


def _json_object(response: httpx.Response) -> dict[str, Any]:
    if not response.content:
        return {}
    try:
        data = response.json()
    except ValueError as exc:
        if response.status_code >= 400:
            return {}
        raise PortalUnavailable(f"reply is not JSON ({response.status_code})") from exc
    if not isinstance(data, dict):
        raise PortalUnavailable(f"reply is not a JSON object ({response.status_code})")
    return data


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _positive(value: object) -> float:
    number = float(value)  # type: ignore[arg-type]
    if not number > 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return number
