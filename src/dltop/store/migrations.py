"""Schema migrations: every one listed in :data:`MIGRATIONS`, in order, applied at open.

``schema_migrations`` records the versions a database has. Each migration runs
in one transaction together with its record, so a failing or interrupted
migration leaves no trace and is tried again at the next open. A database that
records a version this dltop does not know was written by a newer dltop and is
refused (:class:`SchemaTooNew`) before anything is written to it.

Adding a migration is one edit, here: write ``_vN(db)`` and append
``Migration(N, "what it adds", _vN)`` to :data:`MIGRATIONS`. Never edit a
released migration's body; its text may be reworded (the stored name is not
compared, and several released names were reworded).

Why not sqlite-utils' ``Migrations`` class: it records migrations by name in its
own ``_sqlite_migrations`` table, while every existing dltop database records
integer versions in ``schema_migrations``, the table by which
:func:`dltop.store.db.connect` recognises a dltop database. Switching would need
a one-off translation of that table and both tables kept in step for older
dltop versions; and the "newer than this dltop" guard needs an order, which
integer versions give and names do not. The registry below is its equivalent in
the parts we use: an ordered list, each step transactional with its record.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.store.tx import transaction

if TYPE_CHECKING:  # read-only opens check the version here without loading sqlite-utils
    import sqlite_utils

TABLE = "schema_migrations"


@dataclass(frozen=True)
class Migration:
    """One schema step: its version, what it adds, and the function adding it."""

    version: int
    name: str
    apply: Callable[[Any], None]


class SchemaTooNew(Exception):
    """The database records migrations this dltop does not know."""

    def __init__(self, unknown: list[int], known: int) -> None:
        super().__init__(f"schema version {max(unknown)}, this dltop knows up to {known}")
        self.unknown = unknown
        self.known = known


def _v1(db: Any) -> None:
    db["campaigns"].create(
        {
            "id": int, "name": str, "profiles": str, "argv": str, "status": str,
            "created_at": str, "started_at": str, "finished_at": str,
            "host": str, "dltop_version": str, "engine_pid": int,
            "engine_start_time": float,
        },
        pk="id", not_null={"name", "status", "created_at"},
    )
    db["jobs"].create(
        {
            "id": int, "campaign_id": int, "position": int, "status": str,
            "profile": str, "framework": str, "model": str, "batch_size": int,
            "device": str, "device_kind": str, "device_count": int, "repeat": int,
            "iterations": int, "warmup": int, "precision": str, "data": str,
            "batch_scaling": str, "timeout_s": float, "config_key": str, "spec_json": str,
        },
        pk="id", foreign_keys=[("campaign_id", "campaigns", "id")],
        not_null={"campaign_id", "status", "framework", "model", "batch_size", "device"},
    )
    db["jobs"].create_index(["campaign_id", "position"])
    db["runs"].create(
        {
            "id": int, "job_id": int, "campaign_id": int, "attempt": int, "status": str,
            "started_at": str, "finished_at": str, "wall_s": float,
            "pid": int, "pgid": int, "proc_start_time": float, "exit_code": int,
            "error_kind": str, "error_message": str, "log_path": str, "log_tail": str,
            "framework_version": str, "device_name": str, "param_count": int,
            "flops_per_sample": float, "samples_per_iter": int,
            "n_iterations": int, "median_s": float, "mean_s": float, "p10_s": float,
            "p90_s": float, "cv": float, "samples_per_s": float, "noisy": int,
            "final_loss": float,
        },
        pk="id",
        foreign_keys=[("job_id", "jobs", "id"), ("campaign_id", "campaigns", "id")],
        not_null={"job_id", "campaign_id", "attempt", "status"},
    )
    db["runs"].create_index(["campaign_id"])
    db["runs"].create_index(["job_id"])
    db["iterations"].create(
        {"run_id": int, "idx": int, "seconds": float, "samples": int, "warmup": int,
         "loss": float},
        pk=("run_id", "idx"), foreign_keys=[("run_id", "runs", "id")],
    )
    db["environment"].create(
        {
            "run_id": int, "host": str, "os": str, "cpu_model": str,
            "physical_cores": int, "logical_cores": int, "python_version": str,
            "python_executable": str, "framework": str, "framework_version": str,
            "blas": str, "threads": int, "thread_env": str, "cuda_version": str,
            "cudnn_version": str, "device_name": str, "extra": str,
        },
        pk="run_id", foreign_keys=[("run_id", "runs", "id")],
    )


# The runs columns migration 2 added, frozen: later summary columns come from later
# migrations, each with its own frozen dict, all joined in RUN_TELEMETRY_COLUMNS below.
_V2_RUN_COLUMNS: dict[str, type] = {
    "gpu_util_mean_pct": float, "gpu_util_peak_pct": float, "gpu_mem_peak_bytes": int,
    "gpu_mem_run_peak_bytes": int, "power_mean_w": float, "energy_j": float,
    "energy_source": str, "joules_per_sample": float, "host_cpu_mean_pct": float,
    "rss_peak_bytes": int, "throttle_reasons": str, "sm_clock_start_mhz": float,
    "sm_clock_end_mhz": float, "contaminated": int, "telemetry_simulated": int,
    "sampler_achieved_hz": float,
}


def _v2(db: Any) -> None:
    db["gpu_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "gpu_index": int, "n": int,
         "util_mean_pct": float, "util_min_pct": float, "util_max_pct": float,
         "mem_used_max_bytes": int, "power_mean_w": float, "power_min_w": float,
         "power_max_w": float, "energy_j": float, "temperature_max_c": float,
         "sm_clock_mhz": float, "simulated": int},
    )
    db["gpu_samples"].create_index(["run_id"])
    db["host_samples"].create(
        {"run_id": int, "t_start_mono_s": float, "n": int, "cpu_mean_pct": float,
         "cpu_max_core_pct": float, "mem_used_bytes": int, "swap_used_bytes": int,
         "tree_cpu_pct": float, "tree_rss_bytes": int},
    )
    db["host_samples"].create_index(["run_id"])
    for name, kind in _V2_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def _v3(db: Any) -> None:
    db["campaigns"].add_column("control", str)
    db["runs"].add_column("cooldown_waited_s", float)
    db["runs"].add_column("start_temp_c", float)


def _v4(db: Any) -> None:
    db["campaigns"].add_column("cancel_run_id", int)


def _v5(db: Any) -> None:
    db["campaigns"].add_column("pack", int)
    db["runs"].add_column("gpu_indices", str)
    db["runs"].add_column("cpu_affinity", str)
    db["runs"].add_column("concurrent_runs", int)
    db["runs"].add_column("start_power_w", float)


_V6_RUN_COLUMNS: dict[str, type] = {"telemetry_read_errors": int}
"""The telemetry summary column migration 6 added (frozen; it also adds protocol_errors,
which the engine fills, not the telemetry summary)."""


def _v6(db: Any) -> None:
    for name, kind in _V6_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)
    db["runs"].add_column("protocol_errors", int)


def _v7(db: Any) -> None:
    from dltop.profiles.model import JobSpec  # 30 ms of imports no other migration needs

    # Recomputed with today's JobSpec: results read identity from spec_json anyway
    # (dltop.results.identity), so this keeps the stored column truthful for SQL users.
    updates = []
    for row in db.query("select id, spec_json from jobs"):
        try:
            key = JobSpec.from_json_dict(json.loads(row["spec_json"])).config_key
        except (KeyError, TypeError, ValueError):
            continue  # an unreadable spec keeps its old key rather than failing the open
        updates.append((key, row["id"]))
    db.conn.executemany("update jobs set config_key = ? where id = ?", updates)


_V8_RUN_COLUMNS: dict[str, type] = {
    "contamination": str, "cpu_foreign_pct": float, "window_s": float, "energy_run_j": float,
    "telemetry_note": str, "tree_cpu_mean_pct": float,
}


def _v8(db: Any) -> None:
    db["iterations"].add_column("t_mono_ns", int)
    db["iterations"].add_column("t_wall_s", float)
    db["gpu_samples"].add_column("t_wall_s", float)
    db["host_samples"].add_column("t_wall_s", float)
    for name, kind in _V8_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)


def _v9(db: Any) -> None:
    db["campaigns"].add_column("waiting_for", str)
    db["runs"].add_column("device_lease", str)


_V10_RUN_COLUMNS: dict[str, type] = {
    "host_cpu_user_pct": float, "host_cpu_system_pct": float, "host_cpu_iowait_pct": float,
}


def _v10(db: Any) -> None:
    for name in ("cpu_user_pct", "cpu_system_pct", "cpu_iowait_pct"):
        db["host_samples"].add_column(name, float)
    for name, kind in _V10_RUN_COLUMNS.items():
        db["runs"].add_column(name, kind)
    db["environment"].add_column("driver_version", str)


def _v11(db: Any) -> None:
    # The engine's next-job query walks this index in queue order and reads the device
    # from it (covering); progress and the end-of-queue check count within it.
    db.execute("create index if not exists idx_jobs_queue on jobs "
               "(campaign_id, status, position, device_kind, device_count, device)")
    db.execute("create index if not exists idx_runs_campaign_status on runs "
               "(campaign_id, status)")
    # The engine's progress (done, total) at every job start, read from one row: counts
    # kept by triggers, so that every writer (engine, viewer edits, SQL) keeps them true.
    for name in ("jobs_counted", "jobs_queued"):
        db["campaigns"].add_column(name, int, not_null_default=0)
    counted = "not in ('removed', 'unsatisfiable')"

    def delta(row: str, sign: str) -> str:
        return (f"jobs_counted = jobs_counted {sign} ({row}.status {counted}), "
                f"jobs_queued = jobs_queued {sign} ({row}.status = 'queued')")

    db.execute(f"create trigger jobs_count_insert after insert on jobs begin "
               f"update campaigns set {delta('new', '+')} where id = new.campaign_id; end")
    db.execute(f"create trigger jobs_count_delete after delete on jobs begin "
               f"update campaigns set {delta('old', '-')} where id = old.campaign_id; end")
    db.execute(f"create trigger jobs_count_update after update of status, campaign_id on jobs "
               f"begin update campaigns set {delta('old', '-')} where id = old.campaign_id; "
               f"update campaigns set {delta('new', '+')} where id = new.campaign_id; end")
    db.execute(f"update campaigns set jobs_counted = (select count(*) from jobs j where "
               f"j.campaign_id = campaigns.id and j.status {counted}), jobs_queued = (select "
               f"count(*) from jobs j where j.campaign_id = campaigns.id and j.status = 'queued')")
    # Exports read runs.telemetry_simulated instead of counting gpu_samples. Before this
    # migration the engine set it only for runs holding a GPU, while a CPU run on
    # simulated GPUs owned simulated rows too: derive it once from the rows.
    db.execute("update runs set telemetry_simulated = 1 where telemetry_simulated is not 1 "
               "and exists (select 1 from gpu_samples g where g.run_id = runs.id "
               "and g.simulated = 1)")


def _v12(db: Any) -> None:
    # iterations as a WITHOUT ROWID table: the rows live in the (run_id, idx) key's
    # B-tree itself, so the separate primary-key index (about a third of the table's
    # size) goes. Same columns, same order, same key and foreign key; rows copied.
    # A row with a NULL key (never written by dltop) cannot be in such a table.
    conn = db.conn
    cols = [(r[1], r[2] or "") for r in conn.execute("pragma table_info(iterations)")]
    indexes = [r[0] for r in conn.execute(
        "select sql from sqlite_master where type = 'index' and tbl_name = 'iterations' "
        "and sql is not null")]
    names = ", ".join(f"[{name}]" for name, _ in cols)
    defs = ", ".join(f"[{name}] {kind}".strip() for name, kind in cols)
    conn.execute(f"create table iterations_v12 ({defs}, primary key (run_id, idx), "
                 "foreign key (run_id) references runs(id)) without rowid")
    conn.execute(f"insert into iterations_v12 ({names}) select {names} from iterations "
                 "where run_id is not null and idx is not null")
    conn.execute("drop table iterations")
    conn.execute("alter table iterations_v12 rename to iterations")
    for sql in indexes:
        conn.execute(sql)
    # What exports read from a run's raw rows, kept when `dltop prune` deletes them
    # (dltop.store.retention): the measured iterations, packed; the mean process-tree
    # CPU over every host sample; whether any GPU sample was simulated.
    db["run_archive"].create(
        {"run_id": int, "pruned_at": str, "n_measured": int, "measured_seconds": bytes,
         "measured_samples": bytes, "tree_cpu_all_pct": float, "gpu_simulated": int,
         "iterations": int, "gpu_samples": int, "host_samples": int},
        pk="run_id", foreign_keys=[("run_id", "runs", "id")], not_null={"pruned_at"},
    )


def _v13(db: Any) -> None:
    db["runs"].add_column("note", str)
    db["campaigns"].add_column("error_message", str)


def _v14(db: Any) -> None:
    # Convergence, inference and operator profiles (issue 17). Both tables are keyed by
    # (run_id, ...) WITHOUT ROWID, as iterations: their rows are read per run.
    db.conn.execute(
        "create table evals (run_id integer not null references runs(id), idx integer not null, "
        "epoch float, accuracy float, perplexity float, loss float, eval_s float, "
        "train_s float, samples integer, t_mono_ns integer, primary key (run_id, idx)) "
        "without rowid")
    db.conn.execute(
        "create table profile_ops (run_id integer not null references runs(id), "
        "rank integer not null, name text, calls integer, self_cpu_ms float, "
        "self_device_ms float, total_ms float, share_pct float, shapes text, "
        "primary key (run_id, rank)) without rowid")
    for name, kind in (("plan_iterations", int), ("profile_steps", int),
                       ("profile_step_ms", float), ("profile_device", str),
                       ("latency_p50_s", float), ("latency_p99_s", float)):
        db["runs"].add_column(name, kind)


RUN_TELEMETRY_COLUMNS: dict[str, type] = {**_V2_RUN_COLUMNS, **_V6_RUN_COLUMNS,
                                          **_V8_RUN_COLUMNS, **_V10_RUN_COLUMNS}
"""Every ``runs`` column a telemetry summary fills (the writer's list,
:data:`dltop.store.telemetry.RUN_COLUMNS`). A migration that adds summary columns
defines its own frozen dict, adds them from it, and joins it here: one edit, in this file.
"""


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "campaigns, jobs, runs, iterations, environment", _v1),
    Migration(2, "telemetry: gpu_samples, host_samples, per-run telemetry summary", _v2),
    Migration(3, "campaigns.control (pause/resume/cancel); runs cooldown before start", _v3),
    Migration(4, "campaigns.cancel_run_id: cancel one run, the queue goes on", _v4),
    Migration(5, "packing: campaigns.pack; runs record their GPUs, CPUs and concurrent runs; "
                 "cooldown by power: runs.start_power_w", _v5),
    Migration(6, "failures counted, not silent: runs.telemetry_read_errors, "
                 "runs.protocol_errors", _v6),
    Migration(7, "jobs.config_key: the configuration's full identity (lr, momentum, seed, "
                 "options, ...), recomputed from spec_json", _v7),
    Migration(8, "measured window: iterations.t_mono_ns/t_wall_s, t_wall_s on telemetry rows, "
                 "runs.contamination/cpu_foreign_pct/window_s/energy_run_j/telemetry_note/"
                 "tree_cpu_mean_pct",
              _v8),
    Migration(9, "host-wide device leases: campaigns.waiting_for (a waiting engine says for "
                 "what), runs.device_lease (held, or why none could be taken)", _v9),
    Migration(10, "host CPU split: host_samples.cpu_user_pct/cpu_system_pct/cpu_iowait_pct, "
                  "runs.host_cpu_user_pct/host_cpu_system_pct/host_cpu_iowait_pct; "
                  "environment.driver_version", _v10),
    Migration(11, "indexes for the engine's queue and the viewers' reads (jobs by campaign, "
                  "status, position; runs by campaign and status); campaigns.jobs_counted/"
                  "jobs_queued kept by triggers; runs.telemetry_simulated derived from "
                  "gpu_samples for runs stored before", _v11),
    Migration(12, "iterations WITHOUT ROWID (no separate primary-key index); run_archive: "
                  "what exports need of a run's raw rows once `dltop prune` deletes them",
              _v12),
    Migration(13, "faults stored, not lost: runs.note (the first protocol error, rows that "
                  "could not be stored), campaigns.error_message (why an engine stopped)",
              _v13),
    Migration(14, "evals (test accuracy/perplexity/loss per evaluation), profile_ops (top "
                  "operators of a profiled run); runs.plan_iterations, profile_steps/"
                  "profile_step_ms/profile_device, latency_p50_s/latency_p99_s", _v14),
)
"""Every schema step, in the order applied: versions 1, 2, ... without gaps."""


def applied_versions(db: sqlite_utils.Database) -> set[int]:
    """The versions the database records (empty for a new database)."""
    if TABLE not in db.table_names():
        return set()
    return {int(r["version"]) for r in db.query(f"select version from {TABLE}")}


def check_known(db: sqlite_utils.Database) -> None:
    """Refuse a database written by a newer dltop (it records versions we do not know).

    Raises:
        SchemaTooNew: the database records an unknown migration version.
    """
    known = {m.version for m in MIGRATIONS}
    unknown = sorted(applied_versions(db) - known)
    # user_version too: a database whose header claims a newer schema is refused even
    # when its schema_migrations table does not say so.
    claimed = user_version(db)
    if claimed > max(known):
        unknown = sorted({*unknown, claimed})
    if unknown:
        raise SchemaTooNew(unknown, max(known))


def user_version(db: sqlite_utils.Database) -> int:
    """``PRAGMA user_version``: the newest migration applied (0 before this was recorded)."""
    return int(db.execute("pragma user_version").fetchone()[0])


def expected_columns() -> dict[str, frozenset[str]]:
    """Table -> columns of a database with every migration applied (built once, in memory)."""
    return _columns_after(MIGRATIONS)


@functools.lru_cache(maxsize=4)
def _columns_after(steps: tuple[Migration, ...]) -> dict[str, frozenset[str]]:
    # `steps` is the cache key: apply() reads MIGRATIONS, which it is (tests swap it).
    import sqlite_utils

    db = sqlite_utils.Database(memory=True)
    apply(db)
    return {t: frozenset(c.name for c in db[t].columns) for t in db.table_names()}


def missing_columns(db: sqlite_utils.Database) -> list[str]:
    """``table.column`` of every expected column the database lacks (a schema changed by hand).

    Costs a migration of an in-memory database once per process: called when opening a
    database for writing, and to explain a failed query, not on every read.
    """
    have = set(db.table_names())
    return [f"{t}.{c}" for t, cols in expected_columns().items() if t in have
            for c in sorted(cols - {col.name for col in db[t].columns})]


def apply(db: sqlite_utils.Database, upto: int | None = None) -> list[int]:
    """Apply every migration the database lacks, in order; return the versions applied.

    Args:
        db: the database.
        upto: stop after this version (a database as an older dltop left it, for
            tests and benchmarks of later migrations); ``None``: every migration.

    Raises:
        SchemaTooNew: the database was written by a newer dltop (nothing is written).
    """
    check_known(db)
    if TABLE not in db.table_names():
        with transaction(db):
            db.table(TABLE).create({"version": int, "name": str, "applied_at": str}, pk="version")
    done = applied_versions(db)
    applied = []
    for m in MIGRATIONS:
        if m.version in done or (upto is not None and m.version > upto):
            continue
        with transaction(db):
            m.apply(db)
            db.table(TABLE).insert({"version": m.version, "name": m.name, "applied_at":
                              time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            db.execute(f"pragma user_version = {int(m.version)}")
        applied.append(m.version)
    newest = max(done | set(applied), default=0)
    if user_version(db) < newest:  # a database migrated before user_version was kept
        with transaction(db):
            db.execute(f"pragma user_version = {int(newest)}")
    return applied
