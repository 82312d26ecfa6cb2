"""The environment a results table was measured in: the caption that makes it citable.

:func:`environment` reads the ``environment`` rows of every run of the exported
campaigns (host, OS, CPU model and cores, Python, framework version, BLAS,
threads and thread variables, CUDA, cuDNN) with the GPU models the runs
reported (``runs.device_name``) and the dltop version each campaign was created
with. Every field lists all the values that occur in the set, in order, so a
table over two hosts or two torch versions says so instead of naming one.
The GPU driver version is the one NVML reported for each GPU run
(``environment.driver_version``; simulated GPUs' fake driver says so); runs
stored before it was recorded, and CPU-only sets, say ``n/a`` and why. GPU runs
that recorded their GPUs' settings at start (:mod:`dltop.results.gpufacts`) add
``GPU settings`` and ``GPU clocks at start``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.catalog import CampaignStatus
from dltop.results import gpufacts
from dltop.results.queries import CampaignRow
from dltop.store.read import environment as environment_rows
from dltop.store.read.campaigns import campaigns_by_id

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

NA = "n/a"
NO_ENV = "n/a (no run reported its environment)"
ALLOC_ENV_KEY = "alloc_env"
"""``environment.extra``'s object of the allocator variables a run was started with
(``jobs.environment.ALLOC_VARS``; absent: none set, the allocator's defaults)."""
DEFAULT_ALLOC = "default (no allocator variable set)"


@dataclass(frozen=True)
class Environment:
    """What the exported runs ran on and with; each field lists every value seen."""

    hosts: tuple[str, ...]
    os: tuple[str, ...]
    cpus: tuple[tuple[str, str, int | None, int | None], ...]
    """(host, CPU model, physical cores, logical cores)."""
    gpus: tuple[tuple[str, str, int], ...]
    """(host, GPU model, most GPUs one configuration used); empty: no GPU run."""
    gpu_runs: bool
    """Some configuration ran on GPUs (``gpus`` may still be empty: no model reported)."""
    cuda: tuple[str, ...]
    cudnn: tuple[str, ...]
    frameworks: tuple[tuple[str, tuple[str, ...]], ...]
    """(framework, its versions)."""
    python: tuple[str, ...]
    blas: tuple[tuple[str, tuple[str, ...]], ...]
    """(framework, the BLAS libraries it reported)."""
    threads: tuple[tuple[int | None, tuple[tuple[str, str], ...]], ...]
    """(threads the runner reported, the thread variables it was started with)."""
    dltop: tuple[str, ...]
    reported: int
    """Runs with an environment row."""
    drivers: tuple[str, ...] = ()
    """GPU driver versions the GPU runs recorded (``550.54.15``, ``fake (simulated)``)."""
    gpu_settings: tuple[str, ...] = ()
    """Distinct GPU settings at run start (persistence, power limit, ECC, PCIe link,
    compute capability; :mod:`dltop.results.gpufacts`); empty: none recorded."""
    gpu_clocks: str | None = None
    """Range of the GPUs' clocks at run start over the set (None: none recorded)."""
    allocator: tuple[str, ...] = ()
    """Distinct allocator settings (``MALLOC_MMAP_THRESHOLD_=33554432``, or
    :data:`DEFAULT_ALLOC`); empty when no run set any (the caption then says nothing)."""
    started_endpoints: tuple[str, ...] = ()
    """The URLs the servers dltop started got (their endpoint template filled in as each
    started: ``environment.extra``'s ``endpoint`` of a run with a ``server``)."""
    started_servers: int = 0
    """How many servers dltop started for the set's runs (:func:`_servers_started`): at
    least as many as :attr:`started_endpoints`, a port being free again for a later one."""

    def _started_text(self) -> list[tuple[str, str]]:
        """The started servers' endpoint: the URL where the set's runs used one."""
        n = len(self.started_endpoints)
        if n == 1:
            return [("endpoint", f"{self.started_endpoints[0]} (started by dltop)")]
        return [("endpoints", f"{max(n, self.started_servers)} servers started by dltop, "
                              "each run's URL in its environment")] if n else []

    def _many_hosts(self) -> bool:
        return len(self.hosts) > 1

    def _at(self, host: str) -> str:
        return f"{host}: " if self._many_hosts() else ""

    def _cpu_texts(self) -> list[str]:
        out = []
        for host, model, phys, logical in self.cpus:
            cores = ", ".join(x for x in (f"{phys} cores" if phys else "",
                                          f"{logical} threads" if logical else "") if x)
            out.append(f"{self._at(host)}{model}" + (f" ({cores})" if cores else ""))
        return out

    def _gpu_texts(self) -> list[str]:
        if not self.gpu_runs:
            return ["none"]
        if not self.gpus:
            return ["unknown (no GPU run reported its model)"]
        return [f"{self._at(host)}{name} (up to {n} per run)" for host, name, n in self.gpus]

    def _driver_text(self) -> str:
        if not self.gpu_runs:
            return f"{NA} (no GPU)"
        return ", ".join(self.drivers) if self.drivers else f"{NA} (not recorded)"

    def _thread_texts(self) -> list[str]:
        out = []
        for n, env in self.threads:
            text = str(n) if n is not None else NA
            if env:
                text += " (" + ", ".join(f"{k}={v}" for k, v in env) + ")"
            out.append(text)
        return out

    def items(self) -> list[tuple[str, str]]:
        """``(label, text)`` per caption field, in caption order."""
        def some(values: Sequence[str], missing: str = NA) -> str:
            return ", ".join(values) if values else missing

        soft = NA if self.reported else NO_ENV
        fws = _per_framework(self.frameworks)
        blas = {b for _, libs in self.blas for b in libs}
        blas_text = (next(iter(blas)) if len(blas) == 1 and all(libs for _, libs in self.blas)
                     else _per_framework(self.blas))
        # GPU settings appear only where GPU runs recorded them (older and CPU sets
        # keep their caption).
        gpu = [("GPU settings", "; ".join(self.gpu_settings))] if self.gpu_settings else []
        gpu += [("GPU clocks at start", self.gpu_clocks)] if self.gpu_clocks else []
        return [("host", some(self.hosts)), ("OS", some(self.os, soft)),
                ("CPU", some(self._cpu_texts(), soft)), ("GPU", some(self._gpu_texts())),
                ("driver", self._driver_text()), *gpu, ("CUDA", some(self.cuda)),
                ("cuDNN", some(self.cudnn)), ("frameworks", fws or soft),
                ("Python", some(self.python, soft)), ("BLAS", blas_text or soft),
                ("threads", "; ".join(self._thread_texts()) or soft),
                *([("allocator", "; ".join(self.allocator))] if self.allocator else []),
                *self._started_text(), ("dltop", some(self.dltop))]

    def caption(self) -> str:
        """``Environment: host h; OS ...; CPU ...; GPU ...; ...; dltop 0.1.0.`` (one line).

        Fields no run could report (no environment row at all) are named once at the end.
        """
        items = self.items()
        known = [f"{k} {v}" for k, v in items if v != NO_ENV]
        unknown = [k for k, v in items if v == NO_ENV]
        if unknown:
            known.append(f"{', '.join(unknown)} {NO_ENV}")
        return "Environment: " + "; ".join(known) + "."

    def as_json(self) -> dict[str, Any]:
        """The JSON exports' ``"environment"`` object (lists: every value in the set)."""
        return {
            "hosts": list(self.hosts), "os": list(self.os),
            "cpu": [{"host": h, "model": m, "physical_cores": p, "logical_cores": lg}
                    for h, m, p, lg in self.cpus],
            "gpu": [{"host": h, "name": n, "max_per_run": c} for h, n, c in self.gpus],
            "driver": list(self.drivers), "cuda": list(self.cuda), "cudnn": list(self.cudnn),
            "frameworks": {fw: list(v) for fw, v in self.frameworks},
            "python": list(self.python), "blas": {fw: list(v) for fw, v in self.blas},
            "threads": [{"threads": n, "env": dict(env)} for n, env in self.threads],
            "dltop_version": list(self.dltop), "runs_reported": self.reported,
            **({"allocator": list(self.allocator)} if self.allocator else {}),
            **({"started_endpoints": list(self.started_endpoints)}
               if self.started_endpoints else {}),
            **({"gpu_settings": list(self.gpu_settings), "gpu_clocks_at_start": self.gpu_clocks}
               if self.gpu_settings else {})}


def _per_framework(values: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """``torch 2.3.1, tensorflow 2.15.0`` (several values of one framework: ``a / b``)."""
    return ", ".join(f"{fw} {' / '.join(v) if v else NA}" for fw, v in values)


def _distinct(values: Sequence[Any]) -> tuple[Any, ...]:
    """Values in first-seen order, each once, ``None`` and ``""`` left out."""
    return tuple(dict.fromkeys(v for v in values if v not in (None, "")))


def _thread_env(text: str | None) -> tuple[tuple[str, str], ...]:
    try:
        env = json.loads(text) if text else {}
    except ValueError:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in env.items())) if isinstance(env, dict) \
        else ()


def _alloc_text(extra: str | None) -> str:
    """``MALLOC_MMAP_THRESHOLD_=33554432, ...`` from a run's ``extra``, or the default."""
    env = gpufacts.extra_field(extra, ALLOC_ENV_KEY)
    if not isinstance(env, dict) or not env:
        return DEFAULT_ALLOC
    return ", ".join(f"{k}={v}" for k, v in sorted(env.items()))


def environment(db: sqlite_utils.Database, campaign_ids: Sequence[int]) -> Environment:
    """The environment of every run of ``campaign_ids``."""
    camps = campaigns_by_id(db, campaign_ids)
    # the latest run of each job that has one (read through the runs, not the queue),
    # and whether any job at all, run or queued, is a GPU one (through the queue index)
    jobs = environment_rows.latest_run_devices(db, campaign_ids)
    gpu_jobs_at_all = any(environment_rows.has_gpu_jobs(db, cid) for cid in campaign_ids)
    # one row per distinct environment with how many runs reported it: a study's 10 000
    # runs report a few, and the caption reads only which values occur, in first-seen order
    envs = environment_rows.distinct_environments(db, campaign_ids)
    gpu_jobs = [j for j in jobs if str(j["device"]).startswith("gpu")]
    gpu_names: dict[tuple[str, str], int] = {}
    for j in gpu_jobs:
        name = j["device_name"]
        if name:
            count = str(j["device"]).partition(":")[2]
            key = (str(j["host"] or ""), str(name))
            gpu_names[key] = max(gpu_names.get(key, 0), int(count) if count.isdigit() else 1)
    for e in envs:  # a GPU run that reported its device only in its hello
        if str(e["job_device"]).startswith("gpu") and e["device_name"]:
            gpu_names.setdefault((str(e["campaign_host"] or ""), str(e["device_name"])), 1)
    frameworks: dict[str, list[Any]] = {}
    blas: dict[str, list[Any]] = {}
    for e in envs:
        fw = str(e["framework"] or e["job_framework"])
        frameworks.setdefault(fw, []).append(e["framework_version"])
        blas.setdefault(fw, []).append(e["blas"])
    settings, clocks = gpufacts.caption_texts([e["extra"] for e in envs])
    alloc = _distinct([_alloc_text(e["extra"]) for e in envs])
    endpoints, servers = _servers_started(envs)
    return Environment(
        hosts=_distinct([c["host"] for c in camps] + [e["host"] for e in envs]),
        os=_distinct([e["os"] for e in envs]),
        cpus=_distinct([(str(e["campaign_host"] or e["host"] or ""), e["cpu_model"],
                         e["physical_cores"], e["logical_cores"])
                        for e in envs if e["cpu_model"]]),
        gpus=tuple((h, n, c) for (h, n), c in gpu_names.items()),
        gpu_runs=gpu_jobs_at_all,
        cuda=_distinct([e["cuda_version"] for e in envs]),
        cudnn=_distinct([e["cudnn_version"] for e in envs]),
        frameworks=tuple((fw, tuple(str(v) for v in _distinct(vs)))
                         for fw, vs in frameworks.items()),
        python=_distinct([e["python_version"] for e in envs]),
        blas=tuple((fw, tuple(str(v) for v in _distinct(vs))) for fw, vs in blas.items()),
        threads=tuple(sorted(_distinct([(e["threads"], _thread_env(e["thread_env"]))
                                        for e in envs]),
                             key=lambda t: (t[0] is None, t[0] or 0, t[1]))),
        dltop=_distinct([c["dltop_version"] for c in camps]),
        reported=sum(int(e["runs_alike"]) for e in envs),
        drivers=_distinct([e.get("driver_version") for e in envs
                           if str(e["job_device"]).startswith("gpu")]),
        gpu_settings=settings, gpu_clocks=clocks,
        allocator=() if alloc in ((), (DEFAULT_ALLOC,)) else alloc,
        started_endpoints=endpoints, started_servers=servers)


def _servers_started(envs: Sequence[dict[str, Any]]) -> tuple[tuple[str, ...], int]:
    """The URLs the servers dltop started for these environments' runs got, and how many
    servers: one per group's server (its ``server_first_run`` and ``server_pid``), one
    per run of a server of its own. Never counted by URL: the kernel may give a later
    server the port an earlier one freed."""
    urls: list[str] = []
    groups: set[tuple[Any, Any]] = set()
    own = 0
    for e in envs:
        extra = gpufacts.extra_object(e["extra"])
        if not extra.get("server"):
            continue
        urls.append(str(extra.get("endpoint")))
        first = extra.get("server_first_run")
        if first is None:
            own += int(e["runs_alike"])
        else:
            groups.add((first, extra.get("server_pid")))
    return _distinct(urls), own + len(groups)


def context(db: sqlite_utils.Database, camps: Sequence[CampaignRow],
            constants: str = "") -> tuple[tuple[str, ...], dict[str, Any]]:
    """A table's caption lines (``constants``, then the environment) and the JSON fields
    every export starts with: ``{"campaigns": [...], "environment": {...}}``."""
    env = environment(db, [c.id for c in camps])
    lines = (constants, env.caption()) if constants else (env.caption(),)
    return lines, {"campaigns": [c.as_json() for c in camps], "environment": env.as_json()}


def title(camps: Sequence[CampaignRow], what: str, *, created: bool = True) -> str:
    """``Campaign 3 `name` (done, <created>): what``, or ``Campaigns 3 `a`, 5 `b`
    (running): what`` (each campaign not finished with its status)."""
    if len(camps) == 1:
        c = camps[0]
        when = f", {c.created_at}" if created else ""
        return f"Campaign {c.id} `{c.name}` ({c.status}{when}): {what}"
    # a campaign not finished (running, queued, cancelled...) says so, as one alone does:
    # a study's table of a campaign still running is not its result
    return "Campaigns " + ", ".join(
        f"{c.id} `{c.name}`" + ("" if c.status == CampaignStatus.FINISHED else f" ({c.status})")
        for c in camps) + f": {what}"


def comment(camps: Sequence[CampaignRow], what: str) -> str:
    """The LaTeX comment line: ``dltop campaign 3 (name): what`` (or campaigns ...)."""
    names = ", ".join(f"{c.id} ({c.name})" for c in camps)
    return f"dltop campaign{'s' if len(camps) > 1 else ''} {names}: {what}"
