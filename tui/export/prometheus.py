"""GPU telemetry, job states and the training metrics served in the Prometheus text format
(`verl-tui export HOSTS --prometheus 127.0.0.1:PORT`, or hosts.yaml `prometheus:` for the
cockpit), through prometheus_client's own HTTP server and text writer.

What a scrape sees is the last snapshot: a refresh loop (every `interval` seconds) reads the
telemetry the caller's monitor already holds, the head's job list, and for each running job
(at most MAX_JOBS) its metric series (verl's file logger, else its console lines:
tui/archive/metrics_source.py) with the training-health rules (tui/metrics/health.py) over
them. The scrape itself never waits on a host: it only formats the snapshot.

Metric and label names are constant; every value from outside (host names, job ids, metric
keys) is a label value, which the text writer escapes, cut to LABEL_CHARS.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from tui.sanitize import one_line

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from tui.cluster.ray_cluster import RayCluster
    from tui.cluster.telemetry import TelemetryMonitor
    from tui.jobs.history import JobHistory
    from tui.metrics.health import HealthWatch

GPU_EVERY_S = 2.0  # the telemetry part of the snapshot (in memory already: cheap)
MAX_JOBS = 16  # running jobs whose metrics are read per refresh
MAX_KEYS = 1000  # metric keys per job
LABEL_CHARS = 200
PREFIX = "verl_tui"
JOB_STATES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED", "STOPPED", "LOST")


@dataclass(frozen=True)
class GpuRow:
    host: str
    index: int
    name: str
    util: float | None
    mem_used: int | None
    mem_total: int | None
    temp: float | None
    power: float | None


@dataclass
class JobMetrics:
    step: int | None
    source: str
    latest: dict[str, float]
    alerts: dict[str, int]  # rule -> alerts so far


@dataclass
class Snapshot:
    """Everything one scrape serves."""

    taken: float = 0.0
    hosts: dict[str, bool] = field(default_factory=dict)  # host -> telemetry answered
    gpus: list[GpuRow] = field(default_factory=list)
    jobs: list[tuple[str, str]] = field(default_factory=list)  # (submission id, status)
    metrics: dict[str, JobMetrics] = field(default_factory=dict)
    errors: int = 0  # refreshes that could not read the head


def _label(text: object) -> str:
    return one_line(str(text), LABEL_CHARS)


def families(snap: Snapshot) -> Iterator[Metric]:
    """The snapshot as metric families (what the collector yields; pure)."""
    up = GaugeMetricFamily(
        f"{PREFIX}_host_up", "1 while the host's GPU agent answers", labels=["host"]
    )
    for host, ok in sorted(snap.hosts.items()):
        up.add_metric([_label(host)], 1.0 if ok else 0.0)
    yield up
    gpu_specs = (
        ("gpu_utilization_percent", "GPU busy share (NVML)", lambda g: g.util),
        ("gpu_memory_used_bytes", "GPU memory in use", lambda g: g.mem_used),
        ("gpu_memory_total_bytes", "GPU memory in all", lambda g: g.mem_total),
        ("gpu_temperature_celsius", "GPU temperature", lambda g: g.temp),
        ("gpu_power_watts", "GPU power draw", lambda g: g.power),
    )
    for name, doc, get in gpu_specs:
        fam = GaugeMetricFamily(f"{PREFIX}_{name}", doc, labels=["host", "gpu", "name"])
        for g in snap.gpus:
            value = get(g)
            if value is not None:
                fam.add_metric([_label(g.host), str(g.index), _label(g.name)], float(value))
        yield fam
    state = GaugeMetricFamily(
        f"{PREFIX}_job_state",
        "1 for the job's current state (Ray's Jobs API)",
        labels=["job", "state"],
    )
    counts = dict.fromkeys(JOB_STATES, 0)
    for sid, status in snap.jobs:
        state.add_metric([_label(sid), _label(status)], 1.0)
        counts[status] = counts.get(status, 0) + 1
    yield state
    total = GaugeMetricFamily(f"{PREFIX}_jobs", "jobs per state", labels=["state"])
    for status, n in sorted(counts.items()):
        total.add_metric([_label(status)], float(n))
    yield total
    step = GaugeMetricFamily(
        f"{PREFIX}_training_step", "the last step a running job logged", labels=["job", "source"]
    )
    value = GaugeMetricFamily(
        f"{PREFIX}_training_metric",
        "a running job's latest value of each verl metric key (NaN/Inf as logged)",
        labels=["job", "key"],
    )
    alerts = GaugeMetricFamily(
        f"{PREFIX}_health_alerts", "training-health alerts so far, per rule", labels=["job", "rule"]
    )
    for sid, jm in sorted(snap.metrics.items()):
        if jm.step is not None:
            step.add_metric([_label(sid), _label(jm.source)], float(jm.step))
        for key, v in jm.latest.items():
            value.add_metric([_label(sid), _label(key)], v)
        for rule, n in sorted(jm.alerts.items()):
            alerts.add_metric([_label(sid), _label(rule)], float(n))
    yield from (step, value, alerts)
    age = GaugeMetricFamily(f"{PREFIX}_snapshot_timestamp_seconds", "when the data was read")
    age.add_metric([], snap.taken)
    yield age
    errs = GaugeMetricFamily(f"{PREFIX}_refresh_errors", "refreshes that could not read the head")
    errs.add_metric([], float(snap.errors))
    yield errs


def gpu_rows(monitor: TelemetryMonitor) -> tuple[dict[str, bool], list[GpuRow]]:
    hosts: dict[str, bool] = {}
    rows: list[GpuRow] = []
    for name, ht in monitor.hosts.items():
        hosts[name] = bool(ht.answered)
        sample = ht.latest
        for g in sample.gpus if sample is not None else ():
            if g.error:
                continue
            rows.append(
                GpuRow(
                    name,
                    g.index,
                    g.name or "",
                    g.util_percent,
                    g.memory_used_bytes,
                    g.memory_total_bytes,
                    g.temperature_c,
                    g.power_w,
                )
            )
    return hosts, rows


class Exporter(Collector):
    """The snapshot, its refresh loop and the HTTP endpoint."""

    def __init__(
        self,
        cluster: RayCluster,
        history: JobHistory,
        monitor: TelemetryMonitor | None = None,
        *,
        interval: float = 15.0,
    ) -> None:
        self.cluster, self.history, self.monitor = cluster, history, monitor
        self.interval = interval
        self.snapshot = Snapshot()
        self.registry = CollectorRegistry()
        self.registry.register(self)
        self._watches: dict[str, HealthWatch] = {}
        self._server: Any = None
        self.refreshed = asyncio.Event()

    def collect(self) -> Iterator[Metric]:
        return families(self.snapshot)  # one reference read: a refresh swaps it whole

    async def refresh(self) -> Snapshot:
        """Read a new snapshot (a head that cannot be asked keeps the last jobs and counts
        an error; the GPUs are the monitor's)."""
        from tui.archive.metrics_source import job_metrics
        from tui.archive.store import ArchiveStore
        from tui.cluster.dashboard import DashboardError
        from tui.jobs.service import list_jobs
        from tui.metrics.health import HealthWatch
        from tui.transport.types import TransportError

        old = self.snapshot
        snap = Snapshot(taken=time.time(), errors=old.errors, jobs=old.jobs, metrics=old.metrics)
        if self.monitor is not None:
            snap.hosts, snap.gpus = gpu_rows(self.monitor)
        self.snapshot = snap  # the telemetry at once; a slow head delays only the jobs
        try:
            rows = await list_jobs(self.cluster, self.history)
        except (DashboardError, TransportError):
            snap = Snapshot(
                snap.taken, snap.hosts, snap.gpus, snap.jobs, snap.metrics, snap.errors + 1
            )
            self.snapshot = snap
            return snap
        jobs = [(r.submission_id, r.status) for r in rows]
        running = [r.submission_id for r in rows if r.on_head and r.status == "RUNNING"]
        store = ArchiveStore(self.cluster.inv.cluster)
        metrics: dict[str, JobMetrics] = {}
        for sid in running[:MAX_JOBS]:
            try:
                tracker = await job_metrics(self.cluster, sid, store=store)
            except (DashboardError, TransportError):
                continue
            watch = self._watches.setdefault(sid, HealthWatch())
            watch.check(tracker, self._health_options())
            latest: dict[str, float] = {}
            for key in tracker.keys()[:MAX_KEYS]:
                points = tracker.series(key)
                if points:
                    latest[key] = points[-1][1]
            rules: dict[str, int] = {}
            for alert in watch.alerts:
                rules[alert.rule] = rules.get(alert.rule, 0) + 1
            metrics[sid] = JobMetrics(tracker.last_step, tracker.source, latest, rules)
        self._watches = {k: v for k, v in self._watches.items() if k in running}
        snap = Snapshot(
            self.snapshot.taken, self.snapshot.hosts, self.snapshot.gpus, jobs, metrics, snap.errors
        )
        self.snapshot = snap
        return snap

    @staticmethod
    def _health_options() -> Any:
        from tui.config.health import HealthOptions

        return HealthOptions()

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Start the endpoint (prometheus_client's own server, in its thread): (host, port)
        bound. OSError when the address cannot be bound."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = server
        bound = server.server_address
        return str(bound[0]), int(bound[1])

    def refresh_gpus(self) -> None:
        """The telemetry part only (the monitor's latest samples, already in memory)."""
        if self.monitor is not None:
            old = self.snapshot
            hosts, gpus = gpu_rows(self.monitor)
            self.snapshot = Snapshot(time.time(), hosts, gpus, old.jobs, old.metrics, old.errors)

    async def run(self) -> None:
        """Refresh until cancelled: the telemetry every GPU_EVERY_S, the jobs and their
        metrics every `interval`."""
        loop = asyncio.get_running_loop()
        jobs_due = 0.0
        while True:
            if loop.time() >= jobs_due:
                jobs_due = loop.time() + self.interval
                await self.refresh()
            else:
                self.refresh_gpus()
            self.refreshed.set()
            await asyncio.sleep(min(GPU_EVERY_S, self.interval))

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
