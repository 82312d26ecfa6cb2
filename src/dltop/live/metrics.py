"""Prometheus metric families of the devices, the host and the runs in progress.

Headless (no Textual, no Rich). The families are plain :class:`Family` values, built
here from a device frame and the database's running runs; :mod:`dltop.live.exporter`
reads those (its :class:`~dltop.live.exporter.MetricsSource`) and turns them into
``prometheus_client`` metrics, so the logic is testable without an HTTP server.

GPU metrics carry dcgm-exporter's names and labels (``gpu``, ``UUID``, ``pci_bus_id``,
``device``, ``modelName``, ``Hostname``: what NVML gives, empty where it gives nothing)
plus ``simulated`` (``"true"`` for ``--fake-gpus``);
dltop's own are ``dltop_host_*`` and ``dltop_run_*``. docs/serve.md lists them. A
Slurm run's GPUs on other nodes (its agents' rows) are GPUs of those ``Hostname`` s.

A run's values are labelled by where it runs, not by which run it is (Prometheus'
advice on label cardinality: a label per run id leaves every run's series behind in
the TSDB): its campaign and its ``slot`` (the devices it holds, :func:`run_slot`), a
bounded set a campaign reuses run after run. Which run holds a slot, with its id and
identity, is the one ``dltop_run_info`` series per run, joined by
``on (Hostname, campaign_id, slot)``.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop.jobs.tickets import describe_devices
from dltop.live.devices import DeviceFrame
from dltop.live.serve_live import ServeLive, serve_live
from dltop.procs import engine_alive
from dltop.store.read.campaigns import open_campaigns
from dltop.store.read.jobruns import running
from dltop.store.read.queue_view import recent_iterations
from dltop.telemetry.values import HostSample

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import
    import sqlite_utils

RECENT_ITERATIONS = 30
"""Iterations of a run whose median gives its rate (warm-up left out once measured)."""
MIB = 2**20

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Family:
    """One metric family: its name, type (``gauge``, ``counter``, ``untyped``), help, samples."""

    name: str
    kind: str
    help: str
    samples: tuple[tuple[Labels, float], ...]
    sample_names: tuple[str, ...] = ()
    """Each sample's name where they differ from the family's (a histogram's ``_bucket``,
    ``_sum`` and ``_count``)."""


@dataclass(frozen=True)
class RunMetrics:
    """A run in progress, as the exporter reports it."""

    run_id: int
    campaign_id: int
    campaign: str
    framework: str
    model: str
    batch_size: int
    device: str
    done: int
    """Iterations reported so far, warm-up included."""
    planned: int
    """Iterations the run will do, warm-up included."""
    warmup: int
    last_s: float | None
    """Seconds of the newest iteration (None before the first)."""
    median_s: float | None
    """Median seconds of the recent iterations (measured ones once there are any)."""
    samples_per_iter: int
    mean_s: float | None = None
    """Mean seconds of those iterations: samples/s is samples over seconds (docs/metrics.md)."""
    job_id: int = 0
    extra: Mapping[str, str] = field(default_factory=dict)
    """Labels of the identity fields that vary in its campaign (precision, mode...)."""
    serve: ServeLive | None = None
    """A serve run's requests so far (None: not a serve run)."""
    slot: str = "host"
    """Where it runs (:func:`run_slot`): its values' label, reused by later runs."""

    def labels(self, hostname: str) -> dict[str, str]:
        """Its values' label set: its campaign, slot and host (no run id: bounded)."""
        return {"campaign": self.campaign, "campaign_id": str(self.campaign_id),
                "slot": self.slot, "Hostname": hostname}

    def info_labels(self, hostname: str) -> dict[str, str]:
        """``dltop_run_info``'s: those, its identity (the varying fields too), its id."""
        return {**self.labels(hostname), "framework": self.framework, "model": self.model,
                "batch": str(self.batch_size), "device": self.device, **self.extra,
                "run_id": str(self.run_id)}


def run_slot(row: Mapping[str, Any]) -> str:
    """Where a running run runs: its GPUs (``gpu 0-1``), else its pinned cores
    (``cpu 0-3``), else ``host`` (a lone run), after its Slurm nodes if any."""
    gpus, cpus = row.get("gpu_indices"), row.get("cpu_affinity")
    kind, held = ("gpu", gpus) if gpus else ("cpu", cpus)
    where = describe_devices(f"{kind}-{i}" for i in held.split(",")) if held else "host"
    nodes = row.get("slurm_nodes")
    return f"{nodes} {where}" if nodes else where


def read_runs(db: sqlite_utils.Database,
              labels: Mapping[int, Mapping[int, Mapping[str, str]]] | None = None,
              ) -> list[RunMetrics]:
    """Runs stored as running in campaigns whose engine is alive (a dead engine's
    ``running`` rows are stale until ``dltop run --resume``), oldest first.

    ``labels``: campaign id → job id → its varying identity fields' labels
    (:func:`dltop.live.campaign_metrics.identity_labels`).
    """
    return [run for camp in open_campaigns(db)
            if engine_alive(camp.engine_pid, camp.engine_start_time, camp.engine_host,
                            camp.engine_heartbeat_s)
            for run in campaign_runs(db, camp.id, camp.name,
                                     (labels or {}).get(camp.id, {}))]


def campaign_runs(db: sqlite_utils.Database, campaign_id: int, name: str,
                  labels: Mapping[int, Mapping[str, str]] | None = None) -> list[RunMetrics]:
    """The campaign's runs stored as running, with their recent iterations' pace."""
    out: list[RunMetrics] = []
    rows = running(db, campaign_id)
    slot_of = [run_slot(r) for r in rows]
    slots = Counter(slot_of)
    for r, slot in zip(rows, slot_of, strict=True):
        its = recent_iterations(db, r["id"], RECENT_ITERATIONS)
        measured = [i["seconds"] for i in its if not i["warmup"]]
        recent = measured or [i["seconds"] for i in its]
        out.append(RunMetrics(
            r["id"], campaign_id, name, r["framework"], r["model"], r["batch_size"],
            r["device"], its[0]["idx"] + 1 if its else 0, r["total"],
            r["warmup"], its[0]["seconds"] if its else None,
            statistics.median(recent) if recent else None,
            r["samples_per_iter"] or r["batch_size"],
            statistics.fmean(recent) if recent else None, r["job_id"],
            dict((labels or {}).get(r["job_id"], {})), serve_live(db, int(r["id"])),
            # two runs in one slot (a node's GPUs as another node's): told apart by id
            slot if slots[slot] == 1 else f"{slot} run {r['id']}"))
    return out


@dataclass(frozen=True)
class _RemoteReading:
    """A remote GPU's window as a reading: the agents' fields, the rest not measured."""

    gpu_util_pct: float | None
    power_w: float | None
    mem_used_bytes: int | None
    mem_util_pct: None = None
    energy_j: None = None
    temperature_c: None = None
    sm_clock_mhz: None = None
    mem_clock_mhz: None = None


def family(name: str, kind: str, text: str,
           samples: Sequence[tuple[Labels, float | None]]) -> Family:
    """A :class:`Family` of the samples that have a value (None: not measured, left out)."""
    return Family(name, kind, text, tuple((lab, float(v)) for lab, v in samples
                                          if v is not None))


def _int(v: float | None) -> int | None:
    """dcgm-exporter's integer fields (MHz, %, °C, mJ) as integers, never a fake GPU's
    fraction."""
    return None if v is None else round(v)


def gpu_families(frame: DeviceFrame, hostname: str) -> list[Family]:
    """Per-GPU families named as dcgm-exporter names them (a value NVML lacks is left out)."""
    statics = {s.index: s for s in frame.statics}
    rows: list[tuple[Labels, Any]] = []
    for g in frame.gpus:
        st = statics.get(g.index)
        # dcgm-exporter's labels, so its dashboards and alert rules join dltop's series:
        # device is its nvidia<gpu> (the NVML index); a simulated GPU has neither it
        # nor a bus id
        labels = {"gpu": str(g.index), "UUID": (st.uuid if st else None) or "",
                  "pci_bus_id": (st.pci_bus_id if st else None) or "",
                  "device": "" if g.simulated else f"nvidia{g.index}",
                  "modelName": st.name if st else "", "Hostname": hostname,
                  "simulated": "true" if g.simulated else "false"}
        total = g.mem_total_bytes or (st.memory_total_bytes if st else None)
        rows.append((labels, (g, total)))
    # A Slurm run's GPUs on other nodes (their agents' newest windows), labelled with
    # their node: what their agents measure (utilization, power, memory used).
    for rg in frame.remote:
        rows.append(({"gpu": str(rg.gpu_index), "UUID": "", "pci_bus_id": "", "device": "",
                      "modelName": "", "Hostname": rg.node,
                      "simulated": "true" if rg.simulated else "false"},
                     (_RemoteReading(rg.util_pct, rg.power_w, rg.mem_used_bytes), None)))
    nodes = Counter(rg.node for rg in frame.remote)

    def fam(name: str, kind: str, text: str, value: Any) -> Family:
        return family(name, kind, text, [(lab, value(g, total)) for lab, (g, total) in rows])

    def whole(name: str, text: str, reading: str) -> Family:
        return fam(name, "gauge", text, lambda g, t: _int(getattr(g, reading)))

    def mib(v: int | None) -> int | None:
        # whole MiB, as dcgm-exporter reports framebuffer memory
        return None if v is None else int(v // MIB)

    return [
        family("DCGM_FI_DEV_COUNT", "gauge", "Number of Devices on the node.",
               [({"Hostname": hostname}, len(frame.gpus)),
                *(({"Hostname": node}, n) for node, n in sorted(nodes.items()))]),
        whole("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", "gpu_util_pct"),
        whole("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).", "mem_util_pct"),
        fam("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).",
            lambda g, t: mib(g.mem_used_bytes)),
        fam("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).",
            lambda g, t: None if t is None or g.mem_used_bytes is None
            else mib(t) - mib(g.mem_used_bytes)),  # type: ignore[operator]
        fam("DCGM_FI_DEV_FB_TOTAL", "gauge", "Framebuffer memory total (in MiB).",
            lambda g, t: mib(t)),
        fam("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g, t: g.power_w),
        # dcgm-exporter declares it a counter; prometheus_client's text writer would rename
        # a counter to ..._total, so it is untyped here to keep dcgm-exporter's exact name.
        fam("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "untyped",
            "Total energy consumption since boot (in mJ).",
            lambda g, t: None if g.energy_j is None else _int(g.energy_j * 1000.0)),
        whole("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", "temperature_c"),
        whole("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", "sm_clock_mhz"),
        whole("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).", "mem_clock_mhz"),
    ]


def host_families(host: HostSample | None, hostname: str) -> list[Family]:
    """``dltop_host_*``: CPU (% of all logical CPUs), load, memory and swap."""
    if host is None:
        return []
    lab = {"Hostname": hostname}
    cores = host.cpu_pct_per_core
    cpu = sum(cores) / len(cores) if cores else None

    def gauge(name: str, text: str, value: float | None) -> Family:
        return family(f"dltop_host_{name}", "gauge", text, [(lab, value)])

    return [
        gauge("cpu_percent", "Host CPU busy, mean over logical CPUs since the last reading "
              "(0-100).", cpu),
        gauge("cpu_user_percent", "Host CPU in user mode (nice included), as cpu_percent.",
              host.cpu_user_pct),
        gauge("cpu_system_percent", "Host CPU in kernel mode (irq included), as cpu_percent.",
              host.cpu_system_pct),
        gauge("cpu_iowait_percent", "Host CPU idle waiting for I/O, as cpu_percent.",
              host.cpu_iowait_pct),
        gauge("cpus", "Logical CPUs.", len(cores)),
        gauge("load1", "Load average over 1 minute.", host.load_1m),
        gauge("memory_used_bytes", "Host memory in use (total - available), in bytes.",
              host.mem_used_bytes),
        gauge("memory_total_bytes", "Host memory, in bytes.", host.mem_total_bytes),
        gauge("swap_used_bytes", "Swap in use, in bytes.", host.swap_used_bytes),
    ]


def run_families(runs: Sequence[RunMetrics], hostname: str,
                 db_up: bool = True) -> list[Family]:
    """``dltop_run_*`` per run in progress (``dltop_run_info`` naming the run, the rest by
    its slot), ``dltop_runs_active`` and ``dltop_exporter_db_up``."""
    def fam(name: str, text: str, value: Any) -> Family:
        return family(f"dltop_run_{name}", "gauge", text,
                      [(r.labels(hostname), value(r)) for r in runs])

    return [
        family("dltop_run_info", "gauge", "1 per run in progress, labelled with its id and "
               "identity: join its slot's dltop_run_* and dltop_serve_* series to it on "
               "(Hostname, campaign_id, slot).",
               [(r.info_labels(hostname), 1) for r in runs]),
        fam("iterations_done", "Iterations the run reported so far, warm-up included.",
            lambda r: r.done),
        fam("iterations_planned", "Iterations the run will do, warm-up included.",
            lambda r: r.planned),
        fam("in_warmup", "1 while the run is in its warm-up iterations, else 0.",
            lambda r: 1 if r.done < r.warmup else 0),
        fam("last_iteration_seconds", "Seconds of the run's newest iteration.",
            lambda r: r.last_s),
        fam("iterations_per_second", f"Iteration rate: iterations / seconds of the last "
            f"{RECENT_ITERATIONS} iterations (measured ones once there are any).",
            lambda r: 1.0 / r.mean_s if r.mean_s else None),
        fam("samples_per_second", "Throughput: samples / seconds of those iterations "
            "(as every samples/s of dltop).",
            lambda r: r.samples_per_iter / r.mean_s if r.mean_s else None),
        fam("median_seconds_per_iteration", f"Median seconds of the last "
            f"{RECENT_ITERATIONS} iterations (measured ones once there are any).",
            lambda r: r.median_s),
        family("dltop_runs_active", "gauge", "Runs in progress (engines alive).",
               [({"Hostname": hostname}, len(runs))]),
        family("dltop_exporter_db_up", "gauge", "1 when the last scrape could read the "
               "database, else 0 (no database yet, or unreadable).",
               [({"Hostname": hostname}, 1 if db_up else 0)]),
    ]
