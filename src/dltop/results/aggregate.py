"""Per-configuration results over repeats (the cells of the paper's tables).

Repeats are the jobs of one configuration identity (:mod:`dltop.results.identity`:
every setting that can change the measurement, and the interpreter run under):
jobs that differ in any of them are never merged. Only the latest attempt of
each job counts (a retried job's earlier attempts are history). A
configuration's time is the median of its ok runs' medians; its spread is max -
min of those medians; its throughput is the median of its ok runs'
throughputs, each run's being total samples / total seconds over its measured
(non-warm-up) iterations.

Results of several campaigns are one set: jobs of different campaigns with the
same identity on the same host and GPU model (:attr:`ConfigResult.place`) are
repeats of one configuration; on another host or GPU model they stay apart.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dltop.catalog import ENDED_CAMPAIGN_STATUSES, JobStatus, RunStatus
from dltop.results import idread, queries
from dltop.results.convergence import EvalPoint, evals_of, targets_of
from dltop.results.gcpause import gc_paused
from dltop.results.generation import Request, generations_of
from dltop.results.measured import NONE, Measured
from dltop.results.readings import Detail, check_runs
from dltop.results.reads import RUN_FIELDS, campaign_rows, per_run
from dltop.results.serving import ServeRequest, serve_requests_of
from dltop.results.table import status_label
from dltop.store.read.changes import main_file
from dltop.store.read.environment import host_cores
from dltop.store.read.runs import campaign_marks
from dltop.telemetry.values import opt_float

if TYPE_CHECKING:  # annotations only: sqlite-utils costs ~0.1 s to import (store.reader)
    import sqlite_utils

FAILURE_PRECEDENCE: tuple[str, ...] = (
    RunStatus.SHORT, RunStatus.OOM, RunStatus.UNSUPPORTED, RunStatus.UNSATISFIABLE,
    RunStatus.TIMEOUT, RunStatus.DIVERGED, RunStatus.CRASHED, RunStatus.SETUP_FAILED,
    RunStatus.CANCELLED,
    RunStatus.RUNNING, JobStatus.QUEUED)
"""When no repeat is ok, the cell shows the first of these that any repeat has."""

@dataclass(frozen=True)
class RunRecord:
    """One run (the latest attempt of a job) with what the metrics need."""

    run_id: int
    status: str
    noisy: bool
    packed: bool
    """Other runs of its own campaign shared its host (``dltop run --pack``)."""
    contaminated: bool
    simulated: bool
    """Its GPU telemetry came from simulated GPUs (``--fake-gpus``)."""
    iterations: Sequence[tuple[float, int]]
    """Measured (non-warm-up) iterations: (seconds, samples) (:class:`Measured` when read)."""
    tree_cpu_mean_pct: float | None
    """Mean CPU of the run's process tree over its host samples (100 = one core)."""
    fields: dict[str, Any]
    """The :data:`RUN_FIELDS` columns."""
    evals: tuple[EvalPoint, ...] = ()
    """Its evaluations on the test set, in order (convergence runs)."""
    target_accuracy: float | None = None
    """Its job's ``target_accuracy`` (not identity: read from the job's spec)."""
    target_perplexity: float | None = None
    """Its job's ``target_perplexity`` (likewise)."""
    generations: tuple[Request, ...] = ()
    """Its measured generation requests, in order (``mode = "generate"`` runs; a serve
    run's successful requests too)."""
    serving: tuple[ServeRequest, ...] = ()
    """Its measured requests to an endpoint, failed ones included (``mode = "serve"``)."""
    shared: bool = False
    """Another engine's runner used its devices (a campaign without ``--pack``):
    "packed" is kept for ``--pack``, whose overlap is chosen."""
    dltop_version: str | None = None
    """The dltop of its campaign (``campaigns.dltop_version``)."""

    def get(self, name: str) -> Any:
        """A stored column of :data:`RUN_FIELDS` (``None`` when not recorded)."""
        return self.fields.get(name)

    @property
    def samples_per_s(self) -> float | None:
        """Total samples / total seconds over the measured iterations.

        A run stored without iteration rows falls back to samples per iteration
        over its mean seconds per iteration (the same ratio when every
        iteration has the same batch), then to the run's stored summary
        (``runs.samples_per_s``: samples per iteration over median).
        """
        its = self.iterations
        if isinstance(its, Measured):  # the same sums over the arrays, without the pairs
            seconds, samples = sum(its.seconds), sum(its.samples)
        else:
            seconds, samples = sum(s for s, _ in its), sum(n for _, n in its)
        if its and seconds > 0:
            return samples / seconds
        mean, per_iter = self.get("mean_s"), self.get("samples_per_iter")
        if mean and per_iter:
            return float(per_iter) / float(mean)
        return opt_float(self.get("samples_per_s"))


def floats(runs: Iterable[RunRecord], field: str) -> list[float]:
    """The runs' recorded values of column ``field``."""
    # the fields dict itself, not RunRecord.get: a summary row reads ~30 columns of each run
    return [float(v) for r in runs if (v := r.fields.get(field)) is not None]


@dataclass(frozen=True)
class ConfigResult:
    """One configuration (its identity: framework, model, batch, device, ...) over its repeats."""

    framework: str
    model: str
    batch_size: int
    device: str
    status: str
    n_runs: int
    median_s: float | None
    spread_s: float | None
    samples_per_s: float | None
    noisy: bool
    packed: bool = False
    """Some run of it was measured while other runs shared the host (``--pack``)."""
    shared: bool = False
    """Some ok run of it had another engine's runner on its devices (no ``--pack``)."""
    contaminated: bool = False
    """Some ok run of it saw a foreign process on its devices."""
    client_bound: bool = False
    """Some ok serve run of it had a client that could not keep its schedule."""
    config_key: str = ""
    """Canonical JSON of :attr:`identity`, which its repeats share."""
    repeats: int = 0
    """Repeats planned (jobs of this configuration); ``n_runs < repeats`` is incomplete."""
    runs: tuple[RunRecord, ...] = ()
    """Its ok runs, in queue order."""
    identity: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The flat identity (:func:`dltop.results.identity.identity_of`), interpreter included."""
    host: str = ""
    """The host its campaign ran on (``campaigns.host``)."""
    gpu_name: str | None = None
    """The GPU model of a ``gpu:N`` configuration (``runs.device_name``); ``None`` on CPUs
    or when no run reported one."""
    short_count: tuple[int, int] | None = None
    """For a ``short`` cell: (measured, asked) iterations of its fullest short run."""
    host_cores: int | None = None
    """The fewest logical CPUs of the hosts its ok runs ran on (their stored environment);
    ``None`` when none reported one."""

    @functools.cached_property
    def host_readings(self) -> tuple[str, Detail]:
        """The readings rule over its runs' host readings (:func:`check_runs`): asked by
        every host figure of it, computed once."""
        return check_runs(self.runs, gpu=False, serve=self.identity.get("mode") == "serve")

    @functools.cached_property
    def gpu_readings(self) -> tuple[str, Detail]:
        """The readings rule over its runs' GPU readings, computed once."""
        return check_runs(self.runs, gpu=True, serve=self.identity.get("mode") == "serve")

    @property
    def place(self) -> tuple[str, str]:
        """(host, GPU model or ``""``): configurations of one identity merge only here."""
        return (self.host, self.gpu_name or "")

    @property
    def precision(self) -> str:
        """Its identity's precision, which the devices' peak FLOP/s are looked up by."""
        return str(self.identity.get("precision"))

    @property
    def label(self) -> str:
        """What a cell without a number says: ``OOM``, ``failed``, ``short 54/100``..."""
        text = status_label(self.status)
        if self.status == RunStatus.SHORT and self.short_count is not None:
            measured, asked = self.short_count
            text += f" {measured}/{asked}"
        return text

    @property
    def incomplete(self) -> bool:
        """Fewer ok runs than repeats planned."""
        return self.n_runs < self.repeats

    @property
    def device_count(self) -> int:
        """Devices of the configuration (``gpu:2`` → 2)."""
        count = self.device.partition(":")[2]
        return int(count) if count.isdigit() else 1

    @property
    def device_kind(self) -> str:
        """``cpu``, ``cpus`` or ``gpu``."""
        return self.device.partition(":")[0]

    @property
    def versions(self) -> tuple[str, ...]:
        """Where its ok runs ran under different versions, which (``dltop 0.1.0 |
        0.2.0``, ``torch 2.3.1 | 2.4.0``): merged into one cell, the mix is said, not
        silent; empty where they agree (a version not recorded is not counted)."""
        out = []
        for what, values in (("dltop", [r.dltop_version for r in self.runs]),
                             (self.framework, [r.get("framework_version") for r in self.runs])):
            known = list(dict.fromkeys(str(v) for v in values if v))
            if len(known) > 1:
                out.append(f"{what} {' | '.join(known)}")
        return tuple(out)

    @property
    def oversubscribed(self) -> bool:
        """A ``cpu:N`` configuration that ran on a host of fewer than N logical CPUs
        (:mod:`dltop.results.oversub`)."""
        return self.device_kind != "gpu" and self.host_cores is not None \
            and self.device_count > self.host_cores


CACHED = 2
"""Sets of finished campaigns whose results a process keeps (a report reads them twice;
the results screen once per visit)."""
_cache: OrderedDict[tuple[Any, ...], list[ConfigResult]] = OrderedDict()
_cache_lock = threading.Lock()


def _settled_state(db: sqlite_utils.Database, ids: Sequence[int]) -> tuple[Any, ...] | None:
    """What the results of ``ids`` depend on, if they can be cached: the database file,
    and per campaign its status, job counts (kept by triggers), run count and last run
    id. None for a database in memory, a campaign still open or a database before the
    job counts (migration 11)."""
    path = main_file(db)
    rows = campaign_marks(db, ids) if path and ids else None
    if rows is None:
        return None
    if len(rows) != len(set(ids)) or any(r[1] not in ENDED_CAMPAIGN_STATUSES for r in rows):
        return None
    # any commit since (an edit in place, SQL by hand) changes the file or its WAL
    stamps = tuple((st.st_mtime_ns, st.st_size) for st in
                   (os.stat(f) for f in (path, f"{path}-wal") if os.path.exists(f)))
    return (path, tuple(ids), rows, stamps)


def forget_cached() -> None:
    """Drop the results kept for finished campaigns (a one-shot command done with them:
    those of a 10 000-configuration report are ~70 MB while it draws its figures)."""
    with _cache_lock:
        _cache.clear()


def config_results(db: sqlite_utils.Database,
                   campaigns: int | Sequence[int]) -> list[ConfigResult]:
    """Every configuration of one or several campaigns, in queue order of first appearance
    (:func:`read_config_results`), kept per process for finished campaigns: a new run,
    job or status change, or the campaign reopening, reads them again."""
    ids = [campaigns] if isinstance(campaigns, int) else list(campaigns)
    state = _settled_state(db, ids)
    if state is not None:
        with _cache_lock:
            if state in _cache:
                _cache.move_to_end(state)
                return list(_cache[state])
    with gc_paused():  # a run record, its dicts and arrays per run: no cycle among them
        results = read_config_results(db, ids)
    if state is not None:
        with _cache_lock:
            _cache[state] = list(results)
            while len(_cache) > CACHED:
                _cache.popitem(last=False)
    return results


def read_config_results(db: sqlite_utils.Database,
                        campaigns: int | Sequence[int]) -> list[ConfigResult]:
    """Every configuration of one or several campaigns, in queue order of first appearance.

    Jobs merge as repeats when their identity and their place (host, GPU model)
    are the same, whichever campaign they belong to. Reads the runs that exist
    (the latest attempt of each job) and the jobs never run counted per stored
    configuration and status in one grouped query (:func:`_campaign_rows`): a
    campaign of 100 000 queued jobs costs what its finished runs and its
    configurations cost.
    """
    ids = [campaigns] if isinstance(campaigns, int) else list(campaigns)
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    packed = queries.packed_campaigns(db, ids)  # "packed" runs, else "shared"
    for cid in ids:
        rows = campaign_rows(db, cid)
        pack = cid in packed
        # a GPU job that never reported its device takes the campaign's usual GPU
        usual = Counter(r["device_name"] for r in rows
                        if str(r["device"]).startswith("gpu") and r["device_name"])
        default_gpu = usual.most_common(1)[0][0] if usual else None
        # one canonical key per configuration, not one JSON encoding per row
        idents, ident_keys = idread.resolve_keyed(rows)
        for row, ident, ident_key in zip(rows, idents, ident_keys, strict=True):
            gpu = (row["device_name"] or default_gpu) if str(row["device"]).startswith(
                "gpu") else None
            host = str(row["campaign_host"] or "")
            # the row is campaign_rows' own dict: completed in place, not copied
            row.update(identity=ident, ident_key=ident_key, gpu_name=gpu, host=host,
                       campaign_pack=pack)
            groups.setdefault((ident_key, host, gpu or ""), []).append(row)
    ok_ids = [r["run_id"] for rows in groups.values() for r in rows if _ok(r)]
    # host samples only for runs without the stored mean (see _record): an export
    # reads the runs' summaries, not telemetry that grows with each second of a run
    no_tree = {r["run_id"] for rows in groups.values() for r in rows
               if _ok(r) and r["tree_cpu_mean_pct"] is None}
    iters, trees = per_run(db, ok_ids, no_tree)
    evals = evals_of(db, ok_ids)
    evaluated = sorted(evals)  # only runs that evaluated: no JSON parsed else
    acc, ppl = targets_of(db, evaluated), targets_of(db, evaluated, "target_perplexity")
    targets = {rid: (acc.get(rid), ppl.get(rid)) for rid in evaluated}
    # only generate and serve runs have requests: others pay no query, no blob decoded
    gens = generations_of(db, [r["run_id"] for rows in groups.values() for r in rows
                               if _ok(r) and r["identity"].get("mode") in ("generate", "serve")])
    serves = serve_requests_of(db, [r["run_id"] for rows in groups.values() for r in rows
                                    if _ok(r) and r["identity"].get("mode") == "serve"])
    cores = host_cores(db, ok_ids)
    return [_combine(rows, iters, trees, evals, targets, gens, serves, cores)
            for rows in groups.values()]


def _ok(row: dict[str, Any]) -> bool:
    return row["status"] == RunStatus.OK and row["median_s"] is not None


def _record(row: dict[str, Any], iters: dict[int, Measured],
            trees: dict[int, float], evals: dict[int, list[EvalPoint]],
            targets: dict[int, tuple[float | None, float | None]],
            gens: dict[int, list[Request]],
            serves: dict[int, list[ServeRequest]]) -> RunRecord:
    rid = int(row["run_id"])
    return RunRecord(
        run_id=rid, status=str(row["status"]), noisy=bool(row["noisy"]),
        packed=bool(row["concurrent_runs"]) and bool(row.get("campaign_pack")),
        shared=bool(row["concurrent_runs"]) and not row.get("campaign_pack"),
        contaminated=bool(row["contaminated"]),
        simulated=bool(row["telemetry_simulated"]), iterations=iters.get(rid, NONE),
        # the run's measured window (runs.tree_cpu_mean_pct); runs stored before it:
        # every host sample of the run
        tree_cpu_mean_pct=(trees.get(rid) if row["tree_cpu_mean_pct"] is None
                           else float(row["tree_cpu_mean_pct"])),
        fields={c: row[c] for c in RUN_FIELDS}, evals=tuple(evals.get(rid, ())),
        target_accuracy=targets.get(rid, (None, None))[0],
        target_perplexity=targets.get(rid, (None, None))[1],
        generations=tuple(gens.get(rid, ())), serving=tuple(serves.get(rid, ())),
        dltop_version=row.get("campaign_dltop_version"))


def _combine(rows: list[dict[str, Any]], iters: dict[int, Measured],
             trees: dict[int, float], evals: dict[int, list[EvalPoint]],
             targets: dict[int, tuple[float | None, float | None]],
             gens: dict[int, list[Request]],
             serves: dict[int, list[ServeRequest]], cores: dict[int, int]) -> ConfigResult:
    first = rows[0]
    ok = [_record(r, iters, trees, evals, targets, gens, serves) for r in rows if _ok(r)]
    statuses = [str(r["status"] or r["job_status"]) for r in rows]
    status: str
    median: float | None
    spread: float | None
    thr: float | None
    if ok:
        medians = [float(r.get("median_s")) for r in ok]
        median = statistics.median(medians)
        status, spread = RunStatus.OK, max(medians) - min(medians)
        rates = [x for x in (r.samples_per_s for r in ok) if x is not None]
        thr = statistics.median(rates) if rates else None
    else:
        status = next((s for s in FAILURE_PRECEDENCE if s in statuses), statuses[0])
        median = spread = thr = None
    shorts = [(int(r["n_iterations"] or 0), int(r["asked_iterations"] or 0))
              for r in rows if r["status"] == RunStatus.SHORT]
    return ConfigResult(
        framework=str(first["framework"]), model=str(first["model"]),
        batch_size=int(first["batch_size"]), device=str(first["device"]),
        status=status, n_runs=len(ok),
        median_s=median, spread_s=spread, samples_per_s=thr,
        noisy=any(r.noisy for r in ok), packed=any(r.packed for r in ok),
        shared=any(r.shared for r in ok),
        contaminated=any(r.contaminated for r in ok),
        client_bound=any(bool(r.get("client_bound")) for r in ok),
        config_key=first["ident_key"], repeats=sum(int(r["jobs"]) for r in rows),
        runs=tuple(ok),
        identity=first["identity"], host=first["host"], gpu_name=first["gpu_name"],
        short_count=max(shorts) if status == RunStatus.SHORT and shorts else None,
        host_cores=min((cores[r.run_id] for r in ok if r.run_id in cores), default=None),
    )
