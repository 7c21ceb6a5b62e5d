"""``GET /metrics``: the GPUs' latest telemetry under NVIDIA dcgm-exporter's metric names and labels (so existing
Grafana dashboards work unchanged), plus Corral's own series.

A custom prometheus-client collector over data read once per scrape (:func:`portal.telemetry.selectors.metrics_data`),
registered in a fresh registry per request: web workers are separate processes, so process-global metric objects
would each hold a different, partial truth. The database is the single source.

Names and labels follow dcgm-exporter: ``gpu`` (NVML index), ``UUID``, ``device`` (``nvidia<index>``),
``modelName``, ``Hostname``, and for the workload ``hpc_job`` (what dcgm-exporter's HPC job mapping adds) and
``namespace`` (its Kubernetes label; here the job's tenant). Counters that dcgm-exporter types as ``counter``
(``..._TOTAL``, ``PCIE_REPLAY_COUNTER``) are exposed as gauges: prometheus-client would otherwise append
``_total`` to their names, and the volatile ECC counts do reset (on a driver reload or GPU reset). ``rate()`` and
``increase()`` work on them all the same.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from portal.metrics.selectors import MetricsData
from portal.nodes.models import Gpu, GpuHealth
from portal.telemetry.models import LatestSample

DCGM_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname", "hpc_job", "namespace")
GPU_LABELS = ("gpu", "UUID", "device", "modelName", "Hostname")


def _fb_free(s: LatestSample) -> float | None:
    if s.mem_total_mb is None or s.mem_used_mb is None:
        return None
    return max(0, s.mem_total_mb - s.mem_used_mb)


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


#: (metric, help, how to read it from the latest sample). Help texts are dcgm-exporter's.
DCGM_FIELDS: tuple[tuple[str, str, Callable[[LatestSample], float | None]], ...] = (
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", lambda s: s.gpu_util),
    ("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", lambda s: s.mem_used_mb),
    ("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", _fb_free),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", lambda s: s.temperature_c),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", lambda s: s.power_w),
    ("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", lambda s: s.sm_clock_mhz),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "Total number of single-bit volatile ECC errors.", lambda s: s.ecc_sbe_volatile),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "Total number of double-bit volatile ECC errors.", lambda s: s.ecc_dbe_volatile),
    (
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "Total number of single-bit persistent ECC errors.",
        lambda s: s.ecc_corrected_total,
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "Total number of double-bit persistent ECC errors.",
        lambda s: s.ecc_uncorrected_total,
    ),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", lambda s: s.pcie_replay),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed.", lambda s: _flag(s.remapped_rows_failed)),
    (
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "Whether remapping of rows is pending.",
        lambda s: _flag(s.remapped_rows_pending),
    ),
    (
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "Current clock throttle reasons (bitmask of NVML clocks-event reasons).",
        lambda s: s.throttle_reasons,
    ),
)


def _gpu_labels(gpu: Gpu) -> list[str]:
    node = gpu.node
    return [str(gpu.index), gpu.uuid, f"nvidia{gpu.index}", gpu.model, node.hostname or node.name]


class CorralCollector(Collector):
    """Yields every family from a :class:`MetricsData` read beforehand. ``now`` and ``stale_after`` decide which
    latest samples are too old to show: dcgm-exporter on a dead node stops answering, so its series disappear; ours
    do too, while ``corral_gpu_last_sample_timestamp_seconds`` keeps saying when each GPU was last heard from."""

    def __init__(self, data: MetricsData, *, now: datetime, stale_after: float) -> None:
        self.data = data
        self.now = now
        self.stale_after = stale_after

    def collect(self) -> Iterator[Metric]:
        yield from self._dcgm()
        yield from self._gpu_state()
        yield from self._jobs()
        yield from self._scheduler()
        yield from self._nodes()
        yield from self._shares()
        yield from self._pools()
        yield from self._energy()

    def _energy(self) -> Iterator[Metric]:
        """Energy saving (issue #19): nodes powered down and waking now; node-hours saved and power commands that
        failed, ever (from the power action log, so they survive restarts)."""
        energy = self.data.energy
        if energy is None:
            return
        yield GaugeMetricFamily(
            "corral_nodes_powered_down", "Nodes powered down by energy saving.", energy.powered_down
        )
        yield GaugeMetricFamily("corral_nodes_waking", "Nodes woken by energy saving, not back yet.", energy.waking)
        yield CounterMetricFamily(
            "corral_energy_node_hours_saved", "Node-hours spent powered down by energy saving.", energy.node_hours_saved
        )
        yield CounterMetricFamily(
            "corral_power_command_failures",
            "Power commands that failed (non-zero exit, timeout, missing).",
            energy.command_failures,
        )

    def _pools(self) -> Iterator[Metric]:
        """Loanable pools (issue #19): how many of each pool's nodes are lent to training and being given back, and
        how many reclaims handed nodes back at their deadline with work still on them."""
        nodes = GaugeMetricFamily("corral_pool_nodes", "Nodes of a loanable pool.", labels=["pool"])
        lent = GaugeMetricFamily("corral_pool_nodes_lent", "Nodes of the pool lent to training now.", labels=["pool"])
        returning = GaugeMetricFamily(
            "corral_pool_nodes_returning", "Lent nodes a reclaim chose, not yet handed back.", labels=["pool"]
        )
        for pool, (total, on_loan, going) in sorted(self.data.pools.items()):
            nodes.add_metric([pool], float(total))
            lent.add_metric([pool], float(on_loan))
            returning.add_metric([pool], float(going))
        yield nodes
        yield lent
        yield returning
        yield GaugeMetricFamily(
            "corral_reclaims_late",
            "Reclaims not met within their deadline, ever.",
            value=float(self.data.reclaims_late),
        )

    def _shares(self) -> Iterator[Metric]:
        """GPU shares under MPS (issue #17): each shared GPU's shares and the compute given to them; evictions."""
        clients = GaugeMetricFamily("corral_gpu_share_clients", "Shares running on a shared GPU.", labels=GPU_LABELS)
        compute = GaugeMetricFamily(
            "corral_gpu_share_compute_percent",
            "Compute (MPS thread percentage) given to the shares on a shared GPU, summed.",
            labels=GPU_LABELS,
        )
        for gpu in self.data.gpus:
            if gpu.pk in self.data.share_clients:
                n, percent = self.data.share_clients[gpu.pk]
                clients.add_metric(_gpu_labels(gpu), float(n))
                compute.add_metric(_gpu_labels(gpu), float(percent))
        yield clients
        yield compute
        evictions = CounterMetricFamily(
            "corral_share_evictions", "Shares evicted to protect online work on their GPU (each is requeued)."
        )
        evictions.add_metric([], float(self.data.share_evictions))
        yield evictions

    def _fresh(self, gpu: Gpu) -> LatestSample | None:
        sample: LatestSample | None = getattr(gpu, "latest_sample", None)
        if sample is None or (self.now - sample.ts).total_seconds() > self.stale_after:
            return None
        return sample

    def _dcgm(self) -> Iterator[Metric]:
        families = [GaugeMetricFamily(name, doc, labels=DCGM_LABELS) for name, doc, _ in DCGM_FIELDS]
        xid = GaugeMetricFamily(
            "DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.", labels=DCGM_LABELS
        )
        for gpu in self.data.gpus:
            sample = self._fresh(gpu)
            if sample is None:
                continue
            # job_id, tenant and last_xid are annotated by the selector; MetricsData.gpus is typed as plain Gpu rows.
            labels = [*_gpu_labels(gpu), str(gpu.job_id or ""), gpu.tenant or ""]  # type: ignore[attr-defined]
            for family, (_, _, read) in zip(families, DCGM_FIELDS, strict=True):
                value = read(sample)
                if value is not None:
                    family.add_metric(labels, float(value))
            xid.add_metric(labels, float(gpu.last_xid or 0))  # type: ignore[attr-defined]
        yield from (f for f in families if f.samples)
        yield xid

    def _gpu_state(self) -> Iterator[Metric]:
        health = GaugeMetricFamily(
            "corral_gpu_health",
            "1 for the GPU's current health state, 0 for the others.",
            labels=[*GPU_LABELS, "health"],
        )
        risk = GaugeMetricFamily(
            "corral_gpu_failure_risk",
            "Predicted probability that the GPU fails fatally within the active model's horizon.",
            labels=GPU_LABELS,
        )
        seen = GaugeMetricFamily(
            "corral_gpu_last_sample_timestamp_seconds", "When the GPU's latest sample was taken.", labels=GPU_LABELS
        )
        for gpu in self.data.gpus:
            labels = _gpu_labels(gpu)
            for state in GpuHealth.values:
                health.add_metric([*labels, state], 1.0 if gpu.health == state else 0.0)
            gpu_risk = getattr(gpu, "risk", None)
            if gpu_risk is not None:
                risk.add_metric(labels, gpu_risk.risk)
            sample = getattr(gpu, "latest_sample", None)
            if sample is not None:
                seen.add_metric(labels, sample.ts.timestamp())
        yield health
        yield risk
        yield seen
        model = GaugeMetricFamily(
            "corral_failure_model_version", "Version of the active failure model (0: none).", labels=["source"]
        )
        active = self.data.active_model
        model.add_metric([active.source if active else ""], float(active.version if active else 0))
        yield model

    def _jobs(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("corral_jobs", "Jobs by state.", labels=["state"])
        for state, n in sorted(self.data.jobs_by_state.items()):
            jobs.add_metric([state], float(n))
        yield jobs
        pending = GaugeMetricFamily("corral_pending_jobs", "Pending jobs by the reason they wait.", labels=["reason"])
        for reason, n in sorted(self.data.pending_by_reason.items()):
            pending.add_metric([reason], float(n))
        yield pending
        alerts = GaugeMetricFamily("corral_alerts_active", "Unresolved telemetry alerts.", labels=["severity"])
        for severity in ("critical", "warning"):
            alerts.add_metric([severity], float(self.data.active_alerts.get(severity, 0)))
        yield alerts

    def _scheduler(self) -> Iterator[Metric]:
        last = self.data.last_round
        if last is not None:
            yield GaugeMetricFamily(
                "corral_scheduler_round_duration_seconds",
                "Duration of the latest scheduling round.",
                value=last.duration_ms / 1000,
            )
            yield GaugeMetricFamily(
                "corral_scheduler_round_timestamp_seconds", "When the latest round ran.", value=last.at.timestamp()
            )
        yield GaugeMetricFamily(
            "corral_scheduler_rounds_5m",
            "Scheduling rounds in the last five minutes.",
            value=float(self.data.rounds_5m),
        )
        if self.data.round_max_ms_5m is not None:
            yield GaugeMetricFamily(
                "corral_scheduler_round_duration_max_5m_seconds",
                "Longest scheduling round in the last five minutes.",
                value=self.data.round_max_ms_5m / 1000,
            )

    def _nodes(self) -> Iterator[Metric]:
        dropped = GaugeMetricFamily(
            "corral_agent_telemetry_dropped",
            "Samples and events the node agent's bounded buffer dropped (its running count; resets when it restarts).",
            labels=["Hostname"],
        )
        received = CounterMetricFamily(
            "corral_telemetry_samples", "Samples stored from the node.", labels=["Hostname", "outcome"]
        )
        for name, hostname, telemetry in self.data.nodes:
            if telemetry is None:
                continue
            host = hostname or name
            dropped.add_metric([host], float(telemetry.agent_dropped))
            received.add_metric([host, "stored"], float(telemetry.samples_received))
            received.add_metric([host, "duplicate"], float(telemetry.samples_duplicate))
            received.add_metric([host, "rejected"], float(telemetry.samples_rejected))
        yield dropped
        yield received
