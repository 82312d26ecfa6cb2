"""Schema migrations: every one listed in :data:`MIGRATIONS`, in order, applied at open.

``schema_migrations`` records the versions a database has. Each migration runs
in one transaction together with its record, so a failing or interrupted
migration leaves no trace and is tried again at the next open. A database that
records a version this dltop does not know was written by a newer dltop and is
refused (:class:`SchemaTooNew`) before anything is written to it.

Adding a migration: write ``_vN(db)`` in :mod:`dltop.store.schema_steps` and append
``Migration(N, "what it adds", _vN)`` to :data:`MIGRATIONS` here. Never edit a
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dltop.store.fence import v24
from dltop.store.generations import v27
from dltop.store.schema_origin import v25
from dltop.store.schema_slurm import v22, v30
from dltop.store.schema_steps import (
    v1,
    v2,
    v3,
    v4,
    v5,
    v6,
    v7,
    v8,
    v9,
    v10,
    v11,
    v12,
    v13,
    v14,
    v15,
    v16,
    v17,
    v18,
    v19,
    v20,
    v21,
)
from dltop.store.serving import v26, v28, v29, v31, v33, v34, v36, v37
from dltop.store.templates import v23, v32
from dltop.store.tx import transaction


def v35(db: Any) -> None:
    """Migration 35: ``runs.page_faults_per_step`` (the done event's)."""
    db["runs"].add_column("page_faults_per_step", float)


def v38(db: Any) -> None:
    """Migration 38: ``campaigns.waiting_since_s/waiting_devices/waiting_holders``."""
    db["campaigns"].add_column("waiting_since_s", float)
    db["campaigns"].add_column("waiting_devices", str)
    db["campaigns"].add_column("waiting_holders", int)

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


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "campaigns, jobs, runs, iterations, environment", v1),
    Migration(2, "telemetry: gpu_samples, host_samples, per-run telemetry summary", v2),
    Migration(3, "campaigns.control (pause/resume/cancel); runs cooldown before start", v3),
    Migration(4, "campaigns.cancel_run_id: cancel one run, the queue goes on", v4),
    Migration(5, "packing: campaigns.pack; runs record their GPUs, CPUs and concurrent runs; "
                 "cooldown by power: runs.start_power_w", v5),
    Migration(6, "failures counted, not silent: runs.telemetry_read_errors, "
                 "runs.protocol_errors", v6),
    Migration(7, "jobs.config_key: the configuration's full identity (lr, momentum, seed, "
                 "options, ...), recomputed from spec_json", v7),
    Migration(8, "measured window: iterations.t_mono_ns/t_wall_s, t_wall_s on telemetry rows, "
                 "runs.contamination/cpu_foreign_pct/window_s/energy_run_j/telemetry_note/"
                 "tree_cpu_mean_pct",
              v8),
    Migration(9, "host-wide device leases: campaigns.waiting_for (a waiting engine says for "
                 "what), runs.device_lease (held, or why none could be taken)", v9),
    Migration(10, "host CPU split: host_samples.cpu_user_pct/cpu_system_pct/cpu_iowait_pct, "
                  "runs.host_cpu_user_pct/host_cpu_system_pct/host_cpu_iowait_pct; "
                  "environment.driver_version", v10),
    Migration(11, "indexes for the engine's queue and the viewers' reads (jobs by campaign, "
                  "status, position; runs by campaign and status); campaigns.jobs_counted/"
                  "jobs_queued kept by triggers; runs.telemetry_simulated derived from "
                  "gpu_samples for runs stored before", v11),
    Migration(12, "iterations WITHOUT ROWID (no separate primary-key index); run_archive: "
                  "what exports need of a run's raw rows once `dltop prune` deletes them",
              v12),
    Migration(13, "faults stored, not lost: runs.note (the first protocol error, rows that "
                  "could not be stored), campaigns.error_message (why an engine stopped)",
              v13),
    Migration(14, "evals (test accuracy/perplexity/loss per evaluation), profile_ops (top "
                  "operators of a profiled run); runs.plan_iterations, profile_steps/"
                  "profile_step_ms/profile_device, latency_p50_s/latency_p99_s", v14),
    Migration(15, "Slurm: runs.slurm_job_id/slurm_nodes/slurm_state/slurm_reason",
              v15),
    Migration(16, "telemetry from every node: gpu_samples.node, host_samples.node", v16),
    Migration(17, "generations: one row per generation request (TTFT, end-to-end seconds, "
                  "prompt/new tokens, batch, inter-token latencies)", v17),
    Migration(18, "readings behind the telemetry figures: runs.gpu_readings/host_readings",
              v18),
    Migration(19, "energy at the window's edges (runs.energy_bound_j), CPU energy from RAPL "
                  "(runs.cpu_energy_j/dram_energy_j/cpu_energy_bound_j/cpu_joules_per_sample/"
                  "cpu_energy_note), kernel peak RSS (runs.rss_peak_kernel_bytes), the "
                  "framework's GPU memory peak (runs.gpu_mem_framework_peak_bytes)", v19),
    Migration(20, "job_configs: each campaign's configurations with their job count and "
                  "one job's spec, kept by triggers (results read them, not every queued "
                  "job)", v20),
    Migration(21, "views the readers share: latest_runs (the latest run of each job)", v21),
    Migration(22, "engine liveness across hosts: campaigns.engine_host/engine_heartbeat_s; "
                  "Slurm queue time apart and accounting: runs.queue_s/submitted_at/"
                  "slurm_max_rss_bytes/slurm_elapsed_s/slurm_energy_j/slurm_acct_note", v22),
    Migration(23, "job_templates: a campaign's job specs stored once per configuration, "
                  "jobs.template referencing them; the job_specs view (every job's "
                  "config_key and spec_json)", v23),
    Migration(24, "one owner per campaign: campaigns.owner_generation, raised by each "
                  "takeover; an engine's writes are fenced on its own", v24),
    Migration(25, "campaigns.uuid (every campaign's, from an insert trigger; derived from "
                  "the row for those stored before), origin_db/origin_id/imported_at of an "
                  "imported campaign (dltop import)", v25),
    Migration(26, "serve_requests: one row per request of a serve run (schedule, dispatch "
                  "lag, slot wait, first byte, TTFT, e2e, status, error, tokens, chunk times "
                  "and counts); runs.serve_window_s/client_cpu_pct/dispatch_lag_p99_s/"
                  "client_bound", v26),
    Migration(27, "generated tokens: generations.distinct_tokens (per request), "
                  "runs.distinct_token_frac (a generate run's distinct-token fraction)", v27),
    Migration(28, "runs.server_cold_start_s: the cold start of a server dltop started "
                  "(issue 41 item 5)", v28),
    Migration(29, "runs.token_source: what counted a serve run's output tokens (usage, "
                  "tokenize, tokenizer or estimated; issue 41 item 3)", v29),
    Migration(30, "runs.executor: the executor that ran the run, by its registered name "
                  "(older rows: slurm-batch, slurm-step or local, from their Slurm columns)",
              v30),
    Migration(31, "serve_requests.in_flight: the client's requests in flight as each "
                  "ended (the live run panel's, issue 41 item 6)", v31),
    Migration(32, "job_configs counts every job: a job without a config_key gets its spec's, "
                  "and a campaign not fully counted is counted again (results read no job "
                  "row, whatever dltop made the file)", v32),
    Migration(33, "runs.idle_power_w/idle_window_s/idle_readings/cpu_idle_power_w: a serve "
                  "run's GPU (and RAPL CPU) power while idle just before its load (issue 41 "
                  "item 4)", v33),
    Migration(34, "runs.length_forced/short_requests: whether a serve run's requests forced "
                  "their output length, and how many ok ones came back shorter than "
                  "new_tokens (issue 41 item 3)", v34),
    Migration(35, "runs.page_faults_per_step: the runner's page faults over its measured "
                  "steps, per step (a CPU step that maps its buffers afresh each time)", v35),
    Migration(36, "serve_requests.resent/resend_s: how often a request was sent again (its "
                  "pooled connection closed before any byte) and the time that took, which "
                  "its send time now counts (issue 41 item 2)", v36),
    Migration(37, "serve_requests.cached_tokens/max_tokens: the prompt tokens the server "
                  "served from its cache, and the max_tokens each request asked (a "
                  "new_tokens_spread draws its own)", v37),
    Migration(38, "campaigns.waiting_since_s/waiting_devices/waiting_holders: a waiting "
                  "campaign's facts without the holders' identities (pid, user, database: "
                  "waiting_for's text), which the exporter serves", v38),
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


@functools.lru_cache(maxsize=4)
def _columns_after(steps: tuple[Migration, ...]) -> dict[str, frozenset[str]]:
    """Table -> columns of a database with every migration applied (built once, in memory)."""
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
    return [f"{t}.{c}" for t, cols in _columns_after(MIGRATIONS).items() if t in have
            for c in sorted(cols - {col.name for col in db[t].columns})]


def apply(db: sqlite_utils.Database, upto: int | None = None) -> list[int]:
    """Apply every migration the database lacks, in order; return the versions applied.

    Safe against another process opening the same database at once (two engines
    creating one new database): each step is a ``BEGIN IMMEDIATE`` transaction
    that re-reads the recorded versions once it holds the write lock, so a step
    another process applied meanwhile is skipped, never applied twice.

    Args:
        db: the database.
        upto: stop after this version (a database as an older dltop left it, for
            tests and benchmarks of later migrations); ``None``: every migration.

    Raises:
        SchemaTooNew: the database was written by a newer dltop (nothing is written).
    """
    check_known(db)
    wanted = [m for m in MIGRATIONS if upto is None or m.version <= upto]
    # Read without the lock first: an up-to-date database (every open) takes no write lock.
    if not {m.version for m in wanted} - applied_versions(db) and \
            user_version(db) >= max(applied_versions(db), default=0):
        return []
    applied = []
    for m in wanted:
        with transaction(db):  # BEGIN IMMEDIATE: the versions read below cannot change
            check_known(db)  # a newer dltop may have migrated it while we waited
            if TABLE not in db.table_names():
                db.table(TABLE).create({"version": int, "name": str, "applied_at": str},
                                       pk="version")
            if m.version in applied_versions(db):
                continue
            m.apply(db)
            db.table(TABLE).insert({"version": m.version, "name": m.name, "applied_at":
                              time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
            db.execute(f"pragma user_version = {int(m.version)}")
        applied.append(m.version)
    with transaction(db):  # a database migrated before user_version was kept
        newest = max(applied_versions(db), default=0)
        if user_version(db) < newest:
            db.execute(f"pragma user_version = {int(newest)}")
    return applied
