"""The store's API: every INSERT/UPDATE of dltop's tables goes through :class:`Store`.

:class:`Store` writes campaigns, jobs and runs itself and owns one repository per
other table family: :attr:`Store.queue` (the durable queue the engine works from),
:attr:`Store.edits` (a viewer's queue edits) and :attr:`Store.telemetry` (sample
windows and run summaries). Each method is one :func:`~dltop.store.tx.transaction`.

Methods are synchronous and short. The engine calls them from a single
dedicated thread (see :mod:`dltop.jobs.engine`) so the event loop never blocks
on SQLite and there is exactly one write connection per process.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from operator import itemgetter
from typing import Any

import sqlite_utils

from dltop import __version__
from dltop.catalog import ENDED_CAMPAIGN_STATUSES, CampaignStatus, JobStatus, RunStatus
from dltop.profiles.jobspec import JobSpec
from dltop.store.edit import Edits
from dltop.store.fence import COLUMN as GENERATION
from dltop.store.fence import FIRST_GENERATION, Fence, fence_of, set_fence
from dltop.store.generations import COLUMNS as GENERATION_COLUMNS
from dltop.store.generations import TABLE as GENERATIONS
from dltop.store.queue import Queue
from dltop.store.read.runs import marks
from dltop.store.retention import Retention
from dltop.store.rows import (
    insert_jobs,
    insert_row,
    pk,
    update_row,
    upsert_sql,
    utc_now,
)
from dltop.store.serving import COLUMNS as SERVE_COLUMNS
from dltop.store.serving import TABLE as SERVE_REQUESTS
from dltop.store.telemetry import TelemetryWriter
from dltop.store.tx import checkpoint_later, transaction

ITERATION_COLUMNS = ("idx", "seconds", "samples", "warmup", "loss", "t_mono_ns", "t_wall_s")
"""The ``iterations`` columns a row gives (``run_id`` is the call's)."""
ITERATIONS_SQL = upsert_sql("iterations", ITERATION_COLUMNS, run_id="{run_id}")
"""One prepared statement per run (its id a literal, so a row's tuple is built in C)."""
_ITERATION_VALUES = itemgetter(*ITERATION_COLUMNS)
EVAL_COLUMNS = ("idx", "epoch", "accuracy", "perplexity", "loss", "eval_s", "train_s",
                "samples", "t_mono_ns")
"""The ``evals`` columns a row gives (``run_id`` is the call's)."""
EVALS_SQL = upsert_sql("evals", EVAL_COLUMNS)
PROFILE_OP_COLUMNS = ("name", "calls", "self_cpu_ms", "self_device_ms", "total_ms",
                      "share_pct", "shapes")
"""The ``profile_ops`` columns an operator gives (``run_id`` and ``rank`` are the call's)."""
PROFILE_OPS_SQL = (f"insert into profile_ops (run_id, rank, {', '.join(PROFILE_OP_COLUMNS)}) "
                   f"values (?, ?, {marks(PROFILE_OP_COLUMNS)})")
SERVE_SQL = upsert_sql(SERVE_REQUESTS, SERVE_COLUMNS)
GENERATIONS_SQL = upsert_sql(GENERATIONS, GENERATION_COLUMNS)


def _values(run_id: int, rows: Iterable[dict[str, Any]],
            columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's values of ``columns`` after ``run_id`` (a missing key is NULL)."""
    return [(run_id, *(r.get(k) for k in columns)) for r in rows]


class Store:
    """Read and write access to a migrated dltop database, through one connection."""

    def __init__(self, db: sqlite_utils.Database) -> None:
        self.db = db
        self.queue = Queue(db)
        self.edits = Edits(db)
        self.telemetry = TelemetryWriter(db)
        self.retention = Retention(db)  # prune and vacuum (dltop prune | vacuum)

    def transaction(self) -> AbstractContextManager[sqlite_utils.Database]:
        """One transaction around several store calls (each then commits nothing alone)."""
        return transaction(self.db)

    def fence(self, campaign_id: int, generation: int = FIRST_GENERATION) -> None:
        """Fence every later write of this store on owning ``campaign_id`` at ``generation``.

        The engine's store, once it made or claimed the campaign: a write after another
        engine took it over raises :class:`~dltop.store.fence.OwnershipLost` and
        stores nothing (:mod:`dltop.store.fence`).
        """
        set_fence(self.db, Fence(campaign_id, generation))

    @property
    def owner(self) -> Fence | None:
        """The campaign and generation this store's writes are fenced on (None: none)."""
        return fence_of(self.db)

    def checkpoint_later(self) -> AbstractContextManager[None]:
        """No automatic checkpoint in the block (a bulk insert's commit copies nothing);
        the next :meth:`checkpoint` copies the log."""
        return checkpoint_later(self.db)

    # campaigns -------------------------------------------------------------
    def create_campaign(self, name: str, profiles: Sequence[str], argv: Sequence[str],
                        host: str, engine_pid: int, engine_start_time: float | None,
                        *, pack: bool = False) -> int:
        """Insert a campaign row in state ``queued`` (``host``: the engine's too, with its
        first heartbeat, owner generation 1: :meth:`fence` it); return its id."""
        with transaction(self.db):
            row = self.db.table("campaigns").insert({
                "name": name, "profiles": json.dumps(list(profiles)),
                "argv": json.dumps(list(argv)), "status": CampaignStatus.QUEUED,
                "created_at": utc_now(), "host": host, "dltop_version": __version__,
                "engine_pid": engine_pid, "engine_start_time": engine_start_time,
                "pack": int(pack),
                # the engine is this process on this host: its first heartbeat (where the
                # database has the columns: one opened without migrating has not)
                **({"engine_host": host, "engine_heartbeat_s": time.time()}
                   if self.queue.has_heartbeat() else {}),
                **({GENERATION: FIRST_GENERATION} if self.queue.has_generation() else {}),
            })
        return pk(row.last_pk)

    def set_campaign_status(self, campaign_id: int, status: CampaignStatus) -> None:
        """Move a campaign to ``running``, ``finished``, ``cancelled`` or ``failed``."""
        fields: dict[str, Any] = {"status": status}
        if status == CampaignStatus.RUNNING:
            fields["started_at"] = utc_now()
            fields["error_message"] = None  # a failed campaign taken up again
        elif status in ENDED_CAMPAIGN_STATUSES:
            fields["finished_at"] = utc_now()
        with transaction(self.db):
            self.db.table("campaigns").update(campaign_id, fields)

    def fail_campaign(self, campaign_id: int, reason: str) -> None:
        """The engine stopped for ``reason`` (a storage error): ``failed``, reason kept."""
        with transaction(self.db):
            self.db.table("campaigns").update(campaign_id, {
                "status": CampaignStatus.FAILED, "error_message": reason,
                "finished_at": utc_now()})

    def set_control(self, campaign_id: int, control: str | None) -> None:
        """Ask the campaign's engine to ``pause``, ``run`` (resume) or ``cancel``."""
        with transaction(self.db):
            self.db.table("campaigns").update(campaign_id, {"control": control})

    # jobs ------------------------------------------------------------------
    def add_jobs(self, campaign_id: int, jobs: Sequence[JobSpec],
                 statuses: Sequence[JobStatus | RunStatus] | None = None) -> list[int]:
        """Queue ``jobs`` in order; ``statuses`` may pre-set some (e.g. ``unsatisfiable``).

        All or nothing: an interrupted call leaves no job of the list stored. Inside a
        caller's transaction it is that transaction's part, with no savepoint of its own
        (one costs a bulk insert ~40 % more CPU, journalling every page it touches).
        """
        if self.db.conn.in_transaction:
            return list(insert_jobs(self.db, campaign_id, 0, jobs, statuses))
        with transaction(self.db):
            return list(insert_jobs(self.db, campaign_id, 0, jobs, statuses))

    def set_job_status(self, job_id: int, status: JobStatus | RunStatus) -> None:
        """Record a job's queue state (``queued``, ``running`` or a final run status)."""
        with transaction(self.db):
            update_row(self.db, "jobs", job_id, {"status": status})

    # runs ------------------------------------------------------------------
    def start_run(self, job_id: int, campaign_id: int, attempt: int, log_path: str,
                  samples_per_iter: int, executor: str = "local") -> int:
        """Insert a run row in state ``running`` and mark its job running; return its id.
        ``executor``: the registered name of the executor that runs it."""
        with transaction(self.db):
            run_id = insert_row(self.db, "runs", {
                "job_id": job_id, "campaign_id": campaign_id, "attempt": attempt,
                "status": RunStatus.RUNNING, "started_at": utc_now(), "log_path": log_path,
                "samples_per_iter": samples_per_iter, "executor": executor,
            })
            update_row(self.db, "jobs", job_id, {"status": JobStatus.RUNNING})
        return run_id

    def update_run(self, run_id: int, fields: dict[str, Any]) -> None:
        """Set arbitrary run columns (pid, framework version, parameter count...)."""
        if fields:
            with transaction(self.db):
                update_row(self.db, "runs", run_id, fields)

    def add_iterations(self, run_id: int, rows: Iterable[dict[str, Any]]) -> None:
        """Append iteration rows (``idx``, ``seconds``, ``samples``, ``warmup``, ``loss``,
        ``t_mono_ns`` and ``t_wall_s``: the step's end, monotonic ns and epoch seconds;
        a missing key is NULL, another key is not stored). A row of an index already
        stored replaces it."""
        rows = rows if isinstance(rows, list | tuple) else list(rows)
        try:  # the collector's rows have every key: one C call per row builds its tuple
            params = list(map(_ITERATION_VALUES, rows))
            sql = ITERATIONS_SQL.format(run_id=int(run_id))
        except KeyError:
            sql = ITERATIONS_SQL.format(run_id="?")
            params = _values(run_id, rows, ITERATION_COLUMNS)
        self._executemany(sql, params)

    def add_evals(self, run_id: int, rows: Iterable[dict[str, Any]]) -> None:
        """Store a run's evaluations (keys of :data:`EVAL_COLUMNS`; a missing key is NULL).
        A row of an index already stored replaces it."""
        self._executemany(EVALS_SQL, _values(run_id, rows, EVAL_COLUMNS))

    def add_generations(self, run_id: int, rows: Iterable[dict[str, Any]]) -> None:
        """Store a run's generation requests (keys of
        :data:`dltop.store.generations.COLUMNS`, ``itl_s`` already packed; a missing key
        is NULL). A row of an index already stored replaces it."""
        self._executemany(GENERATIONS_SQL, _values(run_id, rows, GENERATION_COLUMNS))

    def add_serve_requests(self, run_id: int, rows: Iterable[dict[str, Any]]) -> None:
        """Store a serve run's requests (keys of :data:`dltop.store.serving.COLUMNS`, the
        chunk arrays already packed; a missing key is NULL). A row of an index already
        stored replaces it."""
        self._executemany(SERVE_SQL, _values(run_id, rows, SERVE_COLUMNS))

    def _executemany(self, sql: str, params: Sequence[Sequence[Any]]) -> None:
        if params:
            with transaction(self.db):
                self.db.conn.executemany(sql, params)

    def set_profile(self, run_id: int, summary: dict[str, Any],
                    ops: Sequence[dict[str, Any]]) -> None:
        """Store a run's operator profile: ``summary`` (``profile_steps``,
        ``profile_step_ms``, ``profile_device`` columns of ``runs``) and its ``ops``
        (keys of :data:`PROFILE_OP_COLUMNS`, ranked in the given order from 1),
        replacing any profile the run had."""
        with transaction(self.db):
            update_row(self.db, "runs", run_id, summary)
            self.db.execute("delete from profile_ops where run_id = ?", [run_id])
            self.db.conn.executemany(PROFILE_OPS_SQL, [
                (run_id, rank, *(op.get(k) for k in PROFILE_OP_COLUMNS))
                for rank, op in enumerate(ops, 1)])

    def finish_run(self, run_id: int, job_id: int, status: RunStatus, fields: dict[str, Any],
                   job_status: JobStatus | RunStatus | None = None) -> None:
        """Close a run with its final status and summary; the job takes ``job_status``."""
        with transaction(self.db):
            update_row(self.db, "runs", run_id, {**fields, "status": status,
                                                 "finished_at": utc_now()})
            update_row(self.db, "jobs", job_id, {"status": job_status or status})

    def record_environment(self, run_id: int, env: dict[str, Any]) -> None:
        """Store the run's environment (host facts plus what the runner reported)."""
        with transaction(self.db):
            self.db.table("environment").insert({"run_id": run_id, **env}, replace=True,
                                                alter=True)

    def checkpoint(self, *, truncate: bool = False) -> bool:
        """Copy the write-ahead log into the database file; True if all of it was copied.

        Without it the ``.db`` file alone lacks everything since the last automatic
        checkpoint (1000 pages) as long as any viewer keeps a connection open. PASSIVE
        never waits; ``truncate`` (at a campaign's end) also empties the ``-wal`` file,
        waiting at most 2 s for readers in the middle of a query.
        """
        row = self.db.execute("pragma wal_checkpoint(passive)").fetchone()
        if truncate and row is not None and row[0] == 0:
            conn = self.db.conn
            busy_ms = conn.execute("pragma busy_timeout").fetchone()[0]
            conn.execute("pragma busy_timeout = 2000")
            try:
                row = conn.execute("pragma wal_checkpoint(truncate)").fetchone()
            finally:
                conn.execute(f"pragma busy_timeout = {int(busy_ms)}")
        return row is None or (row[0] == 0 and row[1] == row[2])
