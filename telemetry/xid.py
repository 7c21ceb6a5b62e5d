"""The XIDs Corral acts on, and why.

An XID is the driver's numbered report of a GPU error. Some say "this GPU can no longer be trusted until it is reset
or repaired" (fatal: drain the GPU and retry its job elsewhere); some say "the program running on it did something
wrong" (application: the job failed by itself, the GPU is fine); a few are informational precursors the predictor
uses. Everything not listed is treated as unknown: recorded and fed to the predictor, but it drains nothing.

The lists are defaults; a site can pass its own sets to :class:`telemetry.health.HealthPolicy`. The reasons are
our reading of NVIDIA's XID catalogue and of fleet reports (Meta's Llama 3 training report, the ByteDance failure
prediction paper, NCSA Delta's A100/H100 study); ``docs/telemetry.md`` has the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class XidClass(StrEnum):
    FATAL = "fatal"  # drain the GPU; the job that was on it is retried elsewhere
    APPLICATION = "application"  # the job's own fault; the GPU stays in service, the job is not retried
    PRECURSOR = "precursor"  # informational, but known to come before memory failures
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class XidInfo:
    code: int
    name: str
    klass: XidClass
    why: str


_CATALOGUE: tuple[XidInfo, ...] = (
    XidInfo(
        13,
        "Graphics engine exception",
        XidClass.APPLICATION,
        "Nearly always an out-of-range access or illegal instruction in user code.",
    ),
    XidInfo(
        31,
        "GPU memory page fault",
        XidClass.APPLICATION,
        "An illegal address in the program; the MMU faulted on the job's own context.",
    ),
    XidInfo(
        43,
        "GPU stopped processing",
        XidClass.APPLICATION,
        "The driver killed a context after a user-level fault; the GPU keeps serving other contexts.",
    ),
    XidInfo(
        45,
        "Preemptive cleanup",
        XidClass.APPLICATION,
        "Follows a process being killed (by the user, OOM killer or another XID); a consequence, not a cause.",
    ),
    XidInfo(
        68,
        "Video processor exception",
        XidClass.APPLICATION,
        "NVDEC/video engine fault raised by the workload; does not affect compute on the same GPU.",
    ),
    XidInfo(
        48,
        "Double-bit ECC error",
        XidClass.FATAL,
        "Uncorrectable memory error: data was lost, the job's results cannot be trusted and the page must be "
        "retired by a reset.",
    ),
    XidInfo(
        63,
        "ECC page retirement or row remap recorded",
        XidClass.PRECURSOR,
        "The GPU fenced off a weak memory row successfully. Harmless alone, but bursts come before DBEs.",
    ),
    XidInfo(
        64,
        "ECC page retirement or row remap recording failure",
        XidClass.FATAL,
        "A bad row could not be recorded in the InfoROM, so it will be used again after the next reset.",
    ),
    XidInfo(
        74,
        "NVLink error",
        XidClass.FATAL,
        "A link between GPUs failed; collectives hang or corrupt data until the link is retrained or replaced.",
    ),
    XidInfo(
        79,
        "GPU has fallen off the bus",
        XidClass.FATAL,
        "The GPU stopped answering on PCIe; nothing can run on it until the node is power-cycled.",
    ),
    XidInfo(
        92,
        "High single-bit ECC error rate",
        XidClass.FATAL,
        "The driver saw corrected errors arrive faster than a healthy HBM stack produces them; the memory is "
        "degrading and a DBE is likely. We drain now rather than lose a job later.",
    ),
    XidInfo(
        94,
        "Contained ECC error",
        XidClass.FATAL,
        "An uncorrectable error was contained to one context; the row remap it triggered only takes effect after "
        "a GPU reset, so the GPU is drained until reset.",
    ),
    XidInfo(
        95,
        "Uncontained ECC error",
        XidClass.FATAL,
        "An uncorrectable error could not be contained; every context on the GPU is affected and a reset is required.",
    ),
    XidInfo(
        119,
        "GSP RPC timeout",
        XidClass.FATAL,
        "The GPU System Processor stopped responding to the driver; the GPU needs a reset.",
    ),
    XidInfo(
        120,
        "GSP error",
        XidClass.FATAL,
        "The GPU System Processor reported an internal error; the GPU needs a reset.",
    ),
)

XID_CATALOGUE: dict[int, XidInfo] = {info.code: info for info in _CATALOGUE}
FATAL_XIDS: frozenset[int] = frozenset(i.code for i in _CATALOGUE if i.klass is XidClass.FATAL)
APPLICATION_XIDS: frozenset[int] = frozenset(i.code for i in _CATALOGUE if i.klass is XidClass.APPLICATION)
PRECURSOR_XIDS: frozenset[int] = frozenset(i.code for i in _CATALOGUE if i.klass is XidClass.PRECURSOR)
#: XIDs about memory health, fatal or not; the predictor counts them separately from the rest.
MEMORY_XIDS: frozenset[int] = frozenset({48, 63, 64, 92, 94, 95})

#: The XID NVML uses for "GPU is lost"; the probes emit it when a GPU disappears so the event stream shows it.
XID_FELL_OFF_BUS = 79


def classify(xid: int) -> XidClass:
    """The class of an XID code; codes not in the catalogue are ``UNKNOWN``."""
    info = XID_CATALOGUE.get(xid)
    return info.klass if info else XidClass.UNKNOWN


def describe(xid: int) -> str:
    """A one-line human description for the UI and drain messages."""
    info = XID_CATALOGUE.get(xid)
    return f"XID {xid} ({info.name})" if info else f"XID {xid}"
