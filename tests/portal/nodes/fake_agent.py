"""A node's processes as the fencing tests see them: a stand-in for ``corral-agent`` that speaks its protocol to the
real node services (register, heartbeat) and keeps a ledger of the processes it would be running.

It is not a mock of the portal: every answer comes from the real services and database. It stands in for the node
(the hardware boundary of these tests), so that a test can say what *really* runs on each GPU, a process that
ignores SIGTERM included, and compare that with what the portal believes. The real agent is tested against a real
portal in tests/agent and tests/e2e, and under faults by bench/chaos.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from portal.nodes.models import Node
from portal.nodes.services import GpuReport, NodeFenced, TaskReport, node_heartbeat, node_register

Key = tuple[int, int, int]  # job, attempt, rank


@dataclass
class Process:
    """One task's process group on the node. ``kill_at``: when a SIGKILL follows the SIGTERM it ignored."""

    job: int
    attempt: int
    rank: int
    gpus: list[int]
    ignores_term: bool
    exit_code: int | None = None
    kill_at: float | None = None

    @property
    def alive(self) -> bool:
        return self.exit_code is None


@dataclass
class FakeNode:
    """The processes of one node and its agent's view of them. ``clock`` is the test's, in seconds."""

    node: Node
    gpus: int = 4
    processes: dict[Key, Process] = field(default_factory=dict)
    finished: set[Key] = field(default_factory=set)
    clock: float = 0.0
    registered: bool = True
    #: Commands containing this word ignore SIGTERM (they die only by SIGKILL after the grace).
    stubborn_word: str = "stubborn"

    #: Processes the agent could not kill and no longer tracks (it registered without a clean slate).
    survivors: list[Process] = field(default_factory=list)

    # -- what runs ------------------------------------------------------------------------------------------------
    def alive(self) -> list[Process]:
        return [p for p in [*self.processes.values(), *self.survivors] if p.alive]

    def advance(self, seconds: float) -> None:
        """Let time pass: a process whose grace has run out dies of SIGKILL."""
        self.clock += seconds
        for p in self.alive():
            if p.kill_at is not None and self.clock >= p.kill_at:
                p.exit_code = -9

    def finish(self, job: int, exit_code: int = 0) -> None:
        """The job's processes here end by themselves."""
        for p in self.alive():
            if p.job == job:
                p.exit_code = exit_code

    def kill_everything(self) -> None:
        """SIGKILL every process group it tracks at once (a re-registration, or the lease running out)."""
        for p in self.processes.values():
            if p.alive:
                p.exit_code = -9
        self.finished.update(self.processes)
        self.processes.clear()

    # -- the protocol ---------------------------------------------------------------------------------------------
    def register(self, *, clean: bool = True) -> None:
        """Start afresh: kill what runs (when ``clean``; otherwise the processes survive, e.g. stuck in the
        kernel), forget every task, register."""
        if clean:
            self.kill_everything()
            for p in self.survivors:
                p.exit_code = -9
            self.survivors.clear()
        else:
            self.survivors += [p for p in self.processes.values() if p.alive]
            self.finished.update(self.processes)
            self.processes.clear()
        reports = [GpuReport(i, f"GPU-{self.node.name}-{i}") for i in range(self.gpus)]
        node_register(
            node=self.node, hostname=self.node.name, address="a", agent_version="t", gpus=reports, clean=clean
        )
        self.registered = True

    def heartbeat(self) -> bool:
        """One heartbeat; False when the portal answers "register again" (the node was marked down)."""
        if not self.registered:
            return False
        reports = [
            TaskReport(
                p.job,
                p.attempt,
                p.rank,
                "running" if p.alive else "exited",
                pid=1000 + p.job,
                exit_code=p.exit_code,
            )
            for p in self.processes.values()
        ]
        try:
            reply = node_heartbeat(node=self.node, reports=reports)
        except NodeFenced:
            self.registered = False
            return False
        for order in reply.kill:
            for p in self._of(int(order["job"]), int(order["attempt"])):
                grace = float(order["grace_seconds"] or 0)  # type: ignore[arg-type]
                if not p.alive:
                    continue
                if grace == 0 or not p.ignores_term:
                    p.exit_code = -9 if grace == 0 else -15
                elif p.kill_at is None:
                    p.kill_at = self.clock + grace
        for order in reply.forget:
            for p in self._of(order["job"], order["attempt"]):
                if p.alive:
                    p.exit_code = -15
                key = (p.job, p.attempt, p.rank)
                self.finished.add(key)
                del self.processes[key]
        for start in reply.start:
            key = (int(start["job"]), int(start["attempt"]), int(start["rank"]))  # type: ignore[call-overload]
            if key in self.processes or key in self.finished:
                continue
            command = str(start["command"])
            self.processes[key] = Process(*key, gpus=list(start["gpus"]), ignores_term=self.stubborn_word in command)  # type: ignore[call-overload]
        return True

    def _of(self, job: int, attempt: int) -> list[Process]:
        return [p for p in self.processes.values() if p.job == job and p.attempt == attempt]


def fence_violations(nodes: list[FakeNode]) -> list[str]:
    """What breaks the promise of issue #15, comparing what really runs (the fake nodes) with the ledger:

    - a GPU used by two living processes (of different attempts or jobs);
    - a job with living processes of two attempts (it runs twice). A survivor of SIGKILL (stuck in the kernel) is
      left out here: it never runs user code again, though it still pins its GPUs, so it counts for the rest;
    - a living process on a GPU the ledger does not give its attempt (the ledger freed it too early);
    - a tenant holding more GPUs than its cap, in the ledger or in what really runs.
    """
    from collections import Counter, defaultdict

    from portal.jobs.models import Allocation, Job
    from portal.tenants.models import Quota

    problems: list[str] = []
    attempts: dict[int, set[int]] = defaultdict(set)
    running: Counter[int] = Counter()  # job -> GPUs its living processes use
    active = set(
        Allocation.objects.filter(released_at__isnull=True).values_list("job_id", "attempt", "node__name", "gpu__index")
    )
    for fake in nodes:
        users: dict[int, Key] = {}
        for p in fake.alive():
            if p not in fake.survivors:
                attempts[p.job].add(p.attempt)
            running[p.job] += len(p.gpus)
            for gpu in p.gpus:
                if gpu in users:
                    problems.append(f"{fake.node.name} GPU {gpu} used by {users[gpu]} and {(p.job, p.attempt, p.rank)}")
                users[gpu] = (p.job, p.attempt, p.rank)
                if (p.job, p.attempt, fake.node.name, gpu) not in active:
                    problems.append(
                        f"{fake.node.name} GPU {gpu}: job {p.job} attempt {p.attempt} runs without an allocation"
                    )
    problems += [f"job {job} runs attempts {sorted(a)} at once" for job, a in attempts.items() if len(a) > 1]
    caps = dict(Quota.objects.filter(gpu_limit__isnull=False).values_list("tenant__slug", "gpu_limit"))
    tenant_of = dict(Job.objects.values_list("pk", "tenant__slug"))
    held = Counter(tenant_of[job] for job, _, _, _ in active)
    really = Counter()
    for job, gpus in running.items():
        really[tenant_of[job]] += gpus
    for tenant, cap in caps.items():
        if held[tenant] > cap:
            problems.append(f"tenant {tenant} holds {held[tenant]} GPUs in the ledger, over its cap of {cap}")
        if really[tenant] > cap:
            problems.append(f"tenant {tenant} really uses {really[tenant]} GPUs, over its cap of {cap}")
    return problems
