"""``dltop exporter``'s source: the devices polled in a thread, the database read per scrape.

Headless (no Textual, no Rich). :class:`MetricsSource` keeps one :class:`DevicePoller`
reading the devices at :data:`DEVICE_HZ` in a thread (so temperature and clocks, read on
every :data:`~dltop.live.devices.SLOW_EVERY`-th frame, stay fresh, and host CPU is a
percentage over a short window whatever the scrape interval) and reads the database's
running runs and its campaigns on each scrape, into the families of
:mod:`dltop.live.metrics` and :mod:`dltop.live.campaign_metrics`;
:class:`PrometheusCollector` turns them into ``prometheus_client`` metrics.

Failures are loud, never frozen values (issue 28): a device reading that fails is
counted (``dltop_exporter_poll_errors_total``) and logged once a streak; once the
newest good reading is older than :data:`STALE_S` this host's GPU and host series are
left out of the scrape, ``dltop_up`` says 0 and ``dltop_telemetry_age_seconds`` how old
that reading is. A database that cannot be read drops the run series
(``dltop_exporter_db_up`` 0, ``dltop_exporter_db_errors_total``); one not there yet is
waited for, the devices served meanwhile (``dltop exporter`` may start before
``dltop run``), and its runs appear on the first scrape after it does.
"""

from __future__ import annotations

import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dltop.errors import DltopError
from dltop.live.campaign_metrics import (
    CampaignMetrics,
    LabelCache,
    campaign_families,
    read_campaigns,
)
from dltop.live.devices import DeviceFrame, DevicePoller, RemoteGpu, RemoteGpuReader
from dltop.live.metrics import (
    Family,
    RunMetrics,
    family,
    gpu_families,
    host_families,
    read_runs,
    run_families,
)
from dltop.live.serve_metrics import serve_families
from dltop.telemetry.values import GpuBackend

if TYPE_CHECKING:  # annotations only
    from wsgiref.simple_server import WSGIServer

DEVICE_HZ = 1.0
"""Device readings per second of the exporter's poller thread."""
FIRST_FRAME_S = 0.25
"""Seconds from the poller's start to its first frame (the first CPU interval)."""
STALE_S = 10.0
"""Seconds after the newest good device reading when this host's GPU and host series
are dropped (ten readings missed at :data:`DEVICE_HZ`): Prometheus then sees them gone,
not frozen at their last value."""

log = logging.getLogger(__name__)


def health_families(hostname: str, age_s: float | None, stale_s: float, poll_errors: int,
                    db_errors: int) -> list[Family]:
    """``dltop_up``, ``dltop_telemetry_age_seconds`` and the exporter's error counters."""
    lab = {"Hostname": hostname}
    up = age_s is not None and age_s <= stale_s
    return [
        family("dltop_up", "gauge", f"1 when this host's device and host readings are fresh "
               f"(the newest under {stale_s:g} s old), else 0: their series are then left "
               "out.", [(lab, 1 if up else 0)]),
        family("dltop_telemetry_age_seconds", "gauge", "Seconds since the newest good device "
               "and host reading (absent before the first).", [(lab, age_s)]),
        family("dltop_exporter_poll_errors_total", "counter", "Device and host readings "
               "that failed since the exporter started.", [(lab, poll_errors)]),
        family("dltop_exporter_db_errors_total", "counter", "Scrapes whose database read "
               "failed (the file there but not readable as dltop's) since the exporter "
               "started.", [(lab, db_errors)]),
    ]


def _without_host(families: list[Family], hostname: str) -> list[Family]:
    """The families less this host's samples (its readings are stale; other nodes' stay)."""
    return [replace(f, samples=tuple((lab, v) for lab, v in f.samples
                                     if lab.get("Hostname") != hostname))
            for f in families]


class MetricsSource:
    """The devices (polled in a thread) and a database, read into :class:`Family` lists.

    Args:
        backend: the GPU backend (NVML or simulated), or None to read no GPU.
        db_path: the dltop database whose running runs are reported, or None.
        device_hz: device readings per second.
        host: the host reader (default: a psutil :class:`HostSampler`).
        stale_s: seconds without a good reading after which this host's series are
            dropped (default :data:`STALE_S`, at least three reading intervals).
        gpu_series: serve the ``DCGM_FI_*`` GPU series; False where dcgm-exporter
            already serves them (the same names twice would double every sum).
    """

    def __init__(self, backend: GpuBackend | None, db_path: Path | None,
                 device_hz: float = DEVICE_HZ, host: Any = None,
                 stale_s: float | None = None, gpu_series: bool = True) -> None:
        self.hostname = socket.gethostname()
        self.db_path = db_path
        self.gpu_series = gpu_series
        self._backend: GpuBackend = backend or _NoGpus()
        self._host = host
        self._interval_s = 1.0 / device_hz
        self._frame: DeviceFrame | None = None
        self._frame_at: float | None = None
        """``time.monotonic()`` of the newest good frame."""
        self.stale_s = max(STALE_S, 3.0 * self._interval_s) if stale_s is None else stale_s
        self.poll_errors = 0
        self.db_errors = 0
        self._failing = False
        self._remote: dict[int, RemoteGpuReader] = {}
        self._labels: LabelCache = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="dltop-metrics-poller",
                                        daemon=True)

    def start(self) -> MetricsSource:
        """Start the device poller thread and wait for its first frame; returns self."""
        self._thread.start()
        self._ready.wait(timeout=10)
        return self

    def stop(self) -> None:
        """Stop the poller thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        # psutil keeps cpu_percent's previous reading per thread: the host reader is made
        # (and primed) in this thread, and the first frame comes a short interval later,
        # so that its CPU figure covers real time (not psutil's 0.0 of an unprimed call).
        try:
            poller = DevicePoller(self._backend, self._host)
        except Exception:  # no device reader: frame() reads once in the caller's thread
            self._ready.set()
            return
        wait_s = FIRST_FRAME_S
        while not self._stop.wait(wait_s):
            wait_s = self._interval_s
            self._poll(poller)
            self._ready.set()

    def _poll(self, poller: DevicePoller) -> None:
        """One reading: the new frame, or the failure counted (and logged once a streak)."""
        try:
            frame = poller.poll()
        except Exception as exc:  # the exporter outlives a failed reading; its age shows
            self.poll_errors += 1
            if not self._failing:
                log.warning("device reading failed: %s: %s (its series are dropped after "
                            "%g s without a good reading)", type(exc).__name__, exc,
                            self.stale_s)
            self._failing = True
            return
        if self._failing:
            log.warning("device readings work again")
        self._failing = False
        self._frame, self._frame_at = frame, time.monotonic()

    def frame(self) -> DeviceFrame | None:
        """The newest device frame (one read now when the thread has none; None when
        that fails too)."""
        if self._frame is None:
            try:
                poller = DevicePoller(self._backend, self._host)
            except Exception:
                self.poll_errors += 1
                return None
            self._poll(poller)
        return self._frame

    def telemetry_age_s(self) -> float | None:
        """Seconds since the newest good frame (None before the first)."""
        at = self._frame_at
        return None if at is None else max(0.0, time.monotonic() - at)

    def _read(self) -> tuple[list[RunMetrics], list[CampaignMetrics], bool,
                             tuple[RemoteGpu, ...]]:
        """(runs in progress, campaigns, whether the database could be read, the runs'
        remote GPUs)."""
        if self.db_path is None:
            return [], [], True, ()
        if not self.db_path.is_file():
            return [], [], False, ()
        from dltop.store.reader import open_reader

        try:
            db: Any = open_reader(self.db_path)  # ReadDb: the read API of sqlite-utils
        except (DltopError, sqlite3.Error):  # not a dltop database (yet: being created)
            self.db_errors += 1
            return [], [], False, ()
        try:
            labels: dict[int, dict[int, dict[str, str]]] = {}
            # fills labels (runs are labelled alike), kept between scrapes in _labels
            camps = read_campaigns(db, labels, self._labels)
            runs = read_runs(db, labels)
            # one incremental reader per running run: each scrape reads only new rows
            self._remote = {r.run_id: self._remote.get(r.run_id) or RemoteGpuReader()
                            for r in runs}
            remote = tuple(g for r in runs for g in self._remote[r.run_id].read(db, r.run_id))
            return runs, camps, True, remote
        except sqlite3.Error:
            self.db_errors += 1
            return [], [], False, ()
        finally:
            db.close()

    def families(self) -> list[Family]:
        """Every family, read now (runs and their remote GPUs) and from the newest frame
        (devices, host)."""
        runs, camps, ok, remote = self._read()
        newest = self.frame()
        age = self.telemetry_age_s()
        frame = replace(newest or DeviceFrame((), (), None, None), remote=remote)
        devices = [*(gpu_families(frame, self.hostname) if self.gpu_series else []),
                   *host_families(frame.host, self.hostname)]
        if age is None or age > self.stale_s:  # never frozen values: gone until read again
            devices = _without_host(devices, self.hostname)
        return [*devices, *run_families(runs, self.hostname, ok),
                *serve_families(runs, self.hostname),
                *campaign_families(camps, self.hostname),
                *health_families(self.hostname, age, self.stale_s, self.poll_errors,
                                 self.db_errors)]


class _NoGpus:
    """A GPU backend with no GPU (``--no-telemetry``-like use of the exporter)."""

    simulated = False

    def device_count(self) -> int:
        return 0

    def static(self, index: int) -> Any:
        raise IndexError(index)

    def sample(self, index: int, slow: bool) -> Any:
        raise IndexError(index)

    def unavailable_reason(self) -> str | None:
        return None


class PrometheusCollector:
    """A ``prometheus_client`` collector over a :class:`MetricsSource`: fresh on each scrape."""

    def __init__(self, source: MetricsSource) -> None:
        self.source = source

    def collect(self) -> Iterator[Any]:
        """The families as ``prometheus_client`` metrics (empty families left out)."""
        from prometheus_client.metrics_core import Metric

        for fam in self.source.families():
            if not fam.samples:
                continue
            # a counter's family is named without the ``_total`` its sample carries
            base = fam.name.removesuffix("_total") if fam.kind == "counter" else fam.name
            m = Metric(base, fam.help, "unknown" if fam.kind == "untyped" else fam.kind)
            names = fam.sample_names or (fam.name,) * len(fam.samples)
            for name, (labels, value) in zip(names, fam.samples, strict=True):
                m.add_sample(name, dict(labels), value)
            yield m


def start_metrics_server(source: MetricsSource, host: str, port: int) -> WSGIServer:
    """Serve ``/metrics`` of ``source`` on ``host:port`` in a daemon thread.

    Returns the server (``shutdown()`` stops it). Raises OSError when the port is taken.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(PrometheusCollector(source))
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
