"""The chaos benchmark's users (``bench/chaos.py``): the job mix, the job script that stamps what really runs, and
a REST client that submits, cancels, watches and finally reads every job back, counting every answer it gets.

Submits go through ``POST /api/v1/jobs/`` with each tenant user's token, like ``corral submit``. A submit whose
answer was lost (connection reset, timeout, 5xx) may still have committed, so before trying again the driver
looks the job up by its unique name: a job is never submitted twice on purpose, and ``duplicates`` in the report
counts any that exist anyway.
"""

from __future__ import annotations

import random
import re
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

TERMINAL = ("succeeded", "failed", "cancelled")
SUBMIT_GIVE_UP = 180.0  # seconds one submit keeps being retried (the portal may be down a while)
COLLECT_GIVE_UP = 120.0


# --- the mix ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    slug: str
    cap: int
    username: str
    password: str


@dataclass(frozen=True)
class JobSpec:
    key: int
    name: str
    tenant: str
    gpus: int
    seconds: int  # work: ticks before it ends by itself
    exit_code: int
    stubborn: bool  # ignores SIGTERM (trap '' TERM): only SIGKILL stops it
    time_limit: int | None  # shorter than ``seconds`` when set: the job always overruns it
    cancel_after: float | None  # seconds after its submit at which the driver cancels it
    submit_at: float  # seconds into the chaos phase

    @property
    def kind(self) -> str:
        shape = "gang" if self.gpus > 2 else f"{self.gpus}gpu"
        how = "limited" if self.time_limit else ("fail" if self.exit_code else "ok")
        long = "/long" if self.seconds > 12 and not self.time_limit else ""
        return f"{shape}/{how}{long}{'/stubborn' if self.stubborn else ''}{'/cancel' if self.cancel_after else ''}"

    def expected(self) -> str:
        if self.cancel_after is not None:
            return "any"  # cancelled, unless it ended first
        return "failed" if self.time_limit or self.exit_code else "succeeded"


def make_tenants(total_gpus: int, gpus_per_agent: int, rng: random.Random) -> list[Tenant]:
    """Three tenants whose caps add up to more than the cluster, so caps bind and tenants compete: about 2/3, 1/2
    and 1/3 of the GPUs; the first can always hold the largest gang."""
    caps = [max(2 * gpus_per_agent, round(total_gpus * 2 / 3)), round(total_gpus / 2), round(total_gpus / 3)]
    caps = [min(total_gpus, max(1, c)) for c in caps]
    return [
        Tenant(slug, cap, f"chaos-{slug}", f"pw-{rng.getrandbits(64):x}")
        for slug, cap in zip(("alpha", "beta", "gamma"), caps, strict=True)
    ]


def make_jobs(
    n: int,
    tenants: list[Tenant],
    gpus_per_agent: int,
    agents: int,
    duration: float,
    rng: random.Random,
    node_timeout: float = 10.0,
) -> list[JobSpec]:
    """``n`` jobs submitted evenly over ``duration`` seconds: about 55 % 1-GPU, 15 % 2-GPU and 30 % gangs that
    span two nodes (more GPUs than one node has). Most work 3-12 s; a quarter work 1-3 node timeouts, so they are
    still running when a frozen node is declared down and requeued. 15 % fail (exit 3), 15 % overrun a time limit,
    20 % ignore SIGTERM, 5 % are cancelled a few seconds after their submit."""
    largest = max(t.cap for t in tenants)
    gang_sizes = list(range(gpus_per_agent + 1, min(2 * gpus_per_agent, largest, gpus_per_agent * agents) + 1))
    specs = []
    for key in range(n):
        roll = rng.random()
        if roll < 0.30 and gang_sizes and agents > 1:
            gpus = rng.choice(gang_sizes)
        elif roll < 0.45:
            gpus = min(2, gpus_per_agent)
        else:
            gpus = 1
        tenant = rng.choice([t for t in tenants if t.cap >= gpus])
        long = rng.random() < 0.25
        seconds = rng.randint(round(node_timeout), round(3 * node_timeout)) if long else rng.randint(3, 12)
        behaviour = rng.random()
        exit_code, time_limit = 0, None
        if behaviour < 0.15:
            exit_code = 3
        elif behaviour < 0.30:
            time_limit = rng.randint(2, 5)
            seconds = time_limit + rng.randint(6, 12)
        stubborn = rng.random() < 0.20
        cancel_after = rng.uniform(2.0, 8.0) if rng.random() < 0.05 else None
        submit_at = duration * key / n + rng.uniform(0, duration / n)
        specs.append(JobSpec(key, f"chaos-{key:05d}", tenant.slug, gpus, seconds, exit_code, stubborn, time_limit,
                             cancel_after, submit_at))  # fmt: skip
    return specs


def command(spec: JobSpec, stamps: Path) -> str:
    """The job: stamps ``start``, then a ``tick`` a second for ``seconds``, then ``end`` and its exit code; on
    SIGTERM it stamps ``term`` and exits 143, unless it is stubborn. The node is the agent's workdir name
    (``<run>/agents/<node>/jobs/<job>-<attempt>-<rank>``). Format: ``bench/chaos_stamps.py``."""
    trap = "trap '' TERM" if spec.stubborn else "trap 'st term; exit 143' TERM"
    return "\n".join(
        [
            f"S={shlex.quote(str(stamps))}; D=$(pwd); N=${{D%/jobs/*}}; N=${{N##*/}}",
            'F="$S/$CORRAL_JOB_ID.$CORRAL_ATTEMPT.$CORRAL_NODE_RANK.$N.$$"',
            'st() { echo "$1 $CORRAL_JOB_ID $CORRAL_ATTEMPT $CORRAL_NODE_RANK $N ${CUDA_VISIBLE_DEVICES:--} '
            '$(date +%s.%N)" >>"$F"; }',
            trap,
            'st start; echo "job $CORRAL_JOB_ID attempt $CORRAL_ATTEMPT rank $CORRAL_NODE_RANK on $N"',
            f"i=0; while [ $i -lt {spec.seconds} ]; do sleep 1; i=$((i+1)); st tick; done",
            f"st end; exit {spec.exit_code}",
        ]
    )


# --- HTTP, counted --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HttpRecord:
    began: float
    ended: float
    method: str
    path: str  # ids replaced by {id}
    status: int | None  # None: no answer (refused, reset, timeout)
    error: str = ""


class Api:
    """An httpx client that records every request the driver makes and what came back."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(15.0, connect=3.0))
        self.records: list[HttpRecord] = []

    def call(self, method: str, path: str, token: str | None = None, **kwargs: Any) -> httpx.Response | None:
        headers = {"Authorization": f"Token {token}"} if token else {}
        began = time.time()
        template = re.sub(r"/\d+/", "/{id}/", path.split("?", 1)[0])
        try:
            response = self.client.request(method, path, headers=headers, **kwargs)
        except httpx.HTTPError as exc:
            self.records.append(HttpRecord(began, time.time(), method, template, None, type(exc).__name__))
            return None
        self.records.append(HttpRecord(began, time.time(), method, template, response.status_code))
        return response

    def close(self) -> None:
        self.client.close()


def results(payload: Any) -> list[dict[str, Any]]:
    return payload["results"] if isinstance(payload, dict) and "results" in payload else payload


class Driver:
    """Submits the jobs on their schedule, cancels the ones to cancel, watches the queue, and reads it all back."""

    def __init__(self, url: str, tenants: list[Tenant], staff: tuple[str, str], specs: list[JobSpec], stamps: Path):
        self.api = Api(url)
        self.tenants = {t.slug: t for t in tenants}
        self.staff = staff
        self.specs = specs
        self.stamps = stamps
        self.tokens: dict[str, str] = {}
        self.ids: dict[int, int] = {}  # spec key -> job id
        self.submitted_at: dict[int, float] = {}
        self.refused: dict[int, str] = {}  # spec key -> why the portal refused it (a 4xx)
        self.cancels_sent = 0
        self.active: set[int] = set()

    # --- plumbing -----------------------------------------------------------------------------------------
    def _retry(self, what: str, attempt: Any, give_up: float) -> Any:
        """Call ``attempt()`` until it returns something other than None, backing off; None after ``give_up``."""
        deadline, delay = time.time() + give_up, 0.25
        while True:
            value = attempt()
            if value is not None:
                return value
            if time.time() > deadline:
                note(f"gave up on {what} after {give_up:.0f}s")
                return None
            time.sleep(delay)
            delay = min(delay * 2, 3.0)

    def login(self) -> None:
        def token(username: str, password: str) -> str | None:
            r = self.api.call("POST", "/api/v1/auth/token/", json={"username": username, "password": password})
            return r.json()["token"] if r is not None and r.status_code == 200 else None

        for t in self.tenants.values():
            self.tokens[t.slug] = self._retry(
                f"a token for {t.username}", lambda t=t: token(t.username, t.password), 60
            )
        self.tokens["staff"] = self._retry("the staff token", lambda: token(*self.staff), 60)
        if None in self.tokens.values():
            raise RuntimeError("could not log in to the portal")

    def nodes_up(self) -> set[str]:
        r = self.api.call("GET", "/api/v1/nodes/", self.tokens["staff"])
        if r is None or r.status_code != 200:
            return set()
        return {n["name"] for n in results(r.json()) if n["state"] == "up" and n["gpus"]}

    # --- submit and cancel ------------------------------------------------------------------------------------
    def _find(self, spec: JobSpec) -> int | None | bool:
        """The id of the job named like ``spec``; False when there is none; None when the portal did not answer."""
        r = self.api.call("GET", f"/api/v1/jobs/?name={spec.name}", self.tokens["staff"])
        if r is None or r.status_code != 200:
            return None
        found = [j["id"] for j in results(r.json()) if j["name"] == spec.name]
        return min(found) if found else False

    def submit(self, spec: JobSpec) -> None:
        body = {"name": spec.name, "command": command(spec, self.stamps), "gpus": spec.gpus, "tenant": spec.tenant}
        if spec.time_limit is not None:
            body["time_limit"] = spec.time_limit
        uncertain = False

        def attempt() -> int | str | None:
            nonlocal uncertain
            if uncertain:  # the last try may have committed: look before submitting again
                found = self._find(spec)
                if found is None:
                    return None
                if found is not False:
                    return int(found)
            r = self.api.call("POST", "/api/v1/jobs/", self.tokens[spec.tenant], json=body)
            if r is not None and r.status_code == 201:
                return int(r.json()["id"])
            if r is not None and 400 <= r.status_code < 500:
                return f"{r.status_code}: {r.text[:300]}"
            uncertain = True
            return None

        outcome = self._retry(f"submitting {spec.name}", attempt, SUBMIT_GIVE_UP)
        if isinstance(outcome, int):
            self.ids[spec.key] = outcome
            self.submitted_at[spec.key] = time.time()
            self.active.add(outcome)
        else:
            self.refused[spec.key] = outcome or "no answer"

    def cancel(self, spec: JobSpec) -> None:
        job = self.ids[spec.key]

        def attempt() -> bool | None:
            r = self.api.call("POST", f"/api/v1/jobs/{job}/cancel/", self.tokens[spec.tenant])
            return True if r is not None and r.status_code in (200, 409) else None

        if self._retry(f"cancelling job {job}", attempt, 60):
            self.cancels_sent += 1

    # --- watching -------------------------------------------------------------------------------------------
    def poll_active(self) -> set[int] | None:
        """Ids of every pending or running job (all pages), or None when a page did not come."""
        found: set[int] = set()
        path: str | None = "/api/v1/jobs/?state=pending&state=running"
        while path:
            r = self.api.call("GET", path, self.tokens["staff"])
            if r is None or r.status_code != 200:
                return None
            payload = r.json()
            found |= {j["id"] for j in results(payload)}
            nxt = payload.get("next") if isinstance(payload, dict) else None
            path = nxt[nxt.index("/api/") :] if nxt else None
        self.active = found
        return found

    def run(self, t0: float, until: float, progress: Any) -> None:
        """Submit every job on its schedule and cancel the chosen ones; return once all are submitted and the
        chaos phase (``until``) is over."""
        pending = sorted(self.specs, key=lambda s: s.submit_at)
        cancels: list[tuple[float, JobSpec]] = []
        next_poll = 0.0
        while pending or time.time() < until or cancels:
            now = time.time()
            if pending and now >= t0 + pending[0].submit_at:
                spec = pending.pop(0)
                self.submit(spec)
                if spec.cancel_after is not None and spec.key in self.ids:
                    cancels.append((self.submitted_at[spec.key] + spec.cancel_after, spec))
                continue
            due = [c for c in cancels if c[0] <= now]
            for c in due:
                cancels.remove(c)
                self.cancel(c[1])
            if now >= next_poll:
                self.poll_active()
                progress()
                next_poll = now + 3.0
            time.sleep(0.1)

    def settle(self, deadline: float, progress: Any) -> bool:
        """Wait until no job is pending or running (one full, successful listing says so) or ``deadline``."""
        while time.time() < deadline:
            active = self.poll_active()
            progress()
            if active is not None and not active:
                return True
            time.sleep(2.0)
        return False

    # --- reading back -----------------------------------------------------------------------------------------
    def collect(self) -> dict[int, dict[str, Any]]:
        """Every submitted job as the API shows it now, with its events; ``{"vanished": True}`` for a 404."""
        out: dict[int, dict[str, Any]] = {}
        for job in sorted(self.ids.values()):

            def get(path: str) -> Any:
                r = self.api.call("GET", path, self.tokens["staff"])
                if r is None or r.status_code >= 500:
                    return None
                return {"status": r.status_code, "body": r.json() if r.status_code == 200 else r.text[:200]}

            detail = self._retry(f"reading job {job}", lambda job=job: get(f"/api/v1/jobs/{job}/"), COLLECT_GIVE_UP)
            events = self._retry(
                f"events of {job}", lambda job=job: get(f"/api/v1/jobs/{job}/events/"), COLLECT_GIVE_UP
            )
            if detail is None or events is None:
                out[job] = {"unreadable": True}
            elif detail["status"] == 404:
                out[job] = {"vanished": True}
            else:
                out[job] = {"job": detail["body"], "events": events["body"] if events["status"] == 200 else []}
        return out

    def all_named(self) -> dict[str, list[int]]:
        """Every job the portal holds, by name (to find duplicates of a submit)."""
        named: dict[str, list[int]] = {}
        path: str | None = "/api/v1/jobs/"
        while path:
            r = self._retry("listing all jobs", lambda path=path: self.api.call("GET", path, self.tokens["staff"]), 60)
            if r is None or r.status_code != 200:
                return named
            payload = r.json()
            for j in results(payload):
                named.setdefault(j["name"], []).append(j["id"])
            nxt = payload.get("next") if isinstance(payload, dict) else None
            path = nxt[nxt.index("/api/") :] if nxt else None
        return named


def note(message: str) -> None:
    print(f"[chaos] {message}", file=sys.stderr, flush=True)
