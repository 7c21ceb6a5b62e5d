"""Tasks that ask for a share of one GPU, and the traces they come from (issue #17).

Two sources: the shared trace schema with its ``gpu_milli`` column (``../shared/traces/README.md``; a row with
``num_gpus`` 1 and ``gpu_milli`` below 1000 is a share, its ``vc`` ``LS``/``online`` makes it online), and the
Alibaba GPU-sharing trace (``cluster-trace-gpu-v2023``, Weng et al., ATC '23) in its own schema, with its node list.
"""

from __future__ import annotations

import csv
import gzip
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from scheduling.core.sharing import GIB, SharedGpu, WorkloadClass
from scheduling.sim.trace import TraceError

#: Classes that mark a task online: Alibaba's latency-sensitive QoS, or the word itself.
ONLINE_CLASSES = frozenset({"ls", "online"})


@dataclass(frozen=True, slots=True)
class ShareTask:
    """A task of a sharing replay: it arrives at ``submit_time`` and runs ``duration`` seconds when it has its
    ask (``gpu_fraction`` of one GPU; 1.0 is a whole GPU) to itself. Online tasks are services: they live for
    ``duration`` whatever their speed, and the replay records how much neighbours slow them."""

    task_id: str
    submit_time: float
    duration: float
    gpu_fraction: float
    workload_class: WorkloadClass = WorkloadClass.OFFLINE
    gpu_memory_bytes: int | None = None

    @property
    def is_share(self) -> bool:
        return self.gpu_fraction < 1.0


def workload_class(label: str) -> WorkloadClass:
    return WorkloadClass.ONLINE if label.strip().lower() in ONLINE_CLASSES else WorkloadClass.OFFLINE


def _open(path: str | Path) -> Iterator[dict[str, str]]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        yield from csv.DictReader(f)


def read_share_trace(path: str | Path) -> list[ShareTask]:
    """Single-GPU tasks of a trace in the shared schema, in submission order; ``gpu_milli`` (empty: a whole GPU)
    gives the share, ``workload_class`` (else ``vc``) the class. Multi-GPU rows are left out: a share is part of
    one GPU, and a gang replay is ``corral simulate`` without ``--sharing``."""
    tasks = []
    for line, row in enumerate(_open(path), start=2):
        try:
            if int(float(row["num_gpus"])) != 1:
                continue
            milli = float(row.get("gpu_milli") or 1000)
            if not 0 < milli <= 1000:
                raise ValueError(f"gpu_milli must be in (0, 1000], not {milli:g}")
            tasks.append(
                ShareTask(
                    task_id=row["job_id"],
                    submit_time=float(row["submit_time"]),
                    duration=float(row["duration"]),
                    gpu_fraction=milli / 1000,
                    workload_class=workload_class(row.get("workload_class") or row.get("vc") or ""),
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise TraceError(f"{path}:{line}: {exc}") from None
    tasks.sort(key=lambda t: t.submit_time)
    return tasks


def read_openb_pods(path: str | Path) -> tuple[list[ShareTask], int]:
    """The share tasks of the Alibaba pod list (``num_gpu`` 1, ``gpu_milli`` < 1000) that ran, and how many
    share tasks were left out because they never ran (no ``scheduled_time``: their run time is unknown).

    A task arrives at its ``creation_time`` and runs from ``scheduled_time`` to ``deletion_time``; ``LS`` is
    online, every other QoS offline."""
    tasks, never_ran = [], 0
    for row in _open(path):
        if row["num_gpu"] != "1" or not row["gpu_milli"] or int(row["gpu_milli"]) >= 1000:
            continue
        if not row["scheduled_time"] or not row["deletion_time"]:
            never_ran += 1
            continue
        duration = float(row["deletion_time"]) - float(row["scheduled_time"])
        tasks.append(
            ShareTask(
                task_id=row["name"],
                submit_time=float(row["creation_time"]),
                duration=max(1.0, duration),
                gpu_fraction=int(row["gpu_milli"]) / 1000,
                workload_class=workload_class(row["qos"]),
            )
        )
    tasks.sort(key=lambda t: t.submit_time)
    return tasks, never_ran


#: GPU memory by the node list's model names. G2 and G3 are Alibaba's own names with no published memory size:
#: 16 GiB and 32 GiB are assumptions (docs/sharing.md says so). P100 (Pascal) predates Volta's MPS limits, so it
#: never accepts shares.
OPENB_GPU_MODELS: dict[str, tuple[int, bool]] = {
    "P100": (16 * GIB, False),
    "T4": (16 * GIB, True),
    "V100M16": (16 * GIB, True),
    "V100M32": (32 * GIB, True),
    "A10": (24 * GIB, True),
    "G2": (16 * GIB, True),
    "G3": (32 * GIB, True),
}


def read_openb_nodes(path: str | Path) -> list[tuple[str, int, str]]:
    """``(node name, GPUs, model)`` for every node of the Alibaba node list, in file order."""
    return [(row["sn"], int(row["gpu"]), row["model"]) for row in _open(path)]


def openb_gpus(nodes: Iterable[tuple[str, int, str]]) -> list[SharedGpu]:
    """The GPUs of these nodes as shared GPUs (memory and whether they take shares by model)."""
    out = []
    for name, count, model in nodes:
        memory, sharing = OPENB_GPU_MODELS.get(model, (16 * GIB, True))
        out += [SharedGpu(node=name, gpu=k, memory_bytes=memory, sharing=sharing) for k in range(count)]
    return out
