"""Simulated MPS for ``--fake-gpus``, the demo and CI: the same :class:`~agent.mps.MpsControl`, no GPU behind it.

A simulated daemon is a directory and a marker file (``<pipe_dir>/simulated-daemon``) instead of a process, so the
same records, the watchdog's stop and the agent's clean-up apply to it as to a real one, and a test can see from the
disk whether a daemon "runs". It records its clients with their shares, counts starts, stops and restarts, and can be
told to fault (:meth:`SimulatedMps.inject_fault`), the way a client's illegal memory access faults a real server:
from then on the GPU reports the fault and refuses new clients until it is restarted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from agent.job_user import JobUser
from agent.mps import SIMULATED_MARKER, DaemonRecords, MpsControl, MpsDaemon, MpsError, ServerFault
from agent.share import Share


class SimulatedMps(MpsControl):
    """``gpus`` simulated GPUs (indices 0 .. gpus-1). Not thread-safe: the agent's loop thread calls it."""

    kind = "simulated"

    def __init__(self, state_dir: Path, records: DaemonRecords, gpus: int, *, owner: JobUser | None = None) -> None:
        super().__init__(state_dir, records, owner=owner)
        self.gpus = gpus
        #: Client pid → its share, by GPU: what the GPU's server would be serving.
        self.clients: dict[int, dict[int, Share]] = {}
        self.starts: Counter[int] = Counter()
        self.stops: Counter[int] = Counter()
        self._faults: dict[int, ServerFault] = {}

    def inject_fault(self, gpu: int, *, culprit: int | None = None, detail: str = "illegal memory access") -> None:
        """Fault the GPU's server, as a client's fatal exception would (``culprit``: the pid to blame, if any)."""
        suspects = frozenset() if culprit is None else frozenset({culprit})
        self._faults[gpu] = ServerFault(gpu, f"simulated fault: {detail}", suspects)

    def running(self, daemon: MpsDaemon) -> bool:
        return (daemon.pipe_dir / SIMULATED_MARKER).exists()

    def fault(self, gpu: int) -> ServerFault | None:
        daemon = self._daemons.get(gpu)
        if daemon is None:
            return None
        if not self.running(daemon):
            return ServerFault(gpu, "the MPS control daemon is gone")
        return self._faults.get(gpu)

    def client_started(self, gpu: int, pid: int, share: Share) -> None:
        if gpu in self._faults:
            raise MpsError(f"the MPS server of GPU {gpu} has faulted and takes no new client until it restarts")
        self.clients.setdefault(gpu, {})[pid] = share

    def client_exited(self, gpu: int, pid: int) -> None:
        self.clients.get(gpu, {}).pop(pid, None)

    def _launch(self, daemon: MpsDaemon) -> None:
        if not 0 <= daemon.gpu < self.gpus:
            raise MpsError(f"this node has no GPU {daemon.gpu} (simulated GPUs 0 to {self.gpus - 1})")
        try:
            (daemon.pipe_dir / SIMULATED_MARKER).write_text(f"simulated MPS control daemon of GPU {daemon.gpu}\n")
        except OSError as exc:
            raise MpsError(f"cannot start the simulated daemon of GPU {daemon.gpu}: {exc.strerror}") from exc
        self.starts[daemon.gpu] += 1
        self._faults.pop(daemon.gpu, None)  # a fresh daemon brings a fresh server
        self.clients.pop(daemon.gpu, None)

    def _quit(self, daemon: MpsDaemon) -> None:
        (daemon.pipe_dir / SIMULATED_MARKER).unlink(missing_ok=True)
        self.stops[daemon.gpu] += 1
