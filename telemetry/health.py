"""Reactive health rules: is this GPU fit to run jobs right now?

:func:`evaluate` is a pure function of one GPU's recent samples and XID events. It returns a :class:`Verdict`
listing every rule that fired, most severe first; the control plane drains the GPU when the verdict is unhealthy
and shows :attr:`Verdict.message` to operators. Clearing a drain is an operator action after a reset or repair, so
the rules judge *current state* from the latest sample (lost, volatile uncorrectable count, remapper exhausted,
temperature) and *events* from everything passed in (fatal XIDs, growth of the aggregate uncorrectable count). The
caller chooses the window, typically "since the GPU was last declared healthy".

Application XIDs (13, 31, 43, 45, 68) and precursors (63) never make a GPU unhealthy here: the first are the job's
fault, the second are for the predictor.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from telemetry.sample import GpuSample, XidEvent
from telemetry.xid import FATAL_XIDS, describe


class HealthCause(StrEnum):
    """Why a GPU was declared unhealthy, most severe first (the enum order is the severity order)."""

    GPU_LOST = "gpu_lost"
    UNCORRECTABLE_ECC = "uncorrectable_ecc"
    ROW_REMAP_FAILURE = "row_remap_failure"
    FATAL_XID = "fatal_xid"
    OVERHEAT = "overheat"

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS: dict[HealthCause, str] = {
    HealthCause.GPU_LOST: "GPU fell off the bus",
    HealthCause.UNCORRECTABLE_ECC: "Uncorrectable memory (ECC) error",
    HealthCause.ROW_REMAP_FAILURE: "Memory row remapping failed: no spare rows left",
    HealthCause.FATAL_XID: "Fatal driver error (XID)",
    HealthCause.OVERHEAT: "Temperature above the safe limit",
}
_SEVERITY = {cause: rank for rank, cause in enumerate(HealthCause)}


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Site-tunable thresholds. ``max_temperature_c=None`` disables the overheat rule (some sites prefer to let the
    hardware's own slowdown handle heat)."""

    fatal_xids: frozenset[int] = FATAL_XIDS
    max_temperature_c: float | None = 95.0


DEFAULT_POLICY = HealthPolicy()


@dataclass(frozen=True, slots=True)
class Finding:
    cause: HealthCause
    message: str
    at: float  # when the evidence was seen (sample or event timestamp)


@dataclass(frozen=True, slots=True)
class Verdict:
    gpu_uuid: str
    findings: tuple[Finding, ...] = field(default=())

    @property
    def healthy(self) -> bool:
        return not self.findings

    @property
    def cause(self) -> HealthCause | None:
        return self.findings[0].cause if self.findings else None

    @property
    def message(self) -> str:
        return self.findings[0].message if self.findings else "healthy"


def evaluate(
    gpu_uuid: str,
    samples: Sequence[GpuSample],
    events: Iterable[XidEvent] = (),
    *,
    policy: HealthPolicy = DEFAULT_POLICY,
) -> Verdict:
    """The health verdict for one GPU from its samples (any order) and XID events. Samples or events of other GPUs
    are ignored, so a caller can pass a node's whole batch."""
    own = sorted((s for s in samples if s.gpu_uuid == gpu_uuid), key=lambda s: s.timestamp)
    findings: list[Finding] = []
    if own:
        findings.extend(_state_findings(own[-1], policy))
        findings.extend(_ecc_growth_findings(own))
    findings.extend(_xid_findings(gpu_uuid, own, events, policy))
    findings.sort(key=lambda f: (_SEVERITY[f.cause], f.at))
    return Verdict(gpu_uuid=gpu_uuid, findings=tuple(findings))


def evaluate_all(
    samples: Sequence[GpuSample], events: Sequence[XidEvent] = (), *, policy: HealthPolicy = DEFAULT_POLICY
) -> dict[str, Verdict]:
    """:func:`evaluate` for every GPU that appears in ``samples`` or ``events``."""
    by_gpu: dict[str, list[GpuSample]] = defaultdict(list)
    for s in samples:
        by_gpu[s.gpu_uuid].append(s)
    events_by_gpu: dict[str, list[XidEvent]] = defaultdict(list)
    for e in events:
        events_by_gpu[e.gpu_uuid].append(e)
    uuids = sorted(set(by_gpu) | set(events_by_gpu))
    return {u: evaluate(u, by_gpu.get(u, []), events_by_gpu.get(u, []), policy=policy) for u in uuids}


def _state_findings(latest: GpuSample, policy: HealthPolicy) -> list[Finding]:
    at = latest.timestamp
    if latest.lost:
        # Nothing else can be read from a lost GPU, so no other state rule can say anything.
        return [Finding(HealthCause.GPU_LOST, "GPU is not answering on the PCIe bus (lost); power-cycle needed", at)]
    out: list[Finding] = []
    if latest.ecc_dbe_volatile:
        out.append(
            Finding(
                HealthCause.UNCORRECTABLE_ECC,
                f"{latest.ecc_dbe_volatile} uncorrectable ECC error(s) since the last driver load or reset",
                at,
            )
        )
    if latest.remapped_rows_failed:
        out.append(Finding(HealthCause.ROW_REMAP_FAILURE, "row remapping failed: the GPU has no spare rows left", at))
    limit = policy.max_temperature_c
    if limit is not None and latest.temperature_c is not None and latest.temperature_c >= limit:
        out.append(
            Finding(HealthCause.OVERHEAT, f"temperature {latest.temperature_c:.0f} C >= limit {limit:.0f} C", at)
        )
    return out


def _ecc_growth_findings(ordered: list[GpuSample]) -> list[Finding]:
    """A rise of the aggregate uncorrectable count inside the window, which the volatile count can miss when the
    driver reloaded between samples."""
    totals = [(s.timestamp, s.ecc_uncorrected_total) for s in ordered if s.ecc_uncorrected_total is not None]
    if len(totals) < 2:
        return []
    for (_, before), (at, after) in zip(totals, totals[1:], strict=False):
        if after > before:
            return [
                Finding(
                    HealthCause.UNCORRECTABLE_ECC,
                    f"aggregate uncorrectable ECC count rose from {totals[0][1]} to {totals[-1][1]}",
                    at,
                )
            ]
    return []


def _xid_findings(
    gpu_uuid: str, samples: list[GpuSample], events: Iterable[XidEvent], policy: HealthPolicy
) -> list[Finding]:
    seen: dict[int, float] = {}
    for s in samples:
        if s.xid in policy.fatal_xids:
            seen.setdefault(s.xid, s.timestamp)
    for e in events:
        if e.gpu_uuid == gpu_uuid and e.xid in policy.fatal_xids:
            seen[e.xid] = min(e.timestamp, seen.get(e.xid, e.timestamp))
    return [Finding(HealthCause.FATAL_XID, f"fatal {describe(xid)}", at) for xid, at in sorted(seen.items())]
